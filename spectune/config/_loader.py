"""Safe YAML/JSON loading that remembers where every value came from.

``read_mapping`` parses with PyYAML's safe composer (JSON is read by the same parser, so JSON files
get line numbers too), walks the node tree once and returns plain Python data plus a map from each
dotted path to its line. Duplicate keys, NaN/inf, absurd sizes, deep nesting and alias bombs are
refused here with a located message; pydantic errors are mapped back to lines by
``spectune.config._messages``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from spectune._files import read_bounded
from spectune.errors import DocumentError, Problem

__all__ = ["MAX_DOCUMENT_BYTES", "Positions", "SourceMapping", "dotted_path", "parse_mapping_text", "read_mapping"]

MAX_DOCUMENT_BYTES = 4 * 1024 * 1024
MAX_NODES = 200_000  # counted after alias expansion: a billion-laughs document stops here
MAX_DEPTH = 64
MAX_STRING_CHARS = 100_000
MAX_ABS_INT = 2**63 - 1

Path_ = tuple[str | int, ...]


@dataclass
class Positions:
    """1-based line of each value (and of each mapping key) by its path in the document."""

    values: dict[Path_, int] = field(default_factory=dict)
    keys: dict[Path_, int] = field(default_factory=dict)

    def line_of(self, path: Path_, *, key: bool = False) -> int | None:
        """The line of ``path``, or of its deepest ancestor present in the document."""
        if key and path in self.keys:
            return self.keys[path]
        for end in range(len(path), -1, -1):
            prefix = path[:end]
            if prefix in self.values:
                return self.values[prefix]
        return None


@dataclass
class SourceMapping:
    """A parsed top-level mapping, where it came from, and its positions."""

    file: str
    data: dict[str, Any]
    positions: Positions
    overrides: dict[Path_, str] = field(default_factory=dict)  # path -> the --set expression that wrote it


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads 1e3 / 1E-5 (no dot) as floats, as JSON and YAML 1.2 do."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Walker:
    def __init__(self, file: str) -> None:
        self.file = file
        self.positions = Positions()
        self.problems: list[Problem] = []
        self.nodes = 0
        self.constructor = _Loader("")
        self.resolved: dict[int, dict[str, tuple[yaml.Node, yaml.Node]]] = {}  # by id(mapping node)
        self.resolving: set[int] = set()

    def _chosen_pairs(self, node: yaml.MappingNode, path: Path_) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        """The (key, value) nodes a mapping holds once its merge keys (``<<``) are resolved, by key.

        A key written in the mapping overrides one it merges (that is what merge keys are for), and a
        mapping merged earlier in ``<<: [*a, *b]`` overrides a later one (the YAML merge-key spec,
        yaml.org/type/merge.html); a key written twice in the mapping itself is refused, since plain
        YAML would silently keep the last. Resolved here rather than by PyYAML's ``flatten_mapping``,
        which lets a merged value win over the merged mapping's own override one level down.
        """
        cached = self.resolved.get(id(node))
        if cached is not None:
            return cached
        if id(node) in self.resolving:
            self.fail(node, path, "a mapping merges itself (<<: through its own anchor)")
            return {}
        self.resolving.add(id(node))
        own: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        sources: list[yaml.Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                sources.extend(value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node])
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                self.fail(key_node, path, "mapping keys must be plain strings, got a collection")
                continue
            key = self.constructor.construct_object(key_node)
            if not isinstance(key, str):
                key = str(key)
            if key in own:
                first = own[key][0].start_mark.line + 1
                self.fail(
                    key_node,
                    path + (key,),
                    f"duplicate key '{key}' (first on line {first}); YAML would silently keep the last",
                )
                continue
            own[key] = (key_node, value_node)
        chosen: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for source in sources:
            if not isinstance(source, yaml.MappingNode):
                self.fail(
                    source,
                    path,
                    f"<< (a merge key) takes a mapping or a list of mappings, got a {type(source).__name__.removesuffix('Node').lower()}",
                )
                continue
            for key, pair in self._chosen_pairs(source, path).items():
                chosen.setdefault(key, pair)
        chosen.update(own)
        self.resolving.discard(id(node))
        self.resolved[id(node)] = chosen
        return chosen

    def fail(self, node: yaml.Node, path: Path_, message: str) -> None:
        self.problems.append(Problem(self.file, node.start_mark.line + 1, dotted_path(path), message))

    def walk(self, node: yaml.Node, path: Path_, depth: int) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _TooLarge(f"document expands to more than {MAX_NODES} values (aliases included); refusing it")
        if depth > MAX_DEPTH:
            raise _TooLarge(f"document is nested more than {MAX_DEPTH} levels deep; refusing it")
        self.positions.values.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            result: dict[Any, Any] = {}
            for key, (key_node, value_node) in self._chosen_pairs(node, path).items():
                self.positions.keys[path + (key,)] = key_node.start_mark.line + 1
                result[key] = self.walk(value_node, path + (key,), depth + 1)
            return result
        if isinstance(node, yaml.SequenceNode):
            return [self.walk(item, path + (i,), depth + 1) for i, item in enumerate(node.value)]
        value = self.constructor.construct_object(node)
        if isinstance(value, float) and not math.isfinite(value):
            self.fail(node, path, f"must be a finite number, got {value}")
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_ABS_INT:
            self.fail(node, path, f"integer out of range (|value| <= 2^63-1), got {str(value)[:30]}…")
        elif isinstance(value, str) and len(value) > MAX_STRING_CHARS:
            self.fail(node, path, f"string longer than {MAX_STRING_CHARS} characters ({len(value)})")
            value = value[:100]
        elif isinstance(value, bytes | bytearray):
            self.fail(node, path, "binary values are not allowed")
        return value


class _TooLarge(Exception):
    pass


def dotted_path(path: Path_) -> str:
    """('a', 'b', 2, 'c') -> 'a.b[2].c'."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def parse_mapping_text(text: str, file: str) -> SourceMapping:
    """Parse one YAML/JSON document that must be a mapping; raise ``DocumentError`` on any problem."""
    if len(text.encode("utf-8", errors="replace")) > MAX_DOCUMENT_BYTES:
        raise DocumentError([Problem(file, None, "", f"file is larger than {MAX_DOCUMENT_BYTES // 1024 // 1024} MiB")])
    if not text.strip() or all(not line.strip() or line.lstrip().startswith("#") for line in text.splitlines()):
        raise DocumentError([Problem(file, 1, "", "file is empty; expected a mapping of fields")])
    loader = _Loader(text)
    try:
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark is not None else None
        detail = " ".join(str(part) for part in (err.context, err.problem) if part)
        raise DocumentError([Problem(file, line, "", f"YAML syntax error: {detail}")]) from None
    except yaml.YAMLError as err:
        raise DocumentError([Problem(file, None, "", f"YAML error: {err}")]) from None
    except RecursionError:
        raise DocumentError([Problem(file, None, "", f"document is nested too deeply (limit {MAX_DEPTH})")]) from None
    if node is None:
        raise DocumentError([Problem(file, 1, "", "file is empty; expected a mapping of fields")])
    if not isinstance(node, yaml.MappingNode):
        kind = "a list" if isinstance(node, yaml.SequenceNode) else f"a scalar ({node.value!r:.40})"
        raise DocumentError([Problem(file, node.start_mark.line + 1, "", f"expected a mapping of fields, got {kind}")])
    walker = _Walker(file)
    try:
        data = walker.walk(node, (), 0)
    except _TooLarge as err:
        raise DocumentError([Problem(file, None, "", str(err))]) from None
    except RecursionError:
        raise DocumentError([Problem(file, None, "", f"document is nested too deeply (limit {MAX_DEPTH})")]) from None
    except yaml.YAMLError as err:
        raise DocumentError([Problem(file, None, "", f"YAML error: {err}")]) from None
    if walker.problems:
        raise DocumentError(walker.problems)
    return SourceMapping(file=file, data=data, positions=walker.positions)


def read_mapping(path: Path) -> SourceMapping:
    """Read ``path`` (.yaml, .yml or .json) as a located mapping; raise ``DocumentError`` on any problem."""
    file = str(path)
    raw = read_bounded(path, MAX_DOCUMENT_BYTES)  # whatever it is: a pipe or /dev/zero has no size to trust
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise DocumentError([Problem(file, None, "", f"not UTF-8 text (byte {err.start})")]) from None
    if path.suffix.lower() == ".json":
        _check_json_syntax(text, file)
    return parse_mapping_text(text, file)


def _check_json_syntax(text: str, file: str) -> None:
    """JSON files must be strict JSON (no NaN, no trailing commas); YAML then supplies the positions."""

    def reject_constant(name: str) -> None:
        raise ValueError(f"{name} is not a number JSON allows")

    try:
        json.loads(text, parse_constant=reject_constant)
    except json.JSONDecodeError as err:
        raise DocumentError([Problem(file, err.lineno, "", f"JSON syntax error: {err.msg}")]) from None
    except ValueError as err:
        raise DocumentError([Problem(file, None, "", f"must be a finite number: {err}")]) from None
    except RecursionError:
        raise DocumentError([Problem(file, None, "", f"document is nested too deeply (limit {MAX_DEPTH})")]) from None

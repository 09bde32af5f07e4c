"""``--set dotted.field=VALUE`` overrides, applied to a parsed document before validation.

VALUE is read as YAML (``3``, ``0.5``, ``true``, ``[1, 2]``, ``{a: 1}``, or a plain string), so an
override is validated exactly like the same value written in the file; problems with it are reported
against the ``--set`` argument instead of a line.
"""

from __future__ import annotations

import re
from typing import Any

from spectune.config._loader import SourceMapping, parse_mapping_text
from spectune.errors import DocumentError, Problem

__all__ = ["apply_overrides", "parse_override"]

_SEGMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_\-]*)|\[(\d+)\]")


def parse_override(expression: str) -> tuple[tuple[str | int, ...], Any]:
    """``a.b[2].c=VALUE`` -> (("a", "b", 2, "c"), parsed VALUE); raise ``DocumentError`` if malformed."""
    where = f"--set {expression}"
    path_text, sep, value_text = expression.partition("=")
    if not sep or not path_text.strip():
        raise DocumentError([Problem(where, None, "", "must look like dotted.field=VALUE")])
    path: list[str | int] = []
    for part in path_text.strip().split("."):
        segments = list(_SEGMENT.finditer(part))
        if not segments or "".join(m.group(0) for m in segments) != part:
            raise DocumentError(
                [Problem(where, None, "", f"bad field path {path_text!r}: use names, dots and [index]")]
            )
        for match in segments:
            path.append(match.group(1) if match.group(1) is not None else int(match.group(2)))
    if not isinstance(path[0], str):
        raise DocumentError([Problem(where, None, "", "the path must start with a field name")])
    try:
        value = parse_mapping_text(f"value: {value_text}\n" if value_text.strip() else "value: ''\n", where).data[
            "value"
        ]
    except DocumentError as err:
        raise DocumentError([Problem(where, None, "", p.message) for p in err.problems]) from None
    return tuple(path), value


def apply_overrides(source: SourceMapping, expressions: list[str]) -> SourceMapping:
    """A copy of ``source`` with each override applied (creating missing mappings on the way)."""
    data = _deep_copy(source.data)
    overrides = dict(source.overrides)
    for expression in expressions:
        path, value = parse_override(expression)
        target: Any = data
        for depth, key in enumerate(path[:-1]):
            nxt = path[depth + 1]
            if isinstance(key, int):
                if not isinstance(target, list) or key >= len(target):
                    raise DocumentError([Problem(f"--set {expression}", None, "", f"index [{key}] is out of range")])
                target = target[key]
                continue
            if not isinstance(target, dict):
                raise DocumentError(
                    [Problem(f"--set {expression}", None, "", f"'{key}' is inside a value that is not a mapping")]
                )
            if key not in target:
                target[key] = [] if isinstance(nxt, int) else {}
            target = target[key]
        last = path[-1]
        if isinstance(last, int):
            if not isinstance(target, list) or last > len(target):
                raise DocumentError([Problem(f"--set {expression}", None, "", f"index [{last}] is out of range")])
            if last == len(target):
                target.append(value)
            else:
                target[last] = value
        elif isinstance(target, dict):
            target[last] = value
        else:
            raise DocumentError(
                [Problem(f"--set {expression}", None, "", f"'{last}' is inside a value that is not a mapping")]
            )
        overrides[path] = expression
    return SourceMapping(file=source.file, data=data, positions=source.positions, overrides=overrides)


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value

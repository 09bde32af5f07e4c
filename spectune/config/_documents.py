"""Document kinds, and loading a file as whichever kind it declares.

A file holds one mapping. Without a ``kind`` key it is a bare speculative config -- exactly what vLLM's
``--speculative-config`` takes -- or a vLLM serve config file whose ``speculative_config`` (or
``speculative-config``) key holds one. Every other spectune document names its kind
(``kind: simulation``, ``kind: study``, ...); each kind is a model registered in ``DOCUMENT_KINDS``.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from spectune.config._loader import SourceMapping, dotted_path, read_mapping
from spectune.config._messages import problems_from_validation_error
from spectune.config._profile import AcceptanceProfile
from spectune.config._simulation import SimulationDocument
from spectune.config._speculative import SpeculativeConfig
from spectune.config._study import StudyDocument
from spectune.errors import DocumentError, Problem

__all__ = [
    "DOCUMENT_KINDS",
    "DOCUMENT_SUFFIXES",
    "LoadedDocument",
    "find_documents",
    "load_document",
    "validate_source",
]

DOCUMENT_SUFFIXES = (".yaml", ".yml", ".json")

# kind -> model. Models other than the bare speculative config carry a ``kind: Literal[...]`` field.
DOCUMENT_KINDS: dict[str, type[BaseModel]] = {
    "speculative": SpeculativeConfig,
    "acceptance_profile": AcceptanceProfile,
    "simulation": SimulationDocument,
    "study": StudyDocument,
}

_SERVE_CONFIG_KEYS = ("speculative_config", "speculative-config")


@dataclass(frozen=True)
class LoadedDocument:
    """A validated document: its kind, the frozen model, and notices (warnings) found on the way."""

    kind: str
    model: Any
    notices: list[Problem]
    source: SourceMapping


def _known_fields() -> set[str]:
    names: set[str] = set()

    def collect(model: type[BaseModel]) -> None:
        for name, info in model.model_fields.items():
            names.add(name)
            for arg in _nested_models(info.annotation):
                if arg.__name__ not in seen:
                    seen.add(arg.__name__)
                    collect(arg)

    seen: set[str] = set()
    for model in DOCUMENT_KINDS.values():
        collect(model)
    return names


def _nested_models(annotation: Any) -> Iterable[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        yield from _nested_models(arg)


def validate_source(source: SourceMapping, *, expect: str | None = None) -> LoadedDocument:
    """Validate a parsed mapping as the kind it declares; raise ``DocumentError`` listing every problem."""
    data = source.data
    prefix: tuple[str | int, ...] = ()
    kind = data.get("kind", "speculative")
    if not isinstance(kind, str) or kind not in DOCUMENT_KINDS:
        allowed = ", ".join(sorted(DOCUMENT_KINDS))
        line = source.positions.line_of(("kind",))
        raise DocumentError([Problem(source.file, line, "kind", f"must be one of {allowed}, got {kind!r}")])
    if kind == "speculative":
        data = {key: value for key, value in data.items() if key != "kind"}
        embedded = [key for key in _SERVE_CONFIG_KEYS if key in data]
        if embedded:
            prefix = (embedded[0],)
            data = _embedded_speculative_config(source, embedded[0])
        elif "kind" not in source.data:
            _check_not_a_kindless_document(source)
    if expect is not None and kind != expect:
        line = source.positions.line_of(("kind",))
        raise DocumentError([Problem(source.file, line, "kind", f"expected a {expect} document here, got {kind!r}")])
    notices: list[tuple[tuple[str | int, ...], str]] = []
    context = {"notices": notices, "base_dir": Path(source.file).parent}
    try:
        model = DOCUMENT_KINDS[kind].model_validate(data, context=context)
    except ValidationError as err:
        problems = problems_from_validation_error(
            err, file=source.file, positions=source.positions, prefix=prefix, known_fields=_known_fields()
        )
        raise DocumentError([_blame_override(source, p) for p in problems]) from None
    problems = []
    for path, message in notices:
        full = _locate_notice(source, prefix + tuple(path))
        line = source.positions.line_of(full)
        problems.append(Problem(source.file, line, dotted_path(full), message, severity="warning"))
    return LoadedDocument(kind=kind, model=model, notices=problems, source=source)


def _field_names(model: type[BaseModel]) -> set[str]:
    return set(model.model_fields) | {info.alias for info in model.model_fields.values() if info.alias}


def _check_not_a_kindless_document(source: SourceMapping) -> None:
    """A spectune document that lost its ``kind`` line would read as a bare speculative config, and get
    one 'unknown field' per section; name the missing line instead."""
    keys = [key for key in source.data if key not in _field_names(SpeculativeConfig)]
    others = {kind: _field_names(model) for kind, model in DOCUMENT_KINDS.items() if kind != "speculative"}
    foreign = [key for key in keys if any(key in names for names in others.values())]
    if not foreign:
        return
    guess = max(others, key=lambda kind: sum(key in others[kind] for key in source.data))
    raise DocumentError(
        [
            Problem(
                source.file, 1, "kind",
                f"required: without it a file is a bare speculative config, but {', '.join(foreign[:4])} "
                f"{'are fields' if len(foreign) > 1 else 'is a field'} of spectune documents; add 'kind: {guess}' "
                f"(kinds: {', '.join(sorted(others))})",
            )
        ]
    )  # fmt: skip


def _blame_override(source: SourceMapping, problem: Problem) -> Problem:
    """A problem inside a value that came from ``--set`` is reported against that argument."""
    for path, expression in source.overrides.items():
        dotted = dotted_path(path)
        # The override's value, what lies inside it, or a mapping the override created on its way there.
        created = [dotted_path(path[:end]) for end in range(1, len(path)) if path[:end] not in source.positions.values]
        if problem.field == dotted or problem.field.startswith((dotted + ".", dotted + "[")) or problem.field in created:
            return Problem(f"--set {expression}", None, problem.field, problem.message, problem.severity)
    return problem


def _embedded_speculative_config(source: SourceMapping, key: str) -> Any:
    value = source.data[key]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            line = source.positions.line_of((key,))
            raise DocumentError([Problem(source.file, line, key, f"must be a JSON object or a mapping: {err.msg}")]) from None
    if not isinstance(value, dict):
        line = source.positions.line_of((key,))
        raise DocumentError([Problem(source.file, line, key, f"must be a mapping, got {type(value).__name__}")])
    return value


def _locate_notice(source: SourceMapping, path: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """Notices carry the path inside the model that raised them; find where that sits in the document."""
    if path in source.positions.values:
        return path
    candidates = [p for p in source.positions.values if p[-len(path):] == path] if path else []
    return min(candidates, key=len) if candidates else path


def load_document(path: Path, *, expect: str | None = None) -> LoadedDocument:
    """Read and validate one document file; raise ``DocumentError`` on any problem."""
    return validate_source(read_mapping(path), expect=expect)


def find_documents(paths: Iterable[Path]) -> tuple[list[Path], list[Problem]]:
    """Expand directories (recursively) into document files; report paths that do not exist."""
    files: list[Path] = []
    problems: list[Problem] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in DOCUMENT_SUFFIXES)
            if not found:
                problems.append(Problem(str(path), None, "", f"directory holds no {', '.join(DOCUMENT_SUFFIXES)} files"))
            files.extend(found)
        elif path.exists():
            files.append(path)
        elif path.is_symlink():
            problems.append(Problem(str(path), None, "", _broken_link(path)))
        else:
            problems.append(Problem(str(path), None, "", "no such file or directory"))
    return files, problems


def _broken_link(path: Path) -> str:
    try:
        path.stat()
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "symbolic link loop (the link points back to itself)"
    return f"symbolic link to {os.readlink(path)!r}, which does not exist"

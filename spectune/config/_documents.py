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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from spectune.config._loader import SourceMapping, dotted_path, read_mapping
from spectune.config._messages import problems_from_validation_error
from spectune.config._profile import AcceptanceProfile
from spectune.config._simulation import PROFILE_RATE_KEYS, AcceptanceSource, SimulationDocument
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
        raise DocumentError(
            [_blame_override(source, Problem(source.file, line, "kind", f"must be one of {allowed}, got {kind!r}"))]
        )
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
        wrong = Problem(source.file, line, "kind", f"expected a {expect} document here, got {kind!r}")
        raise DocumentError([_blame_override(source, wrong)])
    data, unread = _read_profiles(source, DOCUMENT_KINDS[kind], data, prefix)
    notices: list[tuple[tuple[str | int, ...], str]] = []
    context = {"notices": notices, "base_dir": Path(source.file).parent}
    try:
        model = DOCUMENT_KINDS[kind].model_validate(data, context=context)
    except ValidationError as err:
        problems = problems_from_validation_error(
            err, file=source.file, positions=source.positions, prefix=prefix, known_fields=_known_fields()
        )
        # An unreadable profile leaves its acceptance without rates: its own problem says why.
        problems = [p for p in problems if not any(_within(p.field, where) for where in unread)]
        raise DocumentError(
            [p for ps in unread.values() for p in ps] + [_blame_override(source, p) for p in problems]
        ) from None
    if unread:
        raise DocumentError([p for ps in unread.values() for p in ps])
    problems = []
    for path, message in notices:
        full = _locate_notice(source, prefix + tuple(path))
        line = source.positions.line_of(full)
        problems.append(Problem(source.file, line, dotted_path(full), message, severity="warning"))
    return LoadedDocument(kind=kind, model=model, notices=problems, source=source)


def _read_profiles(
    source: SourceMapping, model: type[BaseModel], data: dict[str, Any], prefix: tuple[str | int, ...]
) -> tuple[dict[str, Any], dict[str, list[Problem]]]:
    """``data`` with each acceptance's ``profile`` reference read into its rates, and the problems of the
    references that could not be read (by the acceptance's dotted path).

    Reading here, before validation, keeps disk access out of the models: a model validator that loaded
    another document would make the models import this registry.
    """
    unread: dict[str, list[Problem]] = {}
    for relative in list(_acceptance_paths(model, data, ())):
        mapping = _get(data, relative)
        path = prefix + relative  # where it sits in the file
        if not isinstance(mapping, dict) or not isinstance(mapping.get("profile"), str):
            continue
        where = dotted_path(path + ("profile",))
        inline = [key for key in PROFILE_RATE_KEYS if key in mapping]
        if inline:
            field = path + (inline[0],)
            problem = Problem(
                source.file,
                source.positions.line_of(field),
                dotted_path(field),
                "give either profile or inline rates, not both",
            )
            unread[dotted_path(path)] = [_blame_override(source, problem)]
            continue
        file = Path(mapping["profile"])
        if not file.is_absolute():
            file = Path(source.file).parent / file
        try:
            profile: AcceptanceProfile = load_document(file, expect="acceptance_profile").model
        except DocumentError as err:
            line = source.positions.line_of(path + ("profile",))
            unread[dotted_path(path)] = [
                _blame_override(source, Problem(source.file, line, where, f"cannot use it: {p}")) for p in err.problems
            ]
            continue
        data = _replace(data, relative, {
            "measured_with": profile.draft_sample_method,
            "measured_temperature": profile.temperature,
            "confidence_auc": profile.confidence_auc,
            **mapping,
            "profile": str(file),
            "conditional_rates": profile.conditional(),
            "bins": [b.model_dump(exclude_none=True) for b in profile.bins] if profile.bins else None,
        })  # fmt: skip
    return data, unread


def _acceptance_paths(
    model: type[BaseModel], data: Any, path: tuple[str | int, ...]
) -> Iterator[tuple[str | int, ...]]:
    """Where ``data`` (validated as ``model``) holds an ``AcceptanceSource``, following the model's fields."""
    if not isinstance(data, dict):
        return
    for name, info in model.model_fields.items():
        key = info.alias if info.alias is not None and info.alias in data else name
        if key not in data:
            continue
        value = data[key]
        places: list[tuple[tuple[str | int, ...], Any]] = (
            [((*path, key, i), item) for i, item in enumerate(value)]
            if isinstance(value, list)
            else [((*path, key), value)]
        )
        for nested in _nested_models(info.annotation):
            for where, item in places:
                if issubclass(nested, AcceptanceSource):
                    yield where
                else:
                    yield from _acceptance_paths(nested, item, where)


def _get(data: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        data = data[part]
    return data


def _replace(data: Any, path: tuple[str | int, ...], value: Any) -> Any:
    """A copy of ``data`` with the value at ``path`` replaced (the parsed source stays as read)."""
    if not path:
        return value
    copy: Any = list(data) if isinstance(data, list) else dict(data)
    copy[path[0]] = _replace(data[path[0]], path[1:], value)
    return copy


def _within(field: str, where: str) -> bool:
    return field == where or field.startswith((where + ".", where + "["))


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
        if (
            problem.field == dotted
            or problem.field.startswith((dotted + ".", dotted + "["))
            or problem.field in created
        ):
            return Problem(f"--set {expression}", None, problem.field, problem.message, problem.severity)
    return problem


def _embedded_speculative_config(source: SourceMapping, key: str) -> Any:
    value = source.data[key]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            line = source.positions.line_of((key,))
            raise DocumentError(
                [Problem(source.file, line, key, f"must be a JSON object or a mapping: {err.msg}")]
            ) from None
    if not isinstance(value, dict):
        line = source.positions.line_of((key,))
        raise DocumentError([Problem(source.file, line, key, f"must be a mapping, got {type(value).__name__}")])
    return value


def _locate_notice(source: SourceMapping, path: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """Notices carry the path inside the model that raised them; find where that sits in the document."""
    if path in source.positions.values:
        return path
    candidates = [p for p in source.positions.values if p[-len(path) :] == path] if path else []
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
                problems.append(
                    Problem(str(path), None, "", f"directory holds no {', '.join(DOCUMENT_SUFFIXES)} files")
                )
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

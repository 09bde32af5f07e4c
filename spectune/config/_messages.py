"""Turn pydantic's errors into ``FILE:LINE: dotted.field: what is allowed, got VALUE`` lines."""

from __future__ import annotations

import difflib
from collections.abc import Sized
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from spectune.config._base import RuleViolations
from spectune.config._loader import Positions, dotted_path
from spectune.errors import Problem

__all__ = ["problems_from_validation_error"]


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else _plain(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _plain(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping {" + ", ".join(map(str, list(value)[:6])) + ("...}" if len(value) > 6 else "}")
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_plain(v) if not isinstance(v, str) else repr(v) for v in value) + "]"
    return str(value)


_BOUNDS = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
_TYPES = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "tuple_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "finite_number": "a finite number",
}


def _message(error: ErrorDetails, known_fields: set[str]) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    got = error.get("input")
    if kind in _BOUNDS:
        bound = next(iter(ctx.values()))
        return f"must be {_BOUNDS[kind]} {bound}, got {_show(got)}"
    if kind in _TYPES:
        return f"must be {_TYPES[kind]}, got {_show(got)}"
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        name = str(error["loc"][-1])
        close = difflib.get_close_matches(
            name, sorted(known_fields - {name}), n=1, cutoff=0.75
        )  # a field of another kind is no hint
        hint = f"; did you mean '{close[0]}'?" if close else ""
        return f"unknown field{hint} (got '{name}')"
    if kind in ("literal_error", "enum"):
        expected = str(ctx.get("expected", "")).replace(" or ", ", ")
        return f"must be one of {expected}, got {_show(got)}"
    if kind in ("too_short", "too_long"):
        word = "at least" if kind == "too_short" else "at most"
        bound = ctx.get("min_length" if kind == "too_short" else "max_length")
        actual = ctx.get("actual_length", len(got) if isinstance(got, Sized) else "?")
        return f"must have {word} {bound} items, got {actual}"
    if kind == "union_tag_invalid":
        return f"must be one of {ctx.get('expected_tags')}, got {_show(ctx.get('tag'))}"
    if kind == "union_tag_not_found":
        return f"needs the field '{ctx.get('discriminator', '').strip(chr(39))}' to tell which kind it is"
    message = str(error.get("msg", kind))
    return f"{message[:1].lower()}{message[1:]}, got {_show(got)}"


def _document_path(loc: tuple[Any, ...], positions: Positions) -> tuple[str | int, ...]:
    """Drop loc parts that are not in the document (union tags like 'list[float]', validator names)."""
    path: list[str | int] = []
    for part in loc:
        candidate = (*path, part)
        if candidate in positions.values or candidate in positions.keys:
            path.append(part)
        elif isinstance(part, int) or (isinstance(part, str) and not any(c in part for c in "[]-,")):
            # A field that is missing from the document still belongs in the dotted name.
            path.append(part)
    return tuple(path)


def problems_from_validation_error(
    err: ValidationError,
    *,
    file: str,
    positions: Positions,
    prefix: tuple[str | int, ...] = (),
    known_fields: set[str] | None = None,
) -> list[Problem]:
    """One ``Problem`` per pydantic error (and per violation inside a ``RuleViolations``)."""
    known = known_fields or set()
    problems: list[Problem] = []
    for error in err.errors(include_url=False):
        loc = prefix + tuple(error["loc"])
        exc = (error.get("ctx") or {}).get("error")
        if isinstance(exc, RuleViolations):
            base = _document_path(loc, positions)
            for sub_path, message in exc.violations:
                path = base + tuple(sub_path)
                line = positions.line_of(path, key=path not in positions.values)
                problems.append(Problem(file, line, dotted_path(path), message))
            continue
        path = _document_path(loc, positions)
        is_key_error = error["type"] == "extra_forbidden"
        message = _message(error, known)
        if error["type"] == "missing" and path and isinstance(path[-1], int):
            # A fixed-length list (a tuple) with too few items: point at the list, not the absent item.
            message = f"too few items: item {path[-1]} is missing, got {_show(error.get('input'))}"
            path = path[:-1]
        if error["type"] == "value_error" and exc is not None:
            message = str(exc)
        problems.append(Problem(file, positions.line_of(path, key=is_key_error), dotted_path(path), message))
    return _deduplicated(problems)


def _deduplicated(problems: list[Problem]) -> list[Problem]:
    seen: set[tuple[Any, ...]] = set()
    out = []
    for problem in problems:
        key = (problem.line, problem.field, problem.message)
        if key not in seen:
            seen.add(key)
            out.append(problem)
    return out

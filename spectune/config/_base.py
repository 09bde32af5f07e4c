"""The base of every spectune document model, and the way models report cross-field problems.

Every model is pydantic v2, ``extra="forbid"``, frozen, with finite floats only. Field constraints
(``Field(ge=..., le=...)``, ``Literal``) come first; cross-field rules live in
``model_validator(mode="after")`` and raise ``RuleViolations`` so that each problem carries the field
it belongs to (the loader turns that into ``FILE:LINE: dotted.field: message``).

Notices (deprecations, "this validates but probably isn't what you meant") are not errors. A model
reports them through ``notify``: into ``context["notices"]`` when the caller validates with a context
(the loader does), otherwise as a ``SpectuneNotice`` warning.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo

__all__ = ["RuleViolations", "SpectuneModel", "SpectuneNotice", "notify"]

FieldPath = tuple[str | int, ...]


class SpectuneModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class RuleViolations(ValueError):
    """One or more cross-field problems, each as (field path relative to the model, message)."""

    def __init__(self, violations: Sequence[tuple[FieldPath, str]]) -> None:
        self.violations = list(violations)
        super().__init__("; ".join(f"{'.'.join(map(str, path))}: {msg}" for path, msg in violations))


class SpectuneNotice(UserWarning):
    """A deprecation or advisory about a valid document, raised only when no context collects it."""

    def __init__(self, field: FieldPath, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{'.'.join(map(str, field))}: {message}")


def notify(info: ValidationInfo | None, field: FieldPath, message: str) -> None:
    """Report a notice about ``field``: to ``info.context["notices"]`` if present, else as a warning."""
    context: Any = info.context if info is not None else None
    if isinstance(context, dict) and isinstance(context.get("notices"), list):
        context["notices"].append((field, message))
    else:
        warnings.warn(SpectuneNotice(field, message), stacklevel=2)


def check_rules(violations: Sequence[tuple[FieldPath, str]]) -> None:
    """Raise ``RuleViolations`` if any rule failed."""
    if violations:
        raise RuleViolations(violations)

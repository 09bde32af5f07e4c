"""User-facing errors: one ``Problem`` per thing wrong, located by file, line and dotted field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["DocumentError", "Problem", "SpectuneError"]


class SpectuneError(Exception):
    """An error caused by the user's input. The CLI prints it as one line and exits 1."""


@dataclass(frozen=True)
class Problem:
    """One problem in a document: ``FILE:LINE: dotted.field: what is allowed, got VALUE``."""

    file: str
    line: int | None
    field: str
    message: str
    severity: Literal["error", "warning"] = "error"

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        prefix = "warning: " if self.severity == "warning" else ""
        field = f"{self.field}: " if self.field else ""
        return f"{where}: {prefix}{field}{self.message}"


class DocumentError(SpectuneError):
    """A document failed to load or validate; ``problems`` lists every error found (not only the first)."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))

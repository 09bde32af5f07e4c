"""The input files of one calibration, each counted once.

Pooling a file twice doubles its counts and shrinks the standard errors as if the server had run
twice as long, so a file given twice (the same resolved path) or a copy of one (the same bytes, such as
a backup inside a results folder) is used once, and the copies are reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from spectune._files import file_sha256

__all__ = ["SkippedInput", "unique_inputs"]


@dataclass(frozen=True)
class SkippedInput:
    """A file left out because it repeats one already read: ``reason`` is 'same file' or 'same content'."""

    file: str
    kept: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}: warning: not read, {self.reason} as {self.kept} (each input is counted once)"


def unique_inputs(paths: Sequence[Path], *, by_content: bool = True) -> tuple[list[Path], list[SkippedInput]]:
    """``paths`` in order without repeats: the first of each resolved path, then (``by_content``) of each content.

    Only regular files are hashed: reading a pipe to hash it would consume what the reader needs.
    Prometheus scrapes are compared by path only: two scrapes with the same bytes are two moments
    with no progress between them, and their cumulative counters cannot double-count.
    """
    kept: list[Path] = []
    skipped: list[SkippedInput] = []
    by_path: dict[Path, Path] = {}
    by_digest: dict[str, Path] = {}
    for path in paths:
        resolved = path.resolve()
        if resolved in by_path:
            skipped.append(SkippedInput(str(path), str(by_path[resolved]), "same file"))
            continue
        by_path[resolved] = path
        digest = file_sha256(path, follow_symlinks=True) if by_content else None
        if digest is not None and digest in by_digest:
            skipped.append(SkippedInput(str(path), str(by_digest[digest]), "same content"))
            continue
        if digest is not None:
            by_digest[digest] = path
        kept.append(path)
    return kept, skipped

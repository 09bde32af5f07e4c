"""Reading and writing files safely: bounded reads whatever the file is, atomic writes that never
follow a symbolic link.

A size from ``stat()`` says nothing about a pipe, ``/dev/stdin``, a FIFO or ``/dev/zero``, so reads
stop at a byte limit instead of trusting it. A write goes to a temporary file in the same folder,
then ``os.replace`` puts it in place: a crash leaves the old file or the new one, never half of one,
and a symbolic link at the destination is replaced, not written through.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from spectune.errors import DocumentError, Problem, SpectuneError

__all__ = [
    "file_sha256",
    "SAFE_NAME_RULE",
    "check_output_file",
    "is_safe_name",
    "iter_bounded_lines",
    "read_bounded",
    "read_error",
    "write_atomic",
]

_CHUNK_BYTES = 1 << 20

SAFE_NAME_RULE = "letters, digits, '.', '_' and '-', not starting with '-', and not '.' or '..'"
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def is_safe_name(name: str) -> bool:
    """Whether ``name`` is one folder name on every system (``SAFE_NAME_RULE``).

    A study's name becomes ``runs/<name>``: ``..`` would put its files in the current folder, a ``/``
    or ``\\`` somewhere else, and a leading ``-`` reads as an option to the commands a user runs on it.
    """
    return _SAFE_NAME.fullmatch(name) is not None and set(name) != {"."} and not name.startswith("-")


def read_error(path: Path, err: OSError, expected: str = "a file") -> str:
    """What went wrong opening ``path``, in words (a symbolic link loop is not a missing file)."""
    if isinstance(err, FileNotFoundError):
        return "no such file"
    if isinstance(err, IsADirectoryError):
        return f"is a directory, expected {expected}"
    if err.errno == errno.ELOOP:
        return "symbolic link loop (the link points back to itself)"
    return f"cannot read: {err.strerror or err}"


def read_bounded(path: Path, limit: int, *, expected: str = "a file") -> bytes:
    """At most ``limit`` bytes of ``path`` (a file, pipe, FIFO or device); ``DocumentError`` if it holds more."""
    file = str(path)
    try:
        with open(path, "rb") as handle:
            chunks, size = [], 0
            while size <= limit:
                chunk = handle.read(min(_CHUNK_BYTES, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
    except OSError as err:
        raise DocumentError([Problem(file, None, "", read_error(path, err, expected))]) from None
    if size > limit:
        raise DocumentError([Problem(file, None, "", f"holds more than {limit} bytes (the limit); refusing it")])
    return b"".join(chunks)


def iter_bounded_lines(
    path: Path, *, max_line_bytes: int, max_bytes: int, expected: str = "a file"
) -> Iterator[tuple[int, str]]:
    """(1-based number, text with its line ending) for each line, reading at most ``max_bytes`` in all.

    Bytes that are not UTF-8 are replaced. A line longer than ``max_line_bytes`` or a file longer
    than ``max_bytes`` (``/dev/zero``, an endless pipe) raises ``DocumentError`` at that line.
    """
    file = str(path)
    try:
        handle = open(path, "rb")
    except OSError as err:
        raise DocumentError([Problem(file, None, "", read_error(path, err, expected))]) from None
    total = 0
    with handle:
        for number, raw in enumerate(iter(lambda: handle.readline(max_line_bytes + 1), b""), start=1):
            total += len(raw)
            if len(raw) > max_line_bytes:
                raise DocumentError(
                    [Problem(file, number, "", f"line longer than {max_line_bytes} bytes; refusing it")]
                )
            if total > max_bytes:
                raise DocumentError(
                    [Problem(file, number, "", f"holds more than {max_bytes} bytes (the limit); refusing it")]
                )
            yield number, raw.decode("utf-8", errors="replace")


def check_output_file(path: Path) -> None:
    """``SpectuneError`` unless ``path`` can be written: its folder is (or can be made) a folder, and it
    is not a folder or something other than a regular file (a symbolic link is replaced, not followed)."""
    for parent in reversed(path.parents):
        if parent.exists() and not parent.is_dir():
            raise SpectuneError(f"cannot write {path}: {parent} is not a folder")
    if path.is_symlink():
        return
    if path.is_dir():
        raise SpectuneError(f"cannot write {path}: it is a folder")
    if path.exists() and not path.is_file():
        raise SpectuneError(f"cannot write {path}: it exists and is not a regular file")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in its folder and ``os.replace``.

    A symbolic link at ``path`` is replaced by the file, never followed. ``SpectuneError`` names the path.
    """
    check_output_file(path)
    try:
        descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise SpectuneError(f"cannot write {path}: {err.strerror or err}") from None
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o666 & ~_umask())  # what write_text would give; mkstemp makes 0600
        os.replace(temporary, path)
    except OSError as err:
        Path(temporary).unlink(missing_ok=True)
        raise SpectuneError(f"cannot write {path}: {err.strerror or err}") from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def file_sha256(path: Path, *, follow_symlinks: bool) -> str | None:
    """The SHA-256 of a regular file's bytes; None for a folder, a FIFO, a device, a missing or unreadable
    file, and (``follow_symlinks`` False) a symbolic link."""
    try:
        mode = (os.stat if follow_symlinks else os.lstat)(path).st_mode
        if not stat.S_ISREG(mode):
            return None
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(_CHUNK_BYTES), b""):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()

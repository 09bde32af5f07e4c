"""A set of files that spectune owns inside a folder it shares with the user, replaced as a whole.

The folder (``--out``) may also hold the user's files and the study's journal, so spectune never
assumes a file is its own because of its name. A manifest in the folder (``MANIFEST_NAME``) records
each file spectune wrote there with the SHA-256 of its content; a file is spectune's only while it is
a regular file with that content. Spectune overwrites or removes only such files, and refuses to
overwrite any other (the user's, or one the user edited since).

A new set is written in two steps. First every file, and the new manifest, is written in full into a
temporary folder inside the target folder (same file system, so the next step is a rename); a full
disk or any other failure here removes the temporary folder and leaves the old set exactly as it was.
Then the files are renamed into place, the old set's files that the new one lacks are removed, and
the manifest is renamed last. Renames write no file data, so a full disk strikes in the first step. A
process killed between the renames can leave new files the old manifest does not list: they then
count as the user's, and the next write refuses them rather than guess.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from spectune._files import check_output_file, file_sha256
from spectune.errors import SpectuneError

__all__ = ["MANIFEST_NAME", "FileSetChange", "FileWriter", "foreign_files", "replace_file_set", "write_new_file"]

MANIFEST_NAME = ".spectune-manifest.json"
_MANIFEST_BYTES = 1 << 20

FileWriter = Callable[[Path, str], None]
"""Writes ``text`` (UTF-8) into a new file at ``path``, all of it on disk when it returns."""


def write_new_file(path: Path, text: str) -> None:
    """The default ``FileWriter``: a new file, flushed to the disk (a full disk fails here, not later)."""
    with open(path, "x", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


@dataclass(frozen=True)
class FileSetChange:
    """What ``replace_file_set`` did: the files it wrote, and those of the old set it removed."""

    written: list[Path]
    removed: list[Path]


def _recorded(folder: Path) -> dict[str, str]:
    """name -> SHA-256 of each file the folder's manifest says spectune wrote; {} without a readable one.

    An unreadable or malformed manifest vouches for nothing: every file then counts as the user's.
    """
    path = folder / MANIFEST_NAME
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return {}
        with open(path, "rb") as handle:
            data = json.loads(handle.read(_MANIFEST_BYTES))
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        return {}
    return {
        name: entry["sha256"]
        for name, entry in files.items()
        if isinstance(name, str) and isinstance(entry, dict) and isinstance(entry.get("sha256"), str)
    }


def _owned(folder: Path, recorded: Mapping[str, str], name: str) -> bool:
    return name in recorded and file_sha256(folder / name, follow_symlinks=False) == recorded[name]


def _present(path: Path) -> bool:
    return path.is_symlink() or path.exists()


def foreign_files(folder: Path, names: Iterable[str]) -> list[Path]:
    """The files among ``names`` in ``folder`` that spectune did not write (or that changed since)."""
    if not folder.is_dir():
        return []
    recorded = _recorded(folder)
    return [folder / name for name in names if _present(folder / name) and not _owned(folder, recorded, name)]


def replace_file_set(
    folder: Path, files: Mapping[str, str], *, names: Iterable[str], writer: FileWriter = write_new_file
) -> FileSetChange:
    """Make spectune's files in ``folder`` exactly ``files`` (name -> UTF-8 text), as a whole.

    ``names`` are all the names a set may hold: of those, the old set's files that ``files`` lacks are
    removed if spectune wrote them, and left alone otherwise. ``SpectuneError`` (naming the file) if a
    file to be written exists and is not spectune's, or if writing fails; the old set is then unchanged.
    """
    for name in files:
        check_output_file(folder / name)
    foreign = foreign_files(folder, files)
    if foreign:
        raise SpectuneError(_refusal(foreign[0]))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".spectune-new-", dir=folder))
    except OSError as err:
        raise SpectuneError(f"cannot write {folder}/: {err.strerror or err}") from None
    try:
        _stage(staging, folder, files, writer)
        return _commit(staging, folder, files, names)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _refusal(path: Path) -> str:
    return (
        f"{path} was not written by spectune (or was changed since; {path.parent / MANIFEST_NAME} lists what "
        "spectune wrote there): it is left as it is; move or delete it, or choose another --out"
    )


def _stage(staging: Path, folder: Path, files: Mapping[str, str], writer: FileWriter) -> None:
    """Every file and the new manifest, in full, in ``staging``; the target folder is not touched."""
    manifest = {
        "written_by": "spectune",
        "about": "The files spectune wrote in this folder, with their SHA-256. Spectune overwrites or removes "
        "only these, and only while their content is unchanged.",
        "files": {name: {"sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()} for name, text in files.items()},
    }
    umask = os.umask(0o022)
    os.umask(umask)
    for name, text in {**files, MANIFEST_NAME: json.dumps(manifest, indent=2) + "\n"}.items():
        try:
            writer(staging / name, text)
            os.chmod(staging / name, 0o666 & ~umask)  # what write_text would give
        except OSError as err:
            raise SpectuneError(
                f"cannot write {folder / name}: {err.strerror or err}; the files already in {folder}/ are unchanged"
            ) from None


def _commit(staging: Path, folder: Path, files: Mapping[str, str], names: Iterable[str]) -> FileSetChange:
    recorded = _recorded(folder)
    stale = [name for name in names if name not in files and _present(folder / name) and _owned(folder, recorded, name)]
    written, removed = [], []
    try:
        for name in files:
            os.replace(staging / name, folder / name)
            written.append(folder / name)
        for name in stale:
            (folder / name).unlink()  # the old set's; left beside the new one it would pass for part of it
            removed.append(folder / name)
        os.replace(staging / MANIFEST_NAME, folder / MANIFEST_NAME)
    except OSError as err:
        raise SpectuneError(f"cannot write {folder}/: {err.strerror or err}") from None
    return FileSetChange(written=written, removed=removed)

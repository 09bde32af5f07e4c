"""Generated regions of a Markdown page: the text between ``<!-- generated: NAME -->`` and its end line.

A script owns each region and rewrites it whole; the prose around it is the author's and is never
touched. Used by ``docs_pages.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

_BEGIN = re.compile(r"^<!-- generated: ([a-z0-9-]+) -->$")
_END = "<!-- end generated: {} -->"


class PageError(Exception):
    """A results file or a page this script cannot use; the message names the file and line."""


# ---------------------------------------------------------------- regions


def regions(path: Path) -> dict[str, str]:
    """Each generated region of a page, by name: the text between its marker lines."""
    found: dict[str, str] = {}
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    index = 0
    while index < len(lines):
        begin = _BEGIN.match(lines[index].rstrip("\n"))
        index += 1
        if begin is None:
            continue
        name, start = begin.group(1), index
        end = _END.format(name)
        while index < len(lines) and lines[index].rstrip("\n") != end:
            if _BEGIN.match(lines[index].rstrip("\n")):
                raise PageError(f"{path}:{index + 1}: region '{name}' (line {start}) is not closed before this one")
            index += 1
        if index == len(lines):
            raise PageError(f"{path}:{start}: region '{name}' has no end line '{end}'")
        if name in found:
            raise PageError(f"{path}:{start}: region '{name}' appears twice in this page")
        found[name] = "".join(lines[start:index])
        index += 1
    return found


def rewrite_regions(path: Path, texts: dict[str, str]) -> list[str]:
    """Replace the named regions of a page (others untouched); the names of those that changed."""
    current = regions(path)
    changed = [name for name in texts if name in current and current[name] != texts[name]]
    if not changed:
        return []
    out: list[str] = []
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    skipping: str | None = None
    for line in lines:
        if skipping is not None:
            if line.rstrip("\n") == _END.format(skipping):
                out.append(line)
                skipping = None
            continue
        out.append(line)
        begin = _BEGIN.match(line.rstrip("\n"))
        if begin is not None and begin.group(1) in texts:
            skipping = begin.group(1)
            out.append(texts[skipping])
    path.write_text("".join(out), encoding="utf-8")
    return changed

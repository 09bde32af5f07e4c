"""Reading log text: lines with terminal colour codes removed, and ``Key: value, ...`` fields by name."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from spectune._files import iter_bounded_lines

__all__ = ["MAX_LINE_BYTES", "MAX_LOG_BYTES", "decimal_half_step", "iter_lines", "split_fields"]

MAX_LINE_BYTES = 1024 * 1024  # a log line of vLLM's is under 1 KiB; a per-request JSON line a few KiB
MAX_LOG_BYTES = 1024**3  # weeks of a server log at INFO level; longer ones are better split

# CSI sequences (colours, cursor moves), OSC sequences (titles, links) and lone two-byte escapes.
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_FIELD_START = re.compile(r"^\s*([A-Za-z#][^:]*?)\s*:\s?(.*)$", re.DOTALL)


def iter_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, text without colour codes or line ending) for each line of ``path``.

    Reads are bounded (``MAX_LINE_BYTES`` a line, ``MAX_LOG_BYTES`` in all) whatever ``path`` is: a
    pipe or ``/dev/zero`` is refused at the limit instead of filling memory.
    """
    lines = iter_bounded_lines(
        path, max_line_bytes=MAX_LINE_BYTES, max_bytes=MAX_LOG_BYTES, expected="a log or metrics file"
    )
    for number, raw in lines:
        text = raw.rstrip("\r\n")
        if "\x1b" in text:
            text = _ANSI_ESCAPE.sub("", text)
        # A carriage return mid-line (progress bars) leaves only what was drawn last.
        yield number, text.rsplit("\r", 1)[-1]


def split_fields(text: str) -> dict[str, str]:
    """``"Accepted: 639 tokens, Per-position acceptance rate: 0.8, 0.5, Avg ...: 55.8%"`` -> fields.

    Keys are lower-cased with single spaces. A comma-separated piece that does not start a new
    ``Key:`` continues the previous value (per-position lists), so fields are found by name and a
    fork's extra fields are simply more keys. The first occurrence of a key wins.
    """
    fields: dict[str, str] = {}
    current: str | None = None
    for piece in text.split(","):
        match = _FIELD_START.match(piece)
        if match:
            current = " ".join(match.group(1).lower().split())
            if current in fields:
                current = None  # a repeated key: keep the first, ignore this one's value
                continue
            fields[current] = match.group(2).strip()
        elif current is not None:
            fields[current] += "," + piece
    return fields


def decimal_half_step(number_text: str) -> float:
    """Half a unit in the last printed place: ``"2.67"`` -> 0.005, ``"639"`` -> 0.5."""
    digits = number_text.strip().rstrip("%")
    decimals = len(digits.split(".", 1)[1]) if "." in digits else 0
    return 0.5 * 10.0**-decimals

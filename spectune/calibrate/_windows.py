"""What every source format is read into: measurement windows, and the problems met on the way."""

from __future__ import annotations

from dataclasses import dataclass, field

from spectune.errors import Problem

__all__ = ["MAX_COUNT", "CountWindow", "LengthWindow", "SourceWindows"]

# The largest count a source may state: exact as a float, and beyond any real server (2^53 tokens at
# a million tokens a second is 285 years). Larger numbers are corruption, refused at their line.
MAX_COUNT = 2**53


@dataclass(frozen=True)
class CountWindow:
    """Speculative-decoding counts over one window: a log interval, a scrape interval or one request.

    Counts are in vLLM's units; the bonus token is counted nowhere here.
    ``accepted_per_position[i]`` is the number of drafts whose position ``i`` was accepted (the
    *unconditional* count; non-increasing in ``i``), or None when the source has no per-position data.
    When the source printed rounded numbers, the ``*_bounds`` give the interval each true count lies
    in (low, high), inclusive; they are None when the counts are exact.
    """

    file: str
    line: int | None
    num_positions: int | None  # K as the source states it; None when it does not
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_position: tuple[int, ...] | None
    accepted_per_position_bounds: tuple[tuple[int, int], ...] | None = None
    num_drafts_bounds: tuple[int, int] | None = None
    num_running: int | None = None
    server: str = ""  # the server's label within its file ("" where the file holds one); see _servers.py


@dataclass(frozen=True)
class LengthWindow:
    """A window that reports only its mean acceptance length (SGLang's decode log line).

    ``weight`` is proportional to the window's verification steps (SGLang logs every fixed number of
    decode steps, so the running-request count). ``rounding`` is half the printed precision of the
    mean length (0.005 for ``%.2f``).
    """

    file: str
    line: int | None
    mean_acceptance_length: float
    rounding: float
    weight: float
    num_running: int | None = None


@dataclass
class SourceWindows:
    """The windows read from one file, the lines skipped (as warnings) and notes for the profile."""

    file: str
    count_windows: list[CountWindow] = field(default_factory=list)
    length_windows: list[LengthWindow] = field(default_factory=list)
    skipped: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    servers: dict[str, str] = field(default_factory=dict)  # label -> description, for logs that name servers

    def skip(self, line: int | None, field_name: str, message: str) -> None:
        self.skipped.append(Problem(self.file, line, field_name, f"line skipped: {message}", severity="warning"))

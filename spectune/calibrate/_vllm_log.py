"""vLLM server logs: ``SpecDecoding metrics:`` lines, and the engine line's ``Running: N reqs``.

vLLM logs, every stats interval (10 s by default), one engine line and then one spec-decoding line
for the same window::

    ... Engine 000: Avg prompt throughput: ..., Running: 8 reqs, Waiting: 0 reqs, ...
    ... SpecDecoding metrics: Mean acceptance length: 2.67, Accepted throughput: 63.90 tokens/s,
        Drafted throughput: 114.60 tokens/s, Accepted: 639 tokens, Drafted: 1146 tokens,
        Per-position acceptance rate: 0.801, 0.524, 0.348, Avg Draft acceptance rate: 55.8%

(one line in the log). Whatever precedes the marker -- process tags, timestamps, Docker Compose
service prefixes, colour codes -- is ignored, and fields are read by name, so forks that add fields
still parse. The older form (``Draft acceptance rate: 55.8%, Accepted: ..., Drafted: ...``) has no
per-position rates and therefore does not say K; the caller must. An engine line pairs with the
first spec-decoding line after it.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from spectune.calibrate._lines import decimal_half_step, iter_lines, split_fields
from spectune.calibrate._reconstruct import reconstruct_window
from spectune.calibrate._servers import Origin, ServerTracker
from spectune.calibrate._windows import MAX_COUNT, CountWindow, SourceWindows
from spectune.errors import DocumentError, Problem

__all__ = ["SPEC_DECODING_MARKER", "read_vllm_log"]

SPEC_DECODING_MARKER = "SpecDecoding metrics:"
_RUNNING = re.compile(r"\bRunning:\s*(\d+)\s*reqs?\b")
_TOKENS = re.compile(r"^(\d+)(?:\s*tokens?)?$")
_NUMBER = re.compile(r"^[0-9]+(?:\.[0-9]+)?$")
_LEADING_NUMBER = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)")

_PER_POSITION = "per-position acceptance rate"
_MEAN_LENGTH = "mean acceptance length"
_DRAFT_RATE_KEYS = ("avg draft acceptance rate", "draft acceptance rate")


class _Corrupt(Exception):
    """A value no vLLM writes: the whole line is refused (``DocumentError``), not skipped."""

    def __init__(self, field_name: str, message: str) -> None:
        self.field_name = field_name
        super().__init__(message)


class _SkipLine(Exception):
    def __init__(self, field_name: str, message: str) -> None:
        self.field_name = field_name
        super().__init__(message)


def read_vllm_log(path: Path, *, num_speculative_tokens: int | None = None) -> SourceWindows:
    """Every usable window of a vLLM log; lines that cannot be used are listed in ``skipped``.

    Raises ``DocumentError`` (file and line) when a line's numbers contradict each other.
    """
    source = SourceWindows(file=str(path))
    servers = ServerTracker()
    running: dict[Origin, int | None] = {}  # per server: an engine line pairs with its own server's spec line
    origins: list[Origin] = []
    for number, text in iter_lines(path):
        start = text.find(SPEC_DECODING_MARKER)
        if start < 0:
            match = _RUNNING.search(text)
            if match:
                running[servers.see(text, number)] = int(match.group(1))
            elif "Starting vLLM API server" in text:
                servers.see(text, number)
            continue
        origin = servers.see(text, number, window=True)
        fields = split_fields(text[start + len(SPEC_DECODING_MARKER) :])
        try:
            window = _window(fields, source.file, number, num_speculative_tokens, running.get(origin))
        except _SkipLine as skip:
            source.skip(number, skip.field_name.capitalize(), str(skip))
        except _Corrupt as corrupt:
            raise DocumentError([Problem(source.file, number, corrupt.field_name, str(corrupt))]) from None
        else:
            source.count_windows.append(window)
            origins.append(origin)
        running[origin] = None
    labels = servers.labels()
    source.count_windows = [replace(w, server=labels[o]) for w, o in zip(source.count_windows, origins, strict=True)]
    source.servers = servers.describe()
    inferred = sum(
        1
        for w in source.count_windows
        if w.num_drafts_bounds is not None and w.num_drafts_bounds[0] != w.num_drafts_bounds[1]
    )
    if any(w.num_drafts * (w.num_positions or 0) != w.num_draft_tokens for w in source.count_windows):
        source.notes.append(
            "Some windows drafted fewer than K tokens per draft (ngram, dynamic K); their draft counts come from "
            f"the mean acceptance length and the rates{f', ambiguous within a few drafts in {inferred} windows' if inferred else ''}."
        )
    return source


def _tokens(fields: dict[str, str], key: str) -> int:
    value = fields.get(key)
    if value is None:
        raise _SkipLine(key, f"no '{key.capitalize()}: N tokens' field")
    match = _TOKENS.match(value)
    if not match:
        raise _SkipLine(key, f"'{key.capitalize()}' must be a whole number of tokens, got {value!r}")
    if len(match.group(1)) > 16 or int(match.group(1)) > MAX_COUNT:
        raise _Corrupt(key.capitalize(), f"must be at most 2^53 tokens, got {match.group(1)[:30]}")
    return int(match.group(1))


def _number(fields: dict[str, str], key: str) -> tuple[float, float] | None:
    """(value, half step of its printed precision), or None when the field is absent (NaN refuses the line).

    Only the leading number counts: the last field may carry what a log shipper appended (the rest of
    a Docker JSON log record, for one).
    """
    value = fields.get(key)
    if value is None:
        return None
    if value.strip().lower().startswith(("nan", "inf", "-inf")):
        # vLLM divides by the drafts; a logged window has drafts, so this line was not written by vLLM as is.
        raise _Corrupt(key.capitalize(), f"must be a finite number in a window with drafts, got {value.strip()[:20]!r}")
    match = _LEADING_NUMBER.match(value)
    if not match:
        raise _SkipLine(key, f"'{key}' must be a number, got {value!r}")
    return float(match.group(1)), decimal_half_step(match.group(1))


def _rates(fields: dict[str, str]) -> tuple[list[float], float] | None:
    value = fields.get(_PER_POSITION)
    if value is None:
        return None
    keys = list(fields)
    if keys.index(_PER_POSITION) == len(keys) - 1:
        # vLLM prints a field after the list; without one the line was probably cut mid-list.
        raise _SkipLine(_PER_POSITION, "no field after the per-position rates: the line looks truncated")
    pieces = [piece.strip() for piece in value.split(",")]
    if not pieces or not all(_NUMBER.match(piece) for piece in pieces):
        raise _SkipLine(_PER_POSITION, f"per-position rates must be numbers separated by commas, got {value!r}")
    return [float(piece) for piece in pieces], max(decimal_half_step(piece) for piece in pieces)


def _window(
    fields: dict[str, str], file: str, line: int, num_speculative_tokens: int | None, running: int | None
) -> CountWindow:
    accepted = _tokens(fields, "accepted")
    drafted = _tokens(fields, "drafted")
    rates = _rates(fields)
    mean_length = _number(fields, _MEAN_LENGTH)
    draft_rate = next((r for key in _DRAFT_RATE_KEYS if (r := _number(fields, key)) is not None), None)
    problems = _contradictions(file, line, accepted, drafted, rates, num_speculative_tokens, draft_rate)
    if problems:
        raise DocumentError(problems)
    if rates is None:
        return _window_without_rates(file, line, accepted, drafted, num_speculative_tokens, mean_length, running)
    rate_values, rate_half_step = rates
    counts = reconstruct_window(
        num_accepted=accepted,
        num_draft_tokens=drafted,
        rates=rate_values,
        rate_half_step=rate_half_step,
        mean_length=mean_length[0] if mean_length else None,
        length_half_step=mean_length[1] if mean_length else 0.0,
    )
    if counts is None:
        shown = ", ".join(f"{r:g}" for r in rate_values)
        length = f", mean acceptance length {mean_length[0]:g}" if mean_length else ""
        raise DocumentError(
            [
                Problem(
                    file,
                    line,
                    "Per-position acceptance rate",
                    f"no whole numbers of drafts and accepted tokens give rates {shown}{length} with Accepted: "
                    f"{accepted} and Drafted: {drafted} tokens (K={len(rate_values)}); the line is inconsistent "
                    "(edited or corrupted?)",
                )
            ]
        )
    return CountWindow(
        file=file,
        line=line,
        num_positions=len(rate_values),
        num_drafts=counts.num_drafts,
        num_draft_tokens=drafted,
        num_accepted_tokens=accepted,
        accepted_per_position=counts.accepted_per_position,
        accepted_per_position_bounds=counts.accepted_per_position_bounds,
        num_drafts_bounds=counts.num_drafts_bounds,
        num_running=running,
    )


def _contradictions(
    file: str,
    line: int,
    accepted: int,
    drafted: int,
    rates: tuple[list[float], float] | None,
    num_speculative_tokens: int | None,
    draft_rate: tuple[float, float] | None,
) -> list[Problem]:
    problems = []
    if accepted > drafted:
        problems.append(
            Problem(file, line, "Accepted", f"must be <= Drafted ({drafted} tokens), got {accepted} tokens")
        )
    if drafted == 0:
        problems.append(Problem(file, line, "Drafted", "must be > 0 tokens in a logged window, got 0"))
    if rates is not None and num_speculative_tokens is not None and len(rates[0]) != num_speculative_tokens:
        problems.append(
            Problem(
                file,
                line,
                "Per-position acceptance rate",
                f"has {len(rates[0])} positions but K={num_speculative_tokens} was given (--num-speculative-tokens)",
            )
        )
    if draft_rate is not None and drafted > 0:
        percent, half_step = draft_rate
        exact = 100.0 * accepted / drafted
        if abs(exact - percent) > half_step + 1e-9:
            problems.append(
                Problem(
                    file, line, "Avg Draft acceptance rate", f"{percent:g}% contradicts Accepted/Drafted = {exact:.3f}%"
                )
            )
    return problems


def _window_without_rates(
    file: str,
    line: int,
    accepted: int,
    drafted: int,
    num_speculative_tokens: int | None,
    mean_length: tuple[float, float] | None,
    running: int | None,
) -> CountWindow:
    if num_speculative_tokens is None:
        raise DocumentError(
            [
                Problem(
                    file,
                    line,
                    "",
                    "this is vLLM's older log format, without per-position rates, so it does not say K; "
                    "give K with --num-speculative-tokens",
                )
            ]
        )
    if drafted % num_speculative_tokens != 0:
        raise DocumentError(
            [
                Problem(
                    file,
                    line,
                    "Drafted",
                    f"{drafted} tokens is not a whole number of drafts of K={num_speculative_tokens} tokens; "
                    "is --num-speculative-tokens right?",
                )
            ]
        )
    num_drafts = drafted // num_speculative_tokens
    if mean_length is not None and abs(1.0 + accepted / num_drafts - mean_length[0]) > mean_length[1] + 1e-9:
        raise DocumentError(
            [
                Problem(
                    file,
                    line,
                    "Mean acceptance length",
                    f"{mean_length[0]:g} contradicts {num_drafts} drafts of K={num_speculative_tokens} "
                    f"(1 + {accepted}/{num_drafts} = {1 + accepted / num_drafts:.3f}); is --num-speculative-tokens right?",
                )
            ]
        )
    return CountWindow(
        file=file,
        line=line,
        num_positions=num_speculative_tokens,
        num_drafts=num_drafts,
        num_draft_tokens=drafted,
        num_accepted_tokens=accepted,
        accepted_per_position=None,
        num_running=running,
    )

"""vLLM per-request metrics (``--per-request-spec-decode-metrics``) saved as JSON lines.

Each line is a JSON object that holds, at any depth, the ``speculative_decoding`` object vLLM adds to
a response's ``metrics`` (or is that object itself)::

    {"mean_acceptance_length": 1.23, "acceptance_histogram": [39, 1, 0, 3], "num_spec_steps": 43,
     "num_accepted_draft_tokens": 10, "num_draft_tokens": 129, "num_spec_tokens": 3, ...}

``acceptance_histogram[j]`` counts verification steps that accepted exactly j drafts, so the counts
are exact: steps = sum(h), accepted = sum(j * h[j]), and position i was accepted in sum(h[j], j > i)
steps. Each request is one window. The object is null for requests with n > 1; such lines are
counted, not used.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from spectune.calibrate._lines import iter_lines
from spectune.calibrate._windows import MAX_COUNT, CountWindow, SourceWindows
from spectune.errors import DocumentError, Problem

__all__ = ["PER_REQUEST_KEY", "find_spec_metrics", "read_per_request_jsonl"]

PER_REQUEST_KEY = "speculative_decoding"
_HISTOGRAM = "acceptance_histogram"
_MAX_DEPTH = 8
_MISSING = object()


def find_spec_metrics(value: Any, depth: int = 0) -> Any:
    """The ``speculative_decoding`` object inside ``value`` (None if it is null there); ``_MISSING`` if absent."""
    if not isinstance(value, dict) or depth > _MAX_DEPTH:
        return _MISSING
    if _HISTOGRAM in value:
        return value
    if PER_REQUEST_KEY in value:
        return value[PER_REQUEST_KEY]
    for child in value.values():
        found = find_spec_metrics(child, depth + 1)
        if found is not _MISSING:
            return found
    return _MISSING


def read_per_request_jsonl(path: Path) -> SourceWindows:
    """One window per request line with drafts; raises ``DocumentError`` on contradictory numbers."""
    source = SourceWindows(file=str(path))
    null_lines = no_draft_lines = 0
    for number, text in iter_lines(path):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as err:
            source.skip(number, "", f"not JSON ({err.msg})")
            continue
        metrics = find_spec_metrics(record)
        if metrics is _MISSING:
            source.skip(number, "", f"no '{PER_REQUEST_KEY}' object")
            continue
        if metrics is None:
            null_lines += 1
            continue
        window = _window(metrics, source.file, number)
        if window is None:
            no_draft_lines += 1
        else:
            source.count_windows.append(window)
    if null_lines:
        source.notes.append(
            f"{source.file}: {null_lines} requests had null per-request metrics (n > 1) and were not used."
        )
    if any(w.num_draft_tokens != w.num_drafts * (w.num_positions or 0) for w in source.count_windows):
        source.notes.append(
            f"{source.file}: some steps drafted fewer than K tokens; like vLLM's counters, their later positions "
            "count as not accepted."
        )
    if no_draft_lines:
        source.notes.append(f"{source.file}: {no_draft_lines} requests drafted nothing and add no windows.")
    return source


def _whole(metrics: dict[str, Any], key: str, file: str, line: int) -> int | None:
    value = metrics.get(key)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= MAX_COUNT
        or value != int(value)
    ):
        raise DocumentError(
            [Problem(file, line, f"{PER_REQUEST_KEY}.{key}", f"must be a whole number in [0, 2^53], got {value!r:.40}")]
        )
    return int(value)


def _histogram(metrics: Any, file: str, line: int) -> list[int]:
    field = f"{PER_REQUEST_KEY}.{_HISTOGRAM}"
    if not isinstance(metrics, dict) or _HISTOGRAM not in metrics:
        raise DocumentError([Problem(file, line, field, "required field is missing")])
    histogram = metrics[_HISTOGRAM]
    if (
        not isinstance(histogram, list)
        or len(histogram) < 2
        or not all(isinstance(h, int) and not isinstance(h, bool) and 0 <= h <= MAX_COUNT for h in histogram)
    ):
        raise DocumentError(
            [
                Problem(
                    file,
                    line,
                    field,
                    f"must be a list of K+1 >= 2 whole numbers in [0, 2^53], got {json.dumps(histogram)[:80]}",
                )
            ]
        )
    return histogram


# vLLM writes these ratios as full floats; a difference past the third decimal is not rounding.
_RATIO_TOLERANCE = 5e-4


def _ratio_problems(
    metrics: dict[str, Any], file: str, line: int, steps: int, accepted: int, drafted: int
) -> list[Problem]:
    """The summary ratios must be finite numbers and agree with the histogram (NaN and inf are not data)."""
    expected = {
        "mean_acceptance_length": (1.0 + accepted / steps) if steps else None,
        "draft_acceptance_rate": (accepted / drafted) if drafted else None,
    }
    problems = []
    for key, value in expected.items():
        stated = metrics.get(key)
        if stated is None:
            continue
        where = f"{PER_REQUEST_KEY}.{key}"
        if isinstance(stated, bool) or not isinstance(stated, int | float) or not math.isfinite(stated):
            problems.append(Problem(file, line, where, f"must be a finite number, got {stated!r:.40}"))
        elif value is not None and abs(stated - value) > _RATIO_TOLERANCE:
            problems.append(
                Problem(
                    file,
                    line,
                    where,
                    f"{stated:g} contradicts {_HISTOGRAM} {metrics[_HISTOGRAM]} (which gives {value:.6g})",
                )
            )
    return problems


def _window(metrics: Any, file: str, line: int) -> CountWindow | None:
    histogram = _histogram(metrics, file, line)
    num_positions = len(histogram) - 1
    steps = sum(histogram)
    accepted = sum(j * h for j, h in enumerate(histogram))
    stated = {
        key: _whole(metrics, key, file, line)
        for key in ("num_spec_tokens", "num_spec_steps", "num_accepted_draft_tokens", "num_draft_tokens")
    }
    expected = {"num_spec_tokens": num_positions, "num_spec_steps": steps, "num_accepted_draft_tokens": accepted}
    problems = [
        Problem(
            file,
            line,
            f"{PER_REQUEST_KEY}.{key}",
            f"{stated[key]} contradicts {_HISTOGRAM} {histogram} (which gives {value})",
        )
        for key, value in expected.items()
        if stated[key] is not None and stated[key] != value
    ]
    drafted = stated["num_draft_tokens"] if stated["num_draft_tokens"] is not None else steps * num_positions
    if drafted < accepted:
        problems.append(
            Problem(
                file,
                line,
                f"{PER_REQUEST_KEY}.num_draft_tokens",
                f"must be >= accepted drafts ({accepted}), got {drafted}",
            )
        )
    problems.extend(_ratio_problems(metrics, file, line, steps, accepted, drafted))
    if problems:
        raise DocumentError(problems)
    if steps == 0:
        return None
    per_position = tuple(sum(histogram[j + 1 :]) for j in range(num_positions))
    return CountWindow(
        file=file,
        line=line,
        num_positions=num_positions,
        num_drafts=steps,
        num_draft_tokens=drafted,
        num_accepted_tokens=accepted,
        accepted_per_position=per_position,
    )

"""Prometheus text scrapes of vLLM's ``/metrics``: counter differences between consecutive scrapes.

vLLM's spec-decoding counters (labels ``model_name`` and ``engine``; the per-position one adds
``position``) are cumulative, so a window is the difference between two scrapes of the same server,
summed over engines, for one ``model_name``. A counter that went down means the server restarted
between the scrapes, and no difference across a restart means anything. ``vllm:num_requests_running``
in the later scrape, when present, labels the window with a running-request count.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from spectune.calibrate._lines import iter_lines
from spectune.calibrate._windows import MAX_COUNT, CountWindow, SourceWindows
from spectune.errors import DocumentError, Problem

__all__ = ["PROMETHEUS_PREFIX", "Scrape", "read_scrape", "windows_between_scrapes"]

PROMETHEUS_PREFIX = "vllm:spec_decode_"
_COUNTERS = {
    "vllm:spec_decode_num_drafts": "num_drafts",
    "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos": "per_position",
}
_RUNNING_GAUGE = "vllm:num_requests_running"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
# Integer-valued counters are printed as floats (4816.0); anything further off is not a count.
_INTEGRAL_TOLERANCE = 1e-6

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True)
class Scrape:
    """One scrape: each spec-decoding series' value and line, by (counter, sorted labels)."""

    file: str
    values: dict[SeriesKey, tuple[float, int]]
    running: dict[str, float]  # model_name -> running requests (summed over engines)


def _labels(text: str | None, file: str, line: int) -> dict[str, str]:
    if not text:
        return {}
    inner, labels, position = text[1:-1], {}, 0
    while position < len(inner.strip()):
        match = _LABEL.match(inner, position)
        if not match:
            raise DocumentError([Problem(file, line, "", f"malformed Prometheus labels {text!r}")])
        labels[match.group(1)] = match.group(2).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
        position = match.end()
    return labels


def read_scrape(path: Path) -> Scrape:
    """Parse the vLLM spec-decoding counters (and the running-requests gauge) of one scrape."""
    file = str(path)
    values: dict[SeriesKey, tuple[float, int]] = {}
    running: dict[str, float] = defaultdict(float)
    for number, text in iter_lines(path):
        if not text or text.startswith("#"):
            continue
        match = _SAMPLE.match(text.strip())
        if not match:
            continue
        name = match.group(1)
        base = name.removesuffix("_total")
        if base not in _COUNTERS and name != _RUNNING_GAUGE:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            raise DocumentError([Problem(file, number, name, f"must be a number, got {match.group(3)!r}")]) from None
        if not math.isfinite(value):
            raise DocumentError([Problem(file, number, name, f"must be a finite number, got {match.group(3)}")])
        labels = _labels(match.group(2), file, number)
        if name == _RUNNING_GAUGE:
            running[labels.get("model_name", "")] += value
            continue
        if abs(value - round(value)) > _INTEGRAL_TOLERANCE or not 0 <= value <= MAX_COUNT:
            raise DocumentError(
                [Problem(file, number, name, f"a counter must be a whole number in [0, 2^53], got {match.group(3)}")]
            )
        values[(base, tuple(sorted(labels.items())))] = (value, number)
    return Scrape(file=file, values=values, running=dict(running))


def _model_names(scrapes: Sequence[Scrape]) -> dict[str, float]:
    """model_name -> drafts counted in the last scrape, for the models that have spec-decoding counters."""
    drafts: dict[str, float] = defaultdict(float)
    for (name, labels), (value, _) in scrapes[-1].values.items():
        model = dict(labels).get("model_name", "")
        drafts[model] += value if name == "vllm:spec_decode_num_drafts" else 0.0
    return dict(drafts)


def _select_model(scrapes: Sequence[Scrape], model_name: str | None) -> str:
    models = _model_names(scrapes)
    listing = ", ".join(f"{name or '(no label)'!s} ({int(d)} drafts)" for name, d in sorted(models.items()))
    if model_name is not None:
        if model_name not in models:
            raise DocumentError(
                [
                    Problem(
                        scrapes[-1].file,
                        None,
                        "model_name",
                        f"no counters for {model_name!r}; the scrape has {listing}",
                    )
                ]
            )
        return model_name
    if len(models) > 1:
        raise DocumentError(
            [
                Problem(
                    scrapes[-1].file,
                    None,
                    "model_name",
                    f"the scrapes hold several models: {listing}; choose one with --model",
                )
            ]
        )
    return next(iter(models))


def windows_between_scrapes(scrapes: Sequence[Scrape], *, model_name: str | None = None) -> SourceWindows:
    """One window per pair of consecutive scrapes (given in time order) for one ``model_name``."""
    model = _select_model(scrapes, model_name)
    source = SourceWindows(file=scrapes[-1].file)
    for earlier, later in zip(scrapes, scrapes[1:], strict=False):
        totals = _differences(earlier, later, model)
        window = _window(totals, earlier, later, model, source)
        if window is not None:
            source.count_windows.append(window)
    return source


def _differences(earlier: Scrape, later: Scrape, model: str) -> dict[str, dict[str, int]]:
    totals: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for key, (value, line) in later.values.items():
        name, labels = key
        label_map = dict(labels)
        if label_map.get("model_name", "") != model:
            continue
        before, before_line = earlier.values.get(key, (0.0, None))
        if value < before:
            raise DocumentError(
                [
                    Problem(
                        later.file,
                        line,
                        f"{name}{_show_labels(labels)}",
                        f"counter went down from {before:.0f} ({earlier.file}:{before_line}) to {value:.0f}: the server "
                        "restarted between the scrapes (or they are out of order); use scrapes of one server run, earlier first",
                    )
                ]
            )
        totals[_COUNTERS[name]][label_map.get("position", "")] += round(value - before)
    for key, (_, line) in earlier.values.items():
        if dict(key[1]).get("model_name", "") == model and key not in later.values:
            raise DocumentError(
                [
                    Problem(
                        earlier.file,
                        line,
                        f"{key[0]}{_show_labels(key[1])}",
                        f"is missing from the later scrape {later.file}: the server restarted between the scrapes?",
                    )
                ]
            )
    return totals


def _series_line(scrape: Scrape, name: str, model: str) -> int | None:
    """The line of the first ``name`` series of ``model`` in ``scrape``."""
    lines = [
        line
        for (series, labels), (_, line) in scrape.values.items()
        if series == name and dict(labels).get("model_name", "") == model
    ]
    return min(lines) if lines else None


def _show_labels(labels: tuple[tuple[str, str], ...]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}" if labels else ""


def _counter_error(later: Scrape, model: str, series: str, message: str) -> DocumentError:
    """A counter that contradicts the others, blamed on its line in the later scrape."""
    return DocumentError([Problem(later.file, _series_line(later, series, model), series, message)])


def _window(
    totals: dict[str, dict[str, int]], earlier: Scrape, later: Scrape, model: str, source: SourceWindows
) -> CountWindow | None:
    num_drafts = sum(totals["num_drafts"].values())
    drafted = sum(totals["num_draft_tokens"].values())
    accepted = sum(totals["num_accepted_tokens"].values())
    where = f"between {earlier.file} and {later.file}"
    if num_drafts == 0:
        source.skip(None, "vllm:spec_decode_num_drafts", f"no drafts {where}")
        return None
    if drafted < num_drafts:
        raise _counter_error(
            later, model, "vllm:spec_decode_num_draft_tokens",
            f"went up by {drafted} {where}, fewer than the drafts ({num_drafts}); every draft proposes at "
            "least one token: inconsistent counters",
        )  # fmt: skip
    per_position_map = totals.get("per_position") or {}
    per_position: tuple[int, ...] | None = None
    if per_position_map:
        positions = sorted(per_position_map, key=lambda p: int(p) if p.isdigit() else -1)
        if positions != [str(i) for i in range(len(positions))]:
            raise DocumentError([Problem(later.file, None, "position", f"positions must be 0..K-1, got {positions}")])
        per_position = tuple(per_position_map[p] for p in positions)
        if any(
            later_count > earlier_count
            for earlier_count, later_count in zip(per_position, per_position[1:], strict=False)
        ) or (per_position[0] > num_drafts):
            raise DocumentError(
                [
                    Problem(
                        later.file,
                        None,
                        "vllm:spec_decode_num_accepted_tokens_per_pos",
                        f"per-position counts {where} must be non-increasing and at most the drafts ({num_drafts}), "
                        f"got {list(per_position)}: inconsistent counters",
                    )
                ]
            )
        if sum(per_position) != accepted:
            # Counters are not scraped atomically; a step counted in one and not yet in another shows here.
            if abs(sum(per_position) - accepted) > 0.01 * max(accepted, 1):
                raise DocumentError(
                    [
                        Problem(
                            later.file,
                            None,
                            "vllm:spec_decode_num_accepted_tokens_per_pos",
                            f"per-position counts {where} sum to {sum(per_position)}, but accepted tokens went up by "
                            f"{accepted}: inconsistent counters",
                        )
                    ]
                )
            source.notes.append(
                f"Per-position counters {where} sum to {sum(per_position)} vs {accepted} accepted; used the per-position sum."
            )
            accepted = sum(per_position)
    if accepted > drafted:
        raise _counter_error(
            later,
            model,
            "vllm:spec_decode_num_accepted_tokens",
            f"went up by {accepted}, more than draft tokens ({drafted}) {where}",
        )
    if per_position is not None and drafted > len(per_position) * num_drafts:
        raise _counter_error(
            later, model, "vllm:spec_decode_num_draft_tokens",
            f"went up by {drafted} {where}, more than K = {len(per_position)} positions x {num_drafts} drafts: "
            "inconsistent counters",
        )  # fmt: skip
    running = later.running.get(model)
    return CountWindow(
        file=later.file,
        line=None,
        num_positions=len(per_position) if per_position is not None else None,
        num_drafts=num_drafts,
        num_draft_tokens=drafted,
        num_accepted_tokens=accepted,
        accepted_per_position=per_position,
        num_running=round(running) if running is not None else None,
    )

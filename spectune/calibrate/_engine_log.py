"""Step times from a vLLM server log's engine lines, for fitting the roofline to the deployment.

Every stats interval (10 s by default) vLLM logs one engine line, then (with speculation) one
``SpecDecoding metrics:`` line for the same window::

    ... Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 812.4 tokens/s,
        Running: 16 reqs, Waiting: 0 reqs, GPU KV cache usage: 4.2%, Prefix cache hit rate: 0.0%
    ... SpecDecoding metrics: Mean acceptance length: 2.67, ..., Per-position acceptance rate: 0.80, 0.52, 0.35, ...

A window with N running requests that each emit L tokens a step (L = the mean acceptance length,
bonus included; 1 without speculation) and G generated tokens/s took N * L / G seconds a step; its
requests hold (KV cache usage x the cache's size in tokens) / N tokens each. The cache's size comes
from the startup line ``GPU KV cache size: 1,234,560 tokens``, or from the caller. Windows that also
prefilled (prompt throughput above ``MAX_PREFILL_SHARE`` of the generation throughput), and idle ones,
are left out: their steps are not decode steps.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spectune.calibrate._lines import iter_lines, split_fields
from spectune.calibrate._servers import Origin, ServerTracker
from spectune.calibrate._vllm_log import SPEC_DECODING_MARKER
from spectune.errors import DocumentError, Problem

__all__ = ["MAX_FIT_MEAN_ERROR", "MAX_PREFILL_SHARE", "EngineLog", "EngineWindow", "read_engine_log"]

MAX_PREFILL_SHARE = 0.1
# A fitted roofline whose step times are off by more than this on average is refused (docs/calibration.md):
# the K choices a study compares differ by tens of percent in step time, so a worse model cannot rank them.
MAX_FIT_MEAN_ERROR = 0.25
_ENGINE_MARKER = "Avg generation throughput:"
_KV_SIZE = re.compile(r"GPU KV cache size:\s*([0-9][0-9,]*)\s*tokens")
_NUMBER = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)")


@dataclass(frozen=True)
class EngineWindow:
    """One stats window: its decode step time and the batch and context it was measured at."""

    file: str
    line: int
    num_running: int
    num_speculative_tokens: int  # 0: no SpecDecoding line for this window
    acceptance_length: float  # tokens per request per step, bonus included
    generation_tokens_per_s: float
    kv_cache_usage: float  # fraction of the cache in use
    context_tokens: float  # per running request

    @property
    def step_time_s(self) -> float:
        return self.num_running * self.acceptance_length / self.generation_tokens_per_s


@dataclass
class EngineLog:
    """The usable windows of one log, the cache size it states, and the windows left out (as warnings)."""

    file: str
    windows: list[EngineWindow] = field(default_factory=list)
    kv_cache_tokens: int | None = None
    skipped: list[Problem] = field(default_factory=list)
    skip_kinds: list[str] = field(default_factory=list)  # one per ``skipped``: why, in a word or two

    def skipped_by_kind(self) -> dict[str, list[Problem]]:
        """The windows left out, grouped by why (idle, prefill, ...), in the order each kind first appears."""
        grouped: dict[str, list[Problem]] = {}
        for kind, problem in zip(self.skip_kinds, self.skipped, strict=True):
            grouped.setdefault(kind, []).append(problem)
        return grouped


@dataclass
class _Pending:
    line: int
    running: int
    generation: float
    prompt: float
    usage: float


def _field_number(fields: dict[str, str], key: str, file: str, line: int) -> float:
    value = fields.get(key)
    match = _NUMBER.match(value) if value is not None else None
    if match is None:
        raise DocumentError(
            [
                Problem(
                    file,
                    line,
                    key.capitalize(),
                    f"must be a number, got {value!r}" if value is not None else "field is missing",
                )
            ]
        )
    return float(match.group(1))


def _engine_line(text: str, file: str, line: int) -> _Pending:
    start = text.find("Avg prompt throughput:")
    fields = split_fields(text[start if start >= 0 else text.find(_ENGINE_MARKER) :])
    running = _field_number(fields, "running", file, line)
    usage = _field_number(fields, "gpu kv cache usage", file, line)
    if not running.is_integer():
        raise DocumentError(
            [Problem(file, line, "Running", f"must be a whole number of requests, got {fields['running']!r}")]
        )
    if usage > 100.0:
        raise DocumentError(
            [
                Problem(
                    file,
                    line,
                    "GPU KV cache usage",
                    f"must be a percentage in [0, 100], got {fields['gpu kv cache usage']!r}",
                )
            ]
        )
    prompt = _field_number(fields, "avg prompt throughput", file, line) if "avg prompt throughput" in fields else 0.0
    return _Pending(
        line, int(running), _field_number(fields, "avg generation throughput", file, line), prompt, usage / 100.0
    )


def _spec_fields(text: str, file: str, line: int) -> tuple[int, float]:
    fields = split_fields(text[text.find(SPEC_DECODING_MARKER) + len(SPEC_DECODING_MARKER) :])
    rates = fields.get("per-position acceptance rate")
    if rates is None:
        raise DocumentError(
            [
                Problem(
                    file,
                    line,
                    "Per-position acceptance rate",
                    "needed to know K; this vLLM's log line has no per-position rates",
                )
            ]
        )
    length = _field_number(fields, "mean acceptance length", file, line)
    k = len([piece for piece in rates.split(",") if piece.strip()])
    if not 1.0 <= length <= k + 1:
        raise DocumentError(
            [Problem(file, line, "Mean acceptance length", f"must be in [1, K+1 = {k + 1}], got {length:g}")]
        )
    return k, length


def read_engine_log(path: Path, *, kv_cache_tokens: int | None = None, servers: Sequence[str] = ()) -> EngineLog:
    """Every decode window of a vLLM log; ``DocumentError`` (file and line) for lines that contradict themselves.

    ``servers``: in a log holding several servers (``_servers.py``), the labels whose windows to keep.
    """
    log = EngineLog(file=str(path))
    tracker = ServerTracker()
    pending: dict[Origin, _Pending] = {}  # per server: its engine line pairs with its own spec line
    windows: list[tuple[Origin, _Pending, int, float]] = []
    saw_spec = False
    for number, text in iter_lines(path):
        size = _KV_SIZE.search(text)
        if size:
            log.kv_cache_tokens = int(size.group(1).replace(",", ""))
        elif _ENGINE_MARKER in text:
            origin = tracker.see(text, number)
            if origin in pending:
                windows.append((origin, pending.pop(origin), 0, 1.0))
            pending[origin] = _engine_line(text, log.file, number)
        elif SPEC_DECODING_MARKER in text:
            origin = tracker.see(text, number, window=True)
            if origin in pending:
                saw_spec = True
                k, length = _spec_fields(text, log.file, number)
                windows.append((origin, pending.pop(origin), k, length))
    windows.extend((origin, left, 0, 1.0) for origin, left in pending.items())
    windows.sort(key=lambda window: window[1].line)
    if servers:
        labels = tracker.labels()
        windows = [window for window in windows if labels[window[0]] in servers]
    capacity = kv_cache_tokens or log.kv_cache_tokens
    if capacity is None:
        raise DocumentError(
            [
                Problem(
                    log.file,
                    None,
                    "",
                    "no 'GPU KV cache size: N tokens' line (vLLM logs it at startup); give the size with --kv-cache-tokens",
                )
            ]
        )
    log.kv_cache_tokens = capacity
    for _, window, k, length in windows:
        unusable = _unusable(window, k, saw_spec)
        if unusable:
            kind, reason = unusable
            log.skipped.append(
                Problem(log.file, window.line, "", f"window left out of the fit: {reason}", severity="warning")
            )
            log.skip_kinds.append(kind)
            continue
        log.windows.append(EngineWindow(
            file=log.file, line=window.line, num_running=window.running, num_speculative_tokens=k, acceptance_length=length,
            generation_tokens_per_s=window.generation, kv_cache_usage=window.usage,
            context_tokens=window.usage * capacity / window.running,
        ))  # fmt: skip
    if not log.windows:
        reasons = (
            "; ".join(f"line {p.line}: {p.message}" for p in log.skipped[:3])
            or "no engine lines ('Avg generation throughput')"
        )
        raise DocumentError([Problem(log.file, None, "", f"no decode windows to fit ({reasons})")])
    return log


def _unusable(window: _Pending, k: int, saw_spec: bool) -> tuple[str, str] | None:
    """(kind, reason) for a window the fit cannot use, or None."""
    if window.running == 0 or window.generation <= 0:
        return "idle", "idle (no running requests or no generated tokens)"
    if window.prompt > MAX_PREFILL_SHARE * window.generation:
        return "prefill", f"it also prefilled ({window.prompt:g} prompt tokens/s), so its steps are not decode steps"
    if saw_spec and k == 0:
        return "no SpecDecoding line", "no SpecDecoding line for it, in a log with speculation"
    return None

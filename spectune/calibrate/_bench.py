"""``vllm bench serve --save-result`` JSON files: one run each, at one concurrency and one K.

The fields read (vLLM writes many more; they are ignored):

- the run: ``max_concurrency``, ``completed``, ``total_output_tokens``, ``duration`` (s),
  ``output_throughput`` (tokens/s) and ``mean_tpot_ms`` (``median_*``/``p99_*`` and ITL/TTFT/E2EL are
  kept for reports);
- speculative decoding, present only when it was on: ``spec_decode_num_drafts``,
  ``spec_decode_draft_tokens``, ``spec_decode_accepted_tokens``, ``spec_decode_acceptance_length``,
  ``spec_decode_acceptance_rate`` (percent) and ``spec_decode_per_position_acceptance_rates``
  (fractions, one per draft position, so K is their count). A file without them ran with K = 0.

The counters are differences of the server's Prometheus counters over the run, so the per-position
rates times the drafts are whole numbers: the counts are rebuilt exactly.

Step time. Each verification step of a request is one draft (``num_drafts`` counts request-steps) and
each output token after the first comes from one, so over the run

    sum over requests of decode time = completed * (N - 1) * mean TPOT     (N tokens each, fixed by --ignore-eos)
    sum over requests of decode steps = num_drafts                          (K = 0: completed * (N - 1))

and their ratio, ``mean_tpot_ms * (total_output_tokens - completed) / num_drafts``, is the mean step
time that a decoding request waits, weighted by the batch in each step. That batch is not quite the
concurrency: while some requests prefill or wait for a free slot, fewer decode. Its mean is the
decode time over the run's wall time (Little's law), and that is the batch size the step is filed at. It needs no ITL (a streamed
chunk can carry several steps' tokens when the client lags) and no per-request acceptance (mean TPOT
times the mean acceptance length is biased upwards by the spread of acceptance between requests and
by the tokens drafted past a request's last one).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spectune.calibrate._windows import CountWindow
from spectune.config import MAX_NUM_SPECULATIVE_TOKENS
from spectune.errors import DocumentError, Problem

__all__ = [
    "BENCH_REQUIRED_FIELDS",
    "BENCH_SPEC_FIELDS",
    "BenchRun",
    "bench_run_from_record",
    "looks_like_bench_result",
    "read_bench_result",
]

BENCH_REQUIRED_FIELDS = (
    "max_concurrency",
    "completed",
    "total_output_tokens",
    "duration",
    "output_throughput",
    "mean_tpot_ms",
)
BENCH_SPEC_FIELDS = (
    "spec_decode_num_drafts",
    "spec_decode_draft_tokens",
    "spec_decode_accepted_tokens",
    "spec_decode_acceptance_length",
    "spec_decode_acceptance_rate",
    "spec_decode_per_position_acceptance_rates",
)
_KEPT_LATENCIES = tuple(
    f"{stat}_{metric}_ms" for metric in ("tpot", "itl", "ttft", "e2el") for stat in ("mean", "median", "p99")
)
_MAX_BYTES = 64 * 1024 * 1024  # per-request arrays (itls, ttfts) make big files; refuse absurd ones
_THROUGHPUT_TOLERANCE = 0.01  # output_throughput vs total_output_tokens / duration (vLLM rounds neither)
_COUNT_TOLERANCE = 1e-6  # per-position rate x drafts must be this close to a whole number


@dataclass(frozen=True)
class BenchRun:
    """One ``vllm bench serve`` result. Times in ms as the file has them; counts in vLLM's units."""

    file: str
    max_concurrency: int
    completed: int
    total_output_tokens: int
    duration_s: float
    output_throughput: float
    latencies_ms: dict[str, float]
    num_speculative_tokens: int  # 0: no speculative-decoding fields
    counts: CountWindow | None  # exact counts; None when K = 0
    model_id: str | None = None  # the served model, as --model named it (None: the file does not say)
    temperature: float | None = None  # the sampling temperature, where the file records it

    @property
    def decode_steps(self) -> int:
        """Request-steps after the first token: the drafts verified, or one per token without speculation."""
        return self.counts.num_drafts if self.counts is not None else self.total_output_tokens - self.completed

    @property
    def step_time_ms(self) -> float:
        """Mean step time a decoding request waits (see the module docstring for why this estimator)."""
        return self.decode_time_ms / self.decode_steps

    @property
    def decode_time_ms(self) -> float:
        """Decode time summed over requests: completed x (N - 1) x mean TPOT."""
        return self.latencies_ms["mean_tpot_ms"] * (self.total_output_tokens - self.completed)

    @property
    def mean_decoding_batch(self) -> float:
        """Requests decoding at once, on average (Little's law: decode time over wall time), in [1, concurrency]."""
        return min(max(self.decode_time_ms / (1000.0 * self.duration_s), 1.0), float(self.max_concurrency))

    @property
    def acceptance_length(self) -> float:
        """Tokens per step per request from the counters (bonus included); 1 without speculation."""
        if self.counts is None:
            return 1.0
        return 1.0 + self.counts.num_accepted_tokens / self.counts.num_drafts


def looks_like_bench_result(text: str) -> bool:
    """Whether a file's start reads like a bench result (a JSON object naming its run fields)."""
    head = text.lstrip()[:200_000]
    return (
        head.startswith("{")
        and '"max_concurrency"' in head
        and ('"mean_tpot_ms"' in head or '"output_throughput"' in head)
    )


def _line_of(text: str, key: str) -> int | None:
    match = re.search(rf'"{re.escape(key)}"\s*:', text)
    return text.count("\n", 0, match.start()) + 1 if match else None


class _Reader:
    """Typed field access that records every problem, located at the key's line."""

    def __init__(self, file: str, text: str, data: dict[str, Any]) -> None:
        self.file, self.text, self.data = file, text, data
        self.problems: list[Problem] = []

    def problem(self, key: str, message: str) -> None:
        self.problems.append(Problem(self.file, _line_of(self.text, key), key, message))

    def integer(self, key: str, low: int) -> int | None:
        value = self.data.get(key)
        if value is None:
            self.problem(key, "required field is missing (or null)" + _concurrency_hint(key))
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not float(value).is_integer()
            or value < low
        ):
            self.problem(key, f"must be a whole number >= {low}, got {value!r}")
            return None
        return int(value)

    def number(self, key: str, *, positive: bool = True, required: bool = True) -> float | None:
        value = self.data.get(key)
        if value is None:
            if required:
                self.problem(key, "required field is missing (or null)")
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or (positive and value <= 0)
        ):
            self.problem(key, f"must be a finite number{' > 0' if positive else ''}, got {value!r}")
            return None
        return float(value)


def _concurrency_hint(key: str) -> str:
    if key == "max_concurrency":
        return "; run vllm bench serve with --max-concurrency C, so that the run has one batch size"
    return ""


def read_bench_result(path: Path) -> BenchRun:
    """Read and check one result file; ``DocumentError`` lists every problem with its line."""
    file = str(path)
    try:
        if path.stat().st_size > _MAX_BYTES:
            raise DocumentError(
                [Problem(file, None, "", f"file is larger than {_MAX_BYTES} bytes; not a bench result?")]
            )
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError):
        raise DocumentError([Problem(file, None, "", "no such file")]) from None
    except UnicodeDecodeError as err:
        raise DocumentError(
            [Problem(file, None, "", f"not UTF-8 text (byte {err.start}); not a vllm bench serve result")]
        ) from None
    except OSError as err:
        raise DocumentError([Problem(file, None, "", f"cannot read: {err.strerror}")]) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise DocumentError(
            [
                Problem(
                    file,
                    err.lineno,
                    "",
                    f"not JSON ({err.msg}, column {err.colno}); expected a vllm bench serve --save-result file",
                )
            ]
        ) from None
    return bench_run_from_record(file, text, data)


def bench_run_from_record(file: str, text: str, data: Any) -> BenchRun:
    """Check one parsed result (``text``: its JSON source, for line numbers); ``DocumentError`` lists every problem."""
    if not isinstance(data, dict) or not any(key in data for key in BENCH_REQUIRED_FIELDS):
        got = (
            type(data).__name__
            if not isinstance(data, dict)
            else f"an object with keys {', '.join(list(data)[:5]) or 'none'}"
        )
        raise DocumentError(
            [
                Problem(
                    file,
                    1,
                    "",
                    f"not a vllm bench serve result: expected an object with {', '.join(BENCH_REQUIRED_FIELDS)}, got {got}",
                )
            ]
        )
    reader = _Reader(file, text, data)
    concurrency = reader.integer("max_concurrency", 1)
    completed = reader.integer("completed", 1)
    output_tokens = reader.integer("total_output_tokens", 1)
    duration = reader.number("duration")
    throughput = reader.number("output_throughput")
    latencies = {
        key: value
        for key in _KEPT_LATENCIES
        if (value := reader.number(key, required=key == "mean_tpot_ms")) is not None
    }
    if completed is not None and output_tokens is not None and output_tokens <= completed:
        reader.problem(
            "total_output_tokens",
            f"must exceed completed ({completed}): every request needs tokens after its first to time a step, got {output_tokens}",
        )
    if (
        duration
        and throughput
        and output_tokens
        and abs(output_tokens / duration - throughput) > _THROUGHPUT_TOLERANCE * throughput
    ):
        reader.problem(
            "output_throughput",
            f"{throughput:g} tokens/s contradicts total_output_tokens / duration = {output_tokens / duration:.6g}",
        )
    counts = _spec_counts(reader)
    if reader.problems:
        raise DocumentError(reader.problems)
    if concurrency is None or completed is None or output_tokens is None:  # recorded as problems above
        raise DocumentError([Problem(file, None, "", "required fields are missing")])
    return BenchRun(
        file=file,
        max_concurrency=concurrency,
        completed=completed,
        total_output_tokens=output_tokens,
        duration_s=duration or 0.0,
        output_throughput=throughput or 0.0,
        latencies_ms=latencies,
        num_speculative_tokens=(counts.num_positions or 0) if counts is not None else 0,
        counts=counts,
        model_id=data["model_id"] if isinstance(data.get("model_id"), str) and data["model_id"] else None,
        temperature=_recorded_temperature(data),
    )


def _recorded_temperature(data: dict[str, Any]) -> float | None:
    """The run's temperature: a top-level ``temperature`` (--temperature, or --metadata temperature=T) or one
    inside ``sampling_params``; None when neither holds a finite number."""
    nested = data.get("sampling_params")
    for value in (data.get("temperature"), nested.get("temperature") if isinstance(nested, dict) else None):
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                continue
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def _spec_counts(reader: _Reader) -> CountWindow | None:
    present = [key for key in BENCH_SPEC_FIELDS if reader.data.get(key) is not None]
    if not present:
        return None
    missing = [key for key in BENCH_SPEC_FIELDS if key not in present]
    if missing:
        reader.problem(
            missing[0],
            f"speculative-decoding fields are partly present ({', '.join(present)}) but {', '.join(missing)} missing; "
            "a run with speculation has them all (vLLM scrapes them from the server's /metrics)",
        )
        return None
    drafts = reader.integer("spec_decode_num_drafts", 1)
    draft_tokens = reader.integer("spec_decode_draft_tokens", 1)
    accepted = reader.integer("spec_decode_accepted_tokens", 0)
    length = reader.number("spec_decode_acceptance_length")
    rate = reader.number("spec_decode_acceptance_rate", positive=False)
    rates = reader.data["spec_decode_per_position_acceptance_rates"]
    key = "spec_decode_per_position_acceptance_rates"
    if (
        not isinstance(rates, list)
        or not 1 <= len(rates) <= MAX_NUM_SPECULATIVE_TOKENS
        or not all(isinstance(r, int | float) and not isinstance(r, bool) and 0.0 <= r <= 1.0 for r in rates)
    ):
        reader.problem(
            key,
            f"must be 1 to {MAX_NUM_SPECULATIVE_TOKENS} fractions in [0, 1], one per draft position, got {str(rates)[:80]}",
        )
        return None
    if drafts is None or draft_tokens is None or accepted is None:
        return None
    k = len(rates)
    per_position = [round(r * drafts) for r in rates]
    if draft_tokens != k * drafts:
        reader.problem(
            "spec_decode_draft_tokens",
            f"{draft_tokens} is not K x num_drafts = {k} x {drafts}: the run drafted fewer than K tokens "
            "per step (a per-batch-size K table, or ngram); calibrate from runs at one fixed K",
        )
    for i, (r, n) in enumerate(zip(rates, per_position, strict=True)):
        if abs(r * drafts - n) > _COUNT_TOLERANCE * max(drafts, 1):
            reader.problem(
                key,
                f"position {i}: {r!r} x {drafts} drafts = {r * drafts:.4f} is not a whole number of drafts; the rates and "
                "spec_decode_num_drafts come from different runs?",
            )
            return None
        if i and n > per_position[i - 1]:
            reader.problem(
                key,
                f"position {i}: {r!r} exceeds position {i - 1}'s {rates[i - 1]!r}; per-position rates are unconditional and never rise",
            )
    if sum(per_position) != accepted:
        reader.problem(
            "spec_decode_accepted_tokens",
            f"{accepted} contradicts the per-position rates x num_drafts, which sum to {sum(per_position)}",
        )
    if accepted > draft_tokens:
        reader.problem(
            "spec_decode_accepted_tokens", f"must be <= spec_decode_draft_tokens ({draft_tokens}), got {accepted}"
        )
    if length is not None and abs(length - (1.0 + accepted / drafts)) > 1e-3:
        reader.problem(
            "spec_decode_acceptance_length",
            f"{length:g} contradicts 1 + accepted / drafts = {1.0 + accepted / drafts:.4f}",
        )
    if rate is not None and abs(rate - 100.0 * accepted / draft_tokens) > 0.05:
        reader.problem(
            "spec_decode_acceptance_rate",
            f"{rate:g}% contradicts 100 x accepted / draft tokens = {100.0 * accepted / draft_tokens:.3f}%",
        )
    return CountWindow(
        file=reader.file,
        line=None,
        num_positions=k,
        num_drafts=drafts,
        num_draft_tokens=draft_tokens,
        num_accepted_tokens=accepted,
        accepted_per_position=tuple(per_position),
        num_running=reader.data.get("max_concurrency") if isinstance(reader.data.get("max_concurrency"), int) else None,
    )

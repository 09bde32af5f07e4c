"""Many ``vllm bench serve`` runs -> a measured step-time table and the count windows for a profile.

Runs at the same (concurrency, K) are pooled: their decode time and decode steps are summed, so a
longer run weighs more. Two such runs that disagree by more than ``STEP_TIME_AGREEMENT`` on step time,
or by more than sampling noise on acceptance, contradict each other (a different server, flags or
traffic), and the error names both files. A table row's ``batch_size`` is the runs' mean decoding
batch (decode time over wall time, rounded; a little below ``--max-concurrency``, since requests that
prefill or wait do not decode), ``num_speculative_tokens`` their K.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from spectune.calibrate._bench import BenchRun
from spectune.calibrate._windows import CountWindow
from spectune.config import STEP_TIME_COLUMNS
from spectune.errors import DocumentError, Problem

__all__ = ["STEP_TIME_AGREEMENT", "BenchTable", "MeasuredStep", "bench_table", "step_time_csv"]

STEP_TIME_AGREEMENT = 0.10  # repeated runs of one point further apart than this contradict each other
_ACCEPTANCE_SIGMAS = 6.0  # ... and so do acceptance rates this many binomial standard errors apart
_ACCEPTANCE_MIN_GAP = 0.02  # (and at least this far apart: steps within a request are correlated)


@dataclass(frozen=True)
class MeasuredStep:
    """One table point: runs pooled at one concurrency and K."""

    batch_size: int  # the mean decoding batch, rounded
    num_speculative_tokens: int
    step_time_ms: float
    concurrency: int
    mean_batch_size: float
    acceptance_length: float
    mean_itl_ms: float | None  # pooled like the step time, for a cross-check
    files: tuple[str, ...]


@dataclass(frozen=True)
class BenchTable:
    """The pooled points (sorted by K, then batch size) and the K left out for lack of a second batch size."""

    runs: tuple[BenchRun, ...]
    points: tuple[MeasuredStep, ...]
    single_concurrency: tuple[MeasuredStep, ...]

    @property
    def profile_k(self) -> int | None:
        """The largest K measured (its runs give the acceptance profile): None when none speculated."""
        return max((run.num_speculative_tokens for run in self.runs), default=None) or None

    def profile_windows(self) -> list[CountWindow]:
        """Count windows of the runs at ``profile_k``, one per run, tagged with its concurrency."""
        k = self.profile_k
        return [run.counts for run in self.runs if run.counts is not None and run.num_speculative_tokens == k]


def _pool(runs: Sequence[BenchRun]) -> MeasuredStep:
    decode_time = sum(run.decode_time_ms for run in runs)
    batch = min(max(decode_time / sum(1000.0 * run.duration_s for run in runs), 1.0), float(runs[0].max_concurrency))
    steps = sum(run.decode_steps for run in runs)
    tokens = sum(run.total_output_tokens - run.completed for run in runs)
    with_itl = [run for run in runs if "mean_itl_ms" in run.latencies_ms]
    itl = (
        sum(run.latencies_ms["mean_itl_ms"] * run.completed for run in with_itl)
        / sum(run.completed for run in with_itl)
        if with_itl
        else None
    )
    accepted = sum(run.counts.num_accepted_tokens for run in runs if run.counts is not None)
    drafts = sum(run.counts.num_drafts for run in runs if run.counts is not None)
    return MeasuredStep(
        batch_size=round(batch),
        num_speculative_tokens=runs[0].num_speculative_tokens,
        step_time_ms=decode_time / steps,
        concurrency=runs[0].max_concurrency,
        mean_batch_size=batch,
        acceptance_length=1.0 + accepted / drafts if drafts else tokens / steps,
        mean_itl_ms=itl,
        files=tuple(run.file for run in runs),
    )


def _contradiction(first: BenchRun, other: BenchRun) -> str | None:
    """Why two runs of one (concurrency, K) cannot both be right, or None."""
    a, b = first.step_time_ms, other.step_time_ms
    if abs(a - b) > STEP_TIME_AGREEMENT * min(a, b):
        return (
            f"step time {b:.3f} ms here, {a:.3f} ms in {first.file} at the same concurrency {first.max_concurrency} and "
            f"K={first.num_speculative_tokens} (more than {STEP_TIME_AGREEMENT:.0%} apart): was the server, its flags or "
            "the GPU different? Keep the runs of one setup"
        )
    if (
        first.counts is None
        or other.counts is None
        or first.counts.accepted_per_position is None
        or other.counts.accepted_per_position is None
    ):
        return None
    n1, n2 = first.counts.num_drafts, other.counts.num_drafts
    for i, (c1, c2) in enumerate(
        zip(first.counts.accepted_per_position, other.counts.accepted_per_position, strict=True)
    ):
        p1, p2 = c1 / n1, c2 / n2
        pooled = (c1 + c2) / (n1 + n2)
        sigma = math.sqrt(max(pooled * (1 - pooled), 1e-12) * (1 / n1 + 1 / n2))
        if abs(p1 - p2) > max(_ACCEPTANCE_SIGMAS * sigma, _ACCEPTANCE_MIN_GAP):
            return (
                f"acceptance at position {i} is {p2:.4f} here, {p1:.4f} in {first.file} at the same concurrency and K "
                f"({abs(p1 - p2) / sigma:.0f} standard errors apart): different drafters, synthetic rates or traffic?"
            )
    return None


def bench_table(runs: Sequence[BenchRun]) -> BenchTable:
    """Pool runs by (concurrency, K); ``DocumentError`` at the first run that contradicts an earlier one."""
    groups: dict[tuple[int, int], list[BenchRun]] = {}
    problems = []
    for run in runs:
        group = groups.setdefault((run.max_concurrency, run.num_speculative_tokens), [])
        reason = _contradiction(group[0], run) if group else None
        if reason:
            problems.append(Problem(run.file, None, "", reason))
        group.append(run)
    if problems:
        raise DocumentError(problems)
    pooled = sorted((_pool(group) for group in groups.values()), key=lambda p: (p.num_speculative_tokens, p.batch_size))
    for before, after in zip(pooled, pooled[1:], strict=False):
        if (before.num_speculative_tokens, before.batch_size) == (after.num_speculative_tokens, after.batch_size):
            raise DocumentError(
                [
                    Problem(
                        after.files[0],
                        None,
                        "",
                        (
                            f"concurrency {after.concurrency} and {before.concurrency} (in {before.files[0]}) both decoded "
                            f"{after.batch_size} requests at a time on average at K={after.num_speculative_tokens}: measure "
                            "concurrencies further apart"
                        ),
                    )
                ]
            )
    per_k: dict[int, int] = {}
    for point in pooled:
        per_k[point.num_speculative_tokens] = per_k.get(point.num_speculative_tokens, 0) + 1
    return BenchTable(
        runs=tuple(runs),
        points=tuple(p for p in pooled if per_k[p.num_speculative_tokens] >= 2),
        single_concurrency=tuple(p for p in pooled if per_k[p.num_speculative_tokens] < 2),
    )


def step_time_csv(table: BenchTable) -> str:
    """The table as ``spectune`` reads it (``cost_model: {method: measured, step_times: FILE}``)."""
    lines = [
        "# Measured by vllm bench serve; written by 'spectune calibrate'.",
        "# step_time_ms = mean TPOT x (output tokens - requests) / drafts: decode time over decode steps, summed over",
        "# requests; batch_size = decode time / wall time, the mean decoding batch (see docs/calibration.md).",
        *(
            f"# batch_size {p.batch_size}, K={p.num_speculative_tokens}: --max-concurrency {p.concurrency}, {', '.join(p.files)}"
            for p in table.points
        ),
        ",".join(STEP_TIME_COLUMNS),
        *(f"{p.batch_size},{p.num_speculative_tokens},{p.step_time_ms:.4f}" for p in table.points),
    ]
    return "\n".join(lines) + "\n"

"""Repeated runs of one cell -> one measured step time: the median, with the MAD as its spread.

A cell is one (``--max-concurrency``, forced K). Its runs' step times (``BenchRun.step_time_ms``, the
estimator of ``_bench``) give the median and the median absolute deviation (MAD); the median is robust
to one slow run (a compilation, a neighbour on the GPU), the MAD says how far repeats disagree. A cell
with fewer than ``MIN_REPEATS`` runs has no spread to check, and one whose MAD exceeds
``max_relative_spread`` of its median is too noisy to rank K by: both are refused, naming the cell and
its files. The mean decoding batch a row is filed at is the runs' median too.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from spectune.calibrate._bench_table import BenchTable, MeasuredStep
from spectune.calibrate._sweep import CellRecord
from spectune.config import STEP_TIME_COLUMNS
from spectune.errors import DocumentError, Problem

__all__ = ["MAX_RELATIVE_SPREAD", "MIN_REPEATS", "RepeatedStep", "measured_step_csv", "repeated_table"]

MIN_REPEATS = 3
MAX_RELATIVE_SPREAD = 0.05  # MAD / median; GPU repeats of one server usually agree within a few percent


@dataclass(frozen=True)
class RepeatedStep(MeasuredStep):
    """A cell's median step time, with its spread and the repeats behind it."""

    step_time_mad_ms: float
    step_times_ms: tuple[float, ...]

    @property
    def relative_spread(self) -> float:
        return self.step_time_mad_ms / self.step_time_ms


def _cell_step(records: Sequence[CellRecord]) -> RepeatedStep:
    times = [r.run.step_time_ms for r in records]
    median = statistics.median(times)
    batch = statistics.median(r.run.mean_decoding_batch for r in records)
    accepted = sum(r.run.counts.num_accepted_tokens for r in records if r.run.counts is not None)
    drafts = sum(r.run.counts.num_drafts for r in records if r.run.counts is not None)
    itls = [r.run.latencies_ms["mean_itl_ms"] for r in records if "mean_itl_ms" in r.run.latencies_ms]
    return RepeatedStep(
        batch_size=round(batch),
        num_speculative_tokens=records[0].forced_k,
        step_time_ms=median,
        concurrency=records[0].concurrency,
        mean_batch_size=batch,
        acceptance_length=1.0 + accepted / drafts if drafts else 1.0,
        mean_itl_ms=statistics.median(itls) if itls else None,
        files=tuple(r.location for r in records),
        step_time_mad_ms=statistics.median(abs(t - median) for t in times),
        step_times_ms=tuple(times),
    )


def repeated_table(records: Sequence[CellRecord], *, max_relative_spread: float = MAX_RELATIVE_SPREAD) -> BenchTable:
    """Cells pooled from their repeats; ``DocumentError`` naming every cell that cannot be used."""
    cells: dict[tuple[int, int], list[CellRecord]] = {}
    for record in records:
        cells.setdefault((record.concurrency, record.forced_k), []).append(record)
    problems = []
    steps = []
    for (concurrency, k), group in sorted(cells.items(), key=lambda item: (item[0][1], item[0][0])):
        where = f"concurrency {concurrency}, K={k}"
        if len(group) < MIN_REPEATS:
            problems.append(
                Problem(
                    group[0].location,
                    None,
                    "",
                    f"cell ({where}) has {len(group)} run(s) ({', '.join(r.location for r in group)}); at least {MIN_REPEATS} "
                    "give its median and spread (vllm bench sweep serve --num-runs 3, or measure.sh's REPEATS)",
                )
            )
            continue
        step = _cell_step(group)
        if step.relative_spread > max_relative_spread:
            shown = ", ".join(f"{t:.3f}" for t in step.step_times_ms)
            problems.append(
                Problem(
                    group[0].location,
                    None,
                    "",
                    f"cell ({where}) is too noisy: step times {shown} ms, MAD {step.step_time_mad_ms:.3f} ms = "
                    f"{step.relative_spread:.1%} of the median {step.step_time_ms:.3f} ms, more than the "
                    f"{max_relative_spread:.1%} allowed (--max-spread); rerun it on a quiet GPU "
                    f"(runs: {', '.join(r.location for r in group)})",
                )
            )
            continue
        steps.append(step)
    problems += _duplicate_rows(steps)
    if problems:
        raise DocumentError(problems)
    per_k: dict[int, int] = {}
    for step in steps:
        per_k[step.num_speculative_tokens] = per_k.get(step.num_speculative_tokens, 0) + 1
    steps.sort(key=lambda s: (s.num_speculative_tokens, s.batch_size))
    return BenchTable(
        runs=tuple(r.run for r in records),
        points=tuple(s for s in steps if per_k[s.num_speculative_tokens] >= 2),
        single_concurrency=tuple(s for s in steps if per_k[s.num_speculative_tokens] < 2),
    )


def _duplicate_rows(steps: Sequence[RepeatedStep]) -> list[Problem]:
    seen: dict[tuple[int, int], RepeatedStep] = {}
    problems = []
    for step in steps:
        key = (step.batch_size, step.num_speculative_tokens)
        if key in seen:
            other = seen[key]
            problems.append(
                Problem(
                    step.files[0],
                    None,
                    "",
                    f"concurrency {step.concurrency} and {other.concurrency} (in {other.files[0]}) both decoded "
                    f"{step.batch_size} requests at a time on average at K={step.num_speculative_tokens}: measure "
                    "concurrencies further apart",
                )
            )
        seen[key] = step
    return problems


def measured_step_csv(table: BenchTable) -> str:
    """The table as ``cost_model: {method: measured, step_times: FILE}`` reads it, with the concurrency that
    produced each row and, from repeats, the MAD of its median."""
    repeated = all(isinstance(p, RepeatedStep) for p in table.points)
    columns = (*STEP_TIME_COLUMNS, "concurrency", *(("step_time_mad_ms",) if repeated else ()))
    lines = [
        "# Measured by vllm bench serve; written by 'spectune calibrate'.",
        "# step_time_ms = mean TPOT x (output tokens - requests) / drafts: decode time over decode steps, summed over",
        "# requests; batch_size = decode time / wall time, the mean decoding batch (see docs/calibration.md);",
        "# concurrency = the runs' --max-concurrency"
        + ("; step_time_ms is the median of the repeats, step_time_mad_ms their MAD." if repeated else "."),
        *(f"# batch_size {p.batch_size}, K={p.num_speculative_tokens}: {', '.join(p.files)}" for p in table.points),
        ",".join(columns),
    ]
    for p in table.points:
        row = [str(p.batch_size), str(p.num_speculative_tokens), f"{p.step_time_ms:.4f}", str(p.concurrency)]
        if isinstance(p, RepeatedStep) and repeated:
            row.append(f"{p.step_time_mad_ms:.4f}")
        lines.append(",".join(row))
    return "\n".join(lines) + "\n"

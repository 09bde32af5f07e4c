"""Tabular views of a study: ``trials.csv`` and the per-bucket summary the CLI prints."""

from __future__ import annotations

import csv
import io
import math

from spectune.config import CSV_METRICS, StudyMetrics
from spectune.study import (
    OFF,
    POLICY_LABELS,
    BucketChoice,
    Point,
    Recommendation,
    StudyOutcome,
    pareto_front,
    recommendation_provenance,
)

__all__ = ["TRIAL_COLUMNS", "pareto_rows", "policy_rows", "summary_rows", "tie_cell", "trials_csv"]

# The point's columns, the metrics marked for the CSV (StudyMetrics), then the trial's.
TRIAL_COLUMNS = (
    "number",
    "state",
    "batch_size",
    "candidate",
    "method",
    "rejection_sample_method",
    "draft_sample_method",
    "num_speculative_tokens",
    "requests_factor",
    *CSV_METRICS,
    "feasible",
    "duplicate_of",
    "worker",
    "duration_s",
)


def _number(metrics: StudyMetrics | None, name: str) -> str:
    value = metrics.value(name) if metrics is not None else math.nan
    return f"{value:.6g}" if math.isfinite(value) else ""


def _fixed(value: float | None) -> str:
    return f"{value:.1f}" if value is not None and math.isfinite(value) else "-"


def trials_csv(outcome: StudyOutcome) -> str:
    """One row per trial, every state; K = 0 rows have no method (speculation off). A study that searched
    a runtime policy has a ``runtime`` column after the draft sampling (none, vllm_adaptive,
    sglang_adaptive); one that did not keeps the columns it always had."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    runtimes = any(c.runtime != "none" for c in outcome.space.combos)
    columns = list(TRIAL_COLUMNS)
    if runtimes:
        columns.insert(columns.index("draft_sample_method") + 1, "runtime")
    writer.writerow(columns)
    for trial in outcome.trials:
        point = trial.point
        combo = point.combo if point is not None else None
        evaluation = outcome.completed.get(point) if point is not None else None
        feasible = "" if trial.metrics is None or evaluation is None else str(evaluation.feasible).lower()
        writer.writerow(
            [
                trial.number,
                trial.state,
                point.batch_size if point else "",
                combo.candidate if combo else (OFF if point else ""),
                outcome.space.candidate(combo.candidate).method if combo else "",
                combo.rejection_sample_method if combo else "",
                combo.draft_sample_method if combo else "",
                *([combo.runtime if combo else ""] if runtimes else []),
                point.num_speculative_tokens if point else "",
                point.requests_factor if point else "",  # > 1: simulated again with more requests (precision)
                *(_number(trial.metrics, name) for name in CSV_METRICS),
                feasible,
                "" if trial.duplicate_of is None else trial.duplicate_of,
                trial.worker or "",
                "" if trial.duration_s is None else f"{trial.duration_s:.3f}",
            ]
        )
    return buffer.getvalue()


def policy_rows(recommendation: Recommendation) -> list[dict[str, str]]:
    """Per bucket, what each searched policy gives there: its K (K max for adaptive policies) and its
    throughput; empty unless the study compared more than one policy."""
    if len(recommendation.space.policies) < 2:
        return []
    rows = []
    for i, choice in enumerate(recommendation.choices):
        row = {"batch sizes": f"{choice.first_batch_size}-{choice.last_batch_size}"}
        for policy in recommendation.policies:
            chosen = policy.score.choices[i] if i < len(policy.score.choices) else None
            name = POLICY_LABELS[policy.policy]
            if chosen is None or chosen.evaluation is None:
                row[name] = "not simulated"
                continue
            k = (
                f"K <= {chosen.num_speculative_tokens}"
                if policy.combo.runtime != "none"
                else f"K {chosen.num_speculative_tokens}"
            )
            row[name] = f"{k}, {chosen.evaluation.throughput:,.0f} tokens/s"
        rows.append(row)
    return rows


def summary_rows(outcome: StudyOutcome) -> list[dict[str, str]]:
    """Per bucket of the recommendation: batch sizes served, K, throughput, gain over K = 0, p99 TPOT, tie set."""
    recommendation = outcome.recommendation
    if recommendation is None:
        return []
    marks = {
        bucket.batch_size: bucket.summary for bucket in recommendation_provenance(recommendation, outcome.completed)
    }
    rows = []
    for choice in recommendation.choices:
        evaluation = choice.evaluation
        off = outcome.completed.get(Point.off(choice.batch_size))
        if evaluation is not None:  # K = 0 on the same requests when the tie set was simulated again with more
            off = outcome.completed.get(Point.off(choice.batch_size, evaluation.point.refinement), off)
        metrics = evaluation.metrics if evaluation is not None else None
        gain = ""
        if evaluation is not None and off is not None and off.throughput > 0:
            gain = f"{evaluation.throughput / off.throughput:.2f}x"
        rows.append(
            {
                "batch size": str(choice.batch_size),
                "serves": f"{choice.first_batch_size}-{choice.last_batch_size}",
                "K": str(choice.num_speculative_tokens),
                "tokens/s": f"{evaluation.throughput:,.0f}" if evaluation is not None else "-",
                "vs K=0": gain or "-",
                "TPOT p99 ms": _fixed(metrics.tpot_p99_ms if metrics is not None else None),
                "SLOs": ("met" if evaluation.feasible else "missed") if evaluation is not None else "-",
                "tie set": tie_cell(choice),
                "note": choice.note or "",
                "marks": marks.get(choice.batch_size, ""),
            }
        )
    return rows


def tie_cell(choice: BucketChoice) -> str:
    """The bucket's tie set, e.g. 'K 4-8 within 0.5%': every K as good as the chosen one within noise."""
    return choice.ties.describe() if choice.ties is not None else "-"


def pareto_rows(outcome: StudyOutcome) -> list[dict[str, str]]:
    """With two objectives: each bucket's Pareto front (throughput up, p99 TPOT down), fastest first."""
    rows = []
    for batch_size in outcome.space.batch_sizes:
        evaluations = [e for p, e in outcome.completed.items() if p.batch_size == batch_size]
        for evaluation in sorted(pareto_front(evaluations), key=lambda e: -e.throughput):
            point = evaluation.point
            rows.append(
                {
                    "batch size": str(batch_size),
                    "config": OFF if point.combo is None else f"{point.combo.label} K={point.num_speculative_tokens}",
                    "tokens/s": f"{evaluation.throughput:,.0f}",
                    "TPOT p99 ms": _fixed(evaluation.metrics.tpot_p99_ms),
                    "SLOs": "met" if evaluation.feasible else "missed",
                }
            )
    return rows

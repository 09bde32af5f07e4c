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

__all__ = ["TRIAL_COLUMNS", "auc_rows", "pareto_rows", "policy_rows", "summary_rows", "tie_cell", "trials_csv"]

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
    sglang_adaptive), and one that simulated adaptive verification at other confidence_auc values
    (``_sensitivity``) a ``confidence_auc`` column after ``requests_factor`` (empty: the acceptance's own);
    one that did neither keeps the columns it always had."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    runtimes = any(c.runtime != "none" for c in outcome.space.combos)
    aucs = any(t.point is not None and t.point.confidence_auc is not None for t in outcome.trials)
    columns = list(TRIAL_COLUMNS)
    if runtimes:
        columns.insert(columns.index("draft_sample_method") + 1, "runtime")
    if aucs:
        columns.insert(columns.index("requests_factor") + 1, "confidence_auc")
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
                *([_auc(point)] if aucs else []),
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


def auc_rows(recommendation: Recommendation) -> list[dict[str, str]]:
    """Where nothing measures adaptive verification's confidence_auc: per value simulated (the synthesized
    rows' first), the best adaptive entry's throughput per bucket, its aggregate, how far that is from the
    best policy no estimate touches, and the policy recommended between the two (``_sensitivity``); empty
    elsewhere or before they are simulated."""
    sensitivity = recommendation.auc_sensitivity
    if sensitivity is None or not sensitivity.simulated:
        return []
    rows = []
    for outcome in sensitivity.outcomes:
        assert outcome.entry is not None
        row = {"confidence_auc": sensitivity.describe_value(outcome)}
        for choice in outcome.entry.score.choices:
            evaluation = choice.evaluation
            k = choice.num_speculative_tokens
            row[f"{choice.first_batch_size}-{choice.last_batch_size}"] = (
                f"{f'K <= {k}' if k else OFF}, {evaluation.throughput:,.0f}" if evaluation is not None else "-"
            )
        row["aggregate tokens/s"] = f"{outcome.entry.aggregate_throughput_tokens_per_s:,.0f}"
        if sensitivity.reference is not None and outcome.gap is not None:
            row[f"vs {sensitivity.reference.describe()}"] = f"{outcome.gap:+.1%}" + (" (tie)" if outcome.tied else "")
            row["recommended"] = outcome.recommended.describe() if outcome.recommended is not None else "-"
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


def _auc(point: Point | None) -> str:
    return f"{point.confidence_auc:g}" if point is not None and point.confidence_auc is not None else ""


def pareto_rows(outcome: StudyOutcome) -> list[dict[str, str]]:
    """With two objectives: each bucket's Pareto front (throughput up, p99 TPOT down), fastest first."""
    rows = []
    for batch_size in outcome.space.batch_sizes:
        # a point at another confidence_auc (``_sensitivity``) is a what-if, not a config to pick
        evaluations = [
            e for p, e in outcome.completed.items() if p.batch_size == batch_size and p.confidence_auc is None
        ]
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

"""``report.html``: one self-contained page (inline CSS and SVG, no scripts, no network).

It shows the recommendation and its schedule, the policies compared (and, where adaptive verification
rests on a confidence_auc nothing measures, how it moves with it), throughput against K for every combo
at every bucket (error bars of the comparison noise, the recommended combo's tie set shaded, the chosen
point ringed), and, when p99 TPOT is a second objective, each bucket's throughput/TPOT trade-off with
its Pareto front.
"""

from __future__ import annotations

import json
from html import escape

from spectune.config import or_nan
from spectune.export._svg import PALETTE, Band, Series, chart_svg
from spectune.export._tables import auc_rows, policy_rows, summary_rows
from spectune.export._vllm import vllm_serve_command, vllm_speculative_config
from spectune.study import Evaluation, StudyOutcome, pareto_front, provenance_notes, recommendation_provenance

__all__ = ["report_html"]

_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 1000px; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f4f4f4; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
.note { color: #8a5a00; }
"""


def _tpot(evaluation: Evaluation) -> float:
    return or_nan(evaluation.metrics.tpot_p99_ms)


def _table(rows: list[dict[str, str]]) -> str:
    if not rows:
        return "<p>No results yet.</p>"
    head = "".join(f"<th>{escape(k)}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{escape(v)}</td>" for v in row.values()) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _k_curves(outcome: StudyOutcome, batch_size: int) -> str:
    """Throughput against K per combo, +-1 standard error of the comparison noise, the recommended
    combo's tie set shaded and its chosen K ringed (points at the precision its tie set reached)."""
    space = outcome.space
    recommendation = outcome.recommendation
    off = outcome.completed.get(space.point(batch_size, "", 0))
    series = []
    band = None
    for i, combo in enumerate(space.combos):
        evaluations = [
            e for k in space.k_values[1:] if (e := outcome.completed.get(space.point(batch_size, combo.label, k)))
        ]
        if not evaluations:
            continue
        points = ([off] if off is not None else []) + evaluations
        color = PALETTE[i % len(PALETTE)]
        emphasis: list[tuple[float, float]] = []
        if recommendation is not None and recommendation.combo == combo:
            chosen = next(c for c in recommendation.choices if c.batch_size == batch_size)
            if chosen.ties is not None:
                # The tie set's members at their refined precision replace the first pass's points.
                refined = {e.point.num_speculative_tokens: e for e in chosen.ties.members}
                points = [refined.get(e.point.num_speculative_tokens, e) for e in points]
                band = Band(min(chosen.ties.ks), max(chosen.ties.ks), color, f"tied: {chosen.ties.describe()}")
            if chosen.evaluation is not None:
                emphasis = [(chosen.num_speculative_tokens, chosen.evaluation.throughput)]
        series.append(
            Series(
                combo.label,
                [(e.point.num_speculative_tokens, e.throughput) for e in points],
                color,
                hollow=[not e.feasible for e in points],
                emphasis=emphasis,
                errors=[e.noise for e in points],
            )
        )
    return chart_svg(
        series,
        title=f"batch size {batch_size}",
        x_label="K (draft tokens; 0 = off)",
        y_label="output tokens/s",
        integer_x=True,
        band=band,
    )


def _pareto_chart(outcome: StudyOutcome, batch_size: int) -> str:
    evaluations = [e for p, e in outcome.completed.items() if p.batch_size == batch_size and p.confidence_auc is None]
    front = pareto_front(evaluations)
    limit = next((c for c in outcome.space.constraints if c.metric == "tpot_p99_ms" and c.op == "<="), None)
    series = [
        Series(
            "all points",
            [(e.throughput, _tpot(e)) for e in evaluations],
            "#9aa",
            lines=False,
            hollow=[not e.feasible for e in evaluations],
        ),
        Series("Pareto front", [(e.throughput, _tpot(e)) for e in front], "#d62728"),
    ]
    return chart_svg(
        series,
        title=f"batch size {batch_size}: throughput vs p99 TPOT",
        x_label="output tokens/s",
        y_label="p99 TPOT (ms)",
        hline=(limit.bound, limit.label) if limit is not None else None,
    )


def report_html(outcome: StudyOutcome) -> str:
    """The whole page as a string."""
    space = outcome.space
    recommendation = outcome.recommendation
    parts = [
        "<!DOCTYPE html>",
        f"<html><head><meta charset='utf-8'><title>spectune study {escape(space.name)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>spectune study <code>{escape(space.name)}</code></h1>",
        f"<p>{len(outcome.trials)} trials, {outcome.num_evaluations} simulations of a {space.size}-point space; "
        f"storage {escape(outcome.storage_label)}; simulator {escape(str(outcome.simulator_version))}.</p>",
    ]
    if space.constraints:
        parts.append(
            "<p>SLOs: "
            + ", ".join(f"<code>{escape(c.label)}</code>" for c in space.constraints)
            + " (hollow points miss them)</p>"
        )
    if recommendation is None:
        parts.append("<p>No recommendation yet: no trial has completed.</p>")
    else:
        policy = (
            f"{recommendation.verdict.winner.describe()}: "
            if len(space.policies) > 1 and recommendation.verdict
            else ""
        )
        parts.append(f"<h2>Recommendation: {escape(policy + recommendation.combo.label)}</h2>")
        if outcome.partial_note is not None:
            parts.append(f"<p class='note partial'><strong>{escape(outcome.partial_note)}</strong></p>")
        parts.append(_table(summary_rows(outcome)))
        for note in recommendation.notes:
            parts.append(f"<p class='note'>{escape(note)}</p>")
        for note in provenance_notes(recommendation_provenance(recommendation, outcome.completed)):
            parts.append(f"<p class='note mark'>Extrapolated: {escape(note)}</p>")
        if recommendation.speculation_off_everywhere:
            parts.append(f"<pre>{escape(vllm_serve_command(recommendation))}</pre>")
        else:
            parts.append("<p><code>vllm serve TARGET --speculative-config</code>:</p>")
            parts.append(f"<pre>{escape(json.dumps(vllm_speculative_config(recommendation)))}</pre>")
        ranking = [
            {
                "combo": score.combo.label,
                "buckets simulated": f"{score.buckets_covered}/{len(space.batch_sizes)}",
                "aggregate tokens/s": f"{score.aggregate_throughput_tokens_per_s:,.0f}",
            }
            for score in recommendation.ranking
        ]
        parts.append("<h3>Combos (weighted geometric mean over buckets of each combo's best)</h3>")
        parts.append(_table(ranking))
        policies = policy_rows(recommendation)
        if policies:
            parts.append(
                "<h3>Policies per batch size (each policy's best combo; K max for the adaptive ones)</h3>"
                + (f"<p>{escape(recommendation.verdict.sentence())}</p>" if recommendation.verdict else "")
            )
            parts.append(_table(policies))
        sensitivity = recommendation.auc_sensitivity
        if sensitivity is not None:
            parts.append(
                "<h3>Adaptive verification against the acceptance estimate's quality (confidence_auc)</h3>"
                f"<p>{escape(sensitivity.sentence())}. The same chosen K max per batch size, simulated again with "
                "the estimate ranking accepted drafts above rejected ones as a weak and a strong drafter's would "
                "(docs/policies.md).</p>"
            )
            rows = auc_rows(recommendation)
            if rows:
                parts.append(_table(rows))
    parts.append(
        "<h2>Throughput against K</h2><p>Error bars: \u00b11 standard error of the noise a comparison within a batch "
        "size sees (its points simulate the same requests). Shaded: the recommended combo's tie set, every K within "
        "max(2\u03c3, 0.5 %) of its best; the ringed K is the one the table uses.</p><div class='charts'>"
    )
    parts.extend(_k_curves(outcome, b) for b in space.batch_sizes)
    parts.append("</div>")
    if "tpot_p99" in space.objectives:
        parts.append("<h2>Pareto fronts: throughput vs p99 TPOT</h2><div class='charts'>")
        parts.extend(_pareto_chart(outcome, b) for b in space.batch_sizes)
        parts.append("</div>")
    parts.append("</body></html>")
    return "\n".join(parts)

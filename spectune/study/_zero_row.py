"""A 0 row in a speculative deployment is not speculation off: the drafter stays loaded and still runs.

A study simulates K = 0 once per bucket, as plain decoding without a drafter (the 'off' point, shared
by every combo). With ``cost_model.zero_k_draft_cost`` set, a combo's K = 0 choice is that point with
each step made longer by the drafter's pass (``spectune.cost.zero_row_draft_time``, kept per candidate
and bucket in the space's context): throughput and the step-bound latencies scale by
step / (step + drafter pass), a first-order correction of the simulated plain decoding (the batch a
closed loop holds barely changes). The recommendation then says, where its schedule has 0 rows,
whether those rows or turning speculation off (no drafter loaded) serve faster, and by how much.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from spectune.config import STEP_SCALED_METRICS, StudyDocument, default_drafter
from spectune.cost import RooflineCostModel, zero_row_draft_time
from spectune.study._records import Evaluation, evaluate_metrics
from spectune.study._space import Combo, Point, StudySpace

__all__ = ["zero_row_context", "zero_row_evaluation", "zero_row_notes"]


def zero_row_context(
    document: StudyDocument, prompt_tokens: float | None, output_tokens: float | None
) -> dict[str, Any]:
    """Per candidate and bucket, the drafter's extra ms in a K = 0 step, for a table whose largest K is 1..max."""
    mode = document.cost_model.zero_k_draft_cost
    if mode == "none":
        return {}
    context = (prompt_tokens or 0.0) + (output_tokens or 0.0) / 2  # mean tokens in a decoding request's KV cache
    taxes: dict[str, Any] = {}
    for candidate in document.candidates:
        drafter = candidate.drafter or default_drafter(candidate.speculative.method, document.target_model)
        if drafter.drafting == "lookup":
            continue
        roofline = RooflineCostModel(document.hardware, document.target_model, drafter, document.cost_model)
        taxes[candidate.label] = {
            str(batch): [
                1e3 * zero_row_draft_time(roofline, mode, batch, context, k)
                for k in range(1, document.search.num_speculative_tokens.max + 1)
            ]
            for batch in document.schedule.batch_sizes
        }
    return {"mode": mode, "draft_ms": taxes}


def _tax_ms(space: StudySpace, combo: Combo, batch_size: int) -> float:
    taxes = space.context.get("zero_row", {}).get("draft_ms", {}).get(combo.candidate, {}).get(str(batch_size))
    return float(taxes[-1]) if taxes else 0.0  # costed at the searched maximum K: a table's largest K is at most that


def zero_row_evaluation(space: StudySpace, combo: Combo, batch_size: int, off: Evaluation | None) -> Evaluation | None:
    """The 'off' point as a 0 row of ``combo``'s table: slower by the drafter's pass (unchanged without the term)."""
    tax = _tax_ms(space, combo, batch_size)
    step = off.metrics.mean_step_ms if off is not None else None
    if off is None or tax <= 0 or step is None or step <= 0:
        return off
    factor = step / (step + tax)
    changes: dict[str, Any] = {}
    for name, scaling in STEP_SCALED_METRICS.items():
        value = getattr(off.metrics, name)
        if value is not None:
            changes[name] = value * factor if scaling == "rate" else value / factor
    taxed = evaluate_metrics(space, off.point, dataclasses.replace(off.metrics, **changes), off.trial_number)
    return dataclasses.replace(taxed, zero_row_draft_ms=tax)


def zero_row_notes(
    space: StudySpace, combo: Combo, choices: Any, completed: Mapping[Point, Evaluation], aggregate: float
) -> list[str]:
    """Where a speculative deployment pays the drafter at K = 0 and speculation off would serve a bucket faster:
    that bucket's choice (a 0 row, or the K that beat it) against speculation off, then the whole schedule
    against speculation off everywhere."""
    mode = space.context.get("zero_row", {}).get("mode")
    if not mode:
        return []
    notes = []
    for choice in choices:
        off = completed.get(space.point(choice.batch_size, combo.label, 0))
        chosen = choice.evaluation
        if off is None or chosen is None or chosen.throughput <= 0 or off.throughput <= chosen.throughput:
            continue
        if choice.num_speculative_tokens == 0:
            what = f"this 0 row keeps the drafter running ({mode}, +{chosen.zero_row_draft_ms:.2f} ms a step)"
        else:
            what = f"K={choice.num_speculative_tokens} beats a 0 row, which would keep the drafter running ({mode})"
        notes.append(
            f"batch sizes {choice.first_batch_size}-{choice.last_batch_size}: {what}: {chosen.throughput:,.0f} tokens/s; "
            f"speculation off (no drafter loaded) would serve {off.throughput:,.0f} tokens/s here, {off.throughput / chosen.throughput - 1:.1%} more"
        )
    if not notes:
        return []
    off_log, weights = 0.0, 0.0
    for batch_size, weight in zip(space.batch_sizes, space.weights, strict=True):
        off = completed.get(space.point(batch_size, combo.label, 0))
        if off is not None and off.throughput > 0:
            off_log += weight * math.log(off.throughput)
            weights += weight
    if weights > 0 and aggregate > 0:
        everywhere_off = math.exp(off_log / weights)
        winner = "this schedule" if aggregate >= everywhere_off else "speculation off everywhere"
        notes.append(
            f"over all buckets: this schedule {aggregate:,.0f} tokens/s (aggregate), speculation off everywhere "
            f"{everywhere_off:,.0f}: {winner} wins by {abs(aggregate / everywhere_off - 1):.1%}"
        )
    return notes

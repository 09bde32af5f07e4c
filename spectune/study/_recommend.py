"""From evaluations to one recommendation: a combo, and its best K per batch-size bucket.

vLLM serves one method, one verification rule and one draft sampling, so the recommendation is one
combo -- the one with the best aggregate over buckets (the weighted geometric mean of its chosen
throughput per bucket, i.e. the mean relative gain) -- with its own K per bucket, merged into
``num_speculative_tokens_per_batch_size`` rows.

Results within the simulation's noise are ties, and a tie goes to the smaller K (fewer draft tokens
cost less memory and less at larger batch sizes than the simulation saw): a point ties with the best
when its throughput is within max(2 sigma, 0.5 %) of it, sigma combining both points' noise. The
noise is the simulator's standard error less what all points of a bucket share (they simulate the
same requests): see ``_records.comparison_noise``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from spectune.study._records import Evaluation
from spectune.study._space import Combo, Point, StudySpace, bucket_ranges
from spectune.study._zero_row import zero_row_evaluation, zero_row_notes

__all__ = [
    "BucketChoice",
    "ComboScore",
    "Recommendation",
    "choose_in_bucket",
    "is_tie",
    "merge_schedule",
    "recommend",
]

TIE_SIGMAS = 2.0
TIE_RELATIVE = 0.005


def is_tie(best: Evaluation, other: Evaluation) -> bool:
    """Whether ``other`` is within the noise of ``best`` (both feasible): max(2 sigma, 0.5 %)."""
    sigma = math.hypot(best.noise, other.noise)
    tolerance = max(TIE_SIGMAS * sigma, TIE_RELATIVE * abs(best.throughput))
    return other.throughput >= best.throughput - tolerance


def choose_in_bucket(evaluations: list[Evaluation]) -> Evaluation | None:
    """The smallest-K evaluation that ties with the best; infeasible ones only when nothing is feasible."""
    if not evaluations:
        return None
    feasible = [e for e in evaluations if e.feasible]
    if not feasible:
        return max(evaluations, key=lambda e: (e.score, -e.point.num_speculative_tokens))
    best = max(feasible, key=lambda e: (e.throughput, -e.point.num_speculative_tokens))
    return min((e for e in feasible if is_tie(best, e)), key=lambda e: e.point.num_speculative_tokens)


@dataclass(frozen=True)
class BucketChoice:
    """The chosen K at one bucket, the batch sizes it covers, and the evaluation behind it."""

    batch_size: int
    first_batch_size: int
    last_batch_size: int
    num_speculative_tokens: int
    evaluation: Evaluation | None
    note: str | None = None


@dataclass(frozen=True)
class ComboScore:
    """A combo's aggregate: buckets it covers and the weighted geometric mean of chosen throughput."""

    combo: Combo
    buckets_covered: int
    aggregate_throughput_tokens_per_s: float
    choices: tuple[BucketChoice, ...]


@dataclass(frozen=True)
class Recommendation:
    """The config to serve: one combo, one K per bucket, merged schedule rows [start_bs, end_bs, K]."""

    space: StudySpace
    combo: Combo
    choices: tuple[BucketChoice, ...]
    schedule: tuple[tuple[int, int, int], ...]
    num_speculative_tokens: int
    aggregate_throughput_tokens_per_s: float
    ranking: tuple[ComboScore, ...]
    notes: tuple[str, ...]

    @property
    def speculation_off_everywhere(self) -> bool:
        return all(k == 0 for _, _, k in self.schedule)


def merge_schedule(rows: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Merge neighbouring rows with the same K; rows must be sorted and contiguous."""
    merged: list[tuple[int, int, int]] = []
    for start, end, k in rows:
        if merged and merged[-1][2] == k and merged[-1][1] + 1 == start:
            merged[-1] = (merged[-1][0], end, k)
        else:
            merged.append((start, end, k))
    return merged


def _bucket_evaluations(space: StudySpace, combo: Combo, batch_size: int, completed: Mapping[Point, Evaluation]) -> list[Evaluation]:
    """The evaluations of ``combo`` at one bucket, its K = 0 point included."""
    points = [space.point(batch_size, combo.label, k) for k in space.k_values]
    return [completed[p] for p in points if p in completed]


def _combo_score(space: StudySpace, combo: Combo, completed: Mapping[Point, Evaluation]) -> ComboScore:
    ranges = bucket_ranges(space.batch_sizes, space.max_batch_size)
    choices = []
    covered = 0
    log_sum = 0.0
    weight_sum = 0.0
    for batch_size, (first, last), weight in zip(space.batch_sizes, ranges, space.weights):
        own = [completed[p] for k in space.k_values[1:] if (p := space.point(batch_size, combo.label, k)) in completed]
        off = zero_row_evaluation(space, combo, batch_size, completed.get(space.point(batch_size, combo.label, 0)))
        chosen = choose_in_bucket(own + ([off] if off is not None else []))
        if own and chosen is not None:
            covered += 1
            if chosen.feasible and chosen.throughput > 0:
                log_sum += weight * math.log(chosen.throughput)
                weight_sum += weight
        k = chosen.point.num_speculative_tokens if chosen is not None and own else -1
        choices.append(BucketChoice(batch_size, first, last, k, chosen if own else None))
    aggregate = math.exp(log_sum / weight_sum) if weight_sum > 0 else 0.0
    return ComboScore(combo, covered, aggregate, tuple(choices))


def _fill_unevaluated(choices: tuple[BucketChoice, ...], space: StudySpace, completed: Mapping[Point, Evaluation]) -> tuple[list[BucketChoice], list[str]]:
    """Buckets the combo was never simulated at take K = 0 if that was measured, else a neighbour's K."""
    filled = list(choices)
    notes = []
    for i, choice in enumerate(filled):
        if choice.num_speculative_tokens >= 0:
            continue
        off = completed.get(space.point(choice.batch_size, "", 0))
        known = [c for c in filled if c.num_speculative_tokens >= 0]
        if not known:
            k, how = 0, "nothing was simulated for this combo; speculation off"
        else:
            nearest = min(known, key=lambda c: abs(math.log(c.batch_size / choice.batch_size)))
            k, how = nearest.num_speculative_tokens, f"not simulated; K copied from batch size {nearest.batch_size}"
        if off is not None and k == 0:
            how = "not simulated with speculation; speculation off"
        filled[i] = BucketChoice(choice.batch_size, choice.first_batch_size, choice.last_batch_size, k, None, how)
        notes.append(f"batch size {choice.batch_size}: {how}")
    return filled, notes


def recommend(space: StudySpace, completed: Mapping[Point, Evaluation]) -> Recommendation | None:
    """The best combo by aggregate over buckets (near-ties to the earlier combo), with its schedule."""
    scores = [_combo_score(space, combo, completed) for combo in space.combos]
    scores = [s for s in scores if s.buckets_covered > 0]
    if not scores:
        return None
    most_covered = max(s.buckets_covered for s in scores)
    eligible = [s for s in scores if s.buckets_covered == most_covered]
    top = max(s.aggregate_throughput_tokens_per_s for s in eligible)
    # Near-ties between combos go to the earlier one in the document (the simpler rule/sampling first).
    winner = next(s for s in eligible if s.aggregate_throughput_tokens_per_s >= top * (1 - TIE_RELATIVE))
    ranking = sorted(scores, key=lambda s: (-s.buckets_covered, -s.aggregate_throughput_tokens_per_s))
    choices, notes = _fill_unevaluated(winner.choices, space, completed)
    for choice in choices:
        if choice.evaluation is not None and not choice.evaluation.feasible:
            notes.append(f"batch size {choice.batch_size}: no simulated config meets the SLOs; the least violating is used")
        if any(e.stderr >= e.throughput > 0 for e in _bucket_evaluations(space, winner.combo, choice.batch_size, completed)):
            notes.append(
                f"batch size {choice.batch_size}: some simulations were too short for the simulator to estimate "
                "their noise (standard error = the whole throughput); comparisons rest on their acceptance counts "
                "alone; simulate more requests or longer outputs"
            )
    schedule = merge_schedule([(c.first_batch_size, c.last_batch_size, c.num_speculative_tokens) for c in choices])
    max_k = max(k for _, _, k in schedule)
    notes += zero_row_notes(space, winner.combo, choices, completed, winner.aggregate_throughput_tokens_per_s)
    if max_k == 0:
        notes.append(
            "speculation does not pay off at any batch size: serve without a speculative config (a table of 0 rows "
            "would still load the drafter, and vLLM runs it in 0-row steps)"
        )
    return Recommendation(
        space=space,
        combo=winner.combo,
        choices=tuple(choices),
        schedule=tuple(schedule),
        num_speculative_tokens=max(max_k, 1),
        aggregate_throughput_tokens_per_s=winner.aggregate_throughput_tokens_per_s,
        ranking=tuple(ranking),
        notes=tuple(notes),
    )

"""From evaluations to a combo's score: a K per batch-size bucket chosen from its tie set, aggregated.

(``_policies`` scores each searched policy with these; ``_recommendation`` builds the recommendation.)

vLLM serves one method, one verification rule and one draft sampling, so the recommendation is one
combo -- the one with the best aggregate over buckets (the weighted geometric mean of its chosen
throughput per bucket, i.e. the mean relative gain) -- with its own K per bucket, merged into
``num_speculative_tokens_per_batch_size`` rows.

Near the optimum, throughput against K is a plateau, and results within the simulation's noise are
ties: a point ties with the best when its throughput is within max(2 sigma, 0.5 %) of it, sigma
combining both points' noise (the simulator's standard error less what all points of a bucket share,
since they simulate the same requests: see ``_records.comparison_noise``). A bucket's *tie set* is
every evaluated K that ties with its best (an ``underfilled`` simulation, which did not measure its
bucket, ties with every K). The K table takes one K from each tie set (a measured one where there is
one): the table that
never rises with the batch size wherever the tie sets allow one, then with the fewest changes of K
(vLLM captures CUDA graphs per K), then the smallest K (fewer draft tokens cost less memory and less
at larger batch sizes than the simulation saw). A rise that no choice avoids is kept and explained.

How many requests a point is simulated with is decided apart (``_precision``); ``bucket_tie_set``
reads each tie set at the highest precision all its members reached.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from spectune.study._records import Evaluation
from spectune.study._space import Combo, Point, StudySpace, bucket_ranges
from spectune.study._zero_row import zero_row_evaluation

__all__ = [
    "BucketChoice",
    "ComboScore",
    "MAX_REFINEMENT",
    "TIE_RELATIVE",
    "TIE_SIGMAS",
    "TieSet",
    "bucket_evaluations",
    "bucket_tie_set",
    "choose_in_bucket",
    "combo_gap",
    "combo_score",
    "combo_tie",
    "common_precision",
    "is_tie",
    "merge_schedule",
    "monotone_ks",
    "pick_score",
    "schedule_ks",
    "tied_by_noise_only",
    "underfilled",
]

TIE_SIGMAS = 2.0
TIE_RELATIVE = 0.005
MAX_REFINEMENT = 2  # at most 4**2 = 16 times a bucket's requests
UNDERFILLED = 0.8  # a mean batch below this share of the batch size: the run did not measure the bucket


def underfilled(evaluation: Evaluation) -> bool:
    """Whether the simulation's batch stayed well below its bucket's batch size (mean over its measured
    window). A closed loop fills its batch only once enough requests are in flight; a run too short for
    a steady state (few requests, or so few steps at a large K that its measured window covers the fill
    and the drain) reports the throughput of a smaller batch, which is not the bucket's."""
    mean = evaluation.metrics.mean_batch_size
    return mean is not None and mean < UNDERFILLED * evaluation.point.batch_size


def comparison_sigma(evaluation: Evaluation) -> float:
    """The noise a comparison with this point has to beat: the shared-request correction's
    (``Evaluation.noise``), or, for an underfilled point, its whole throughput -- it says nothing about
    the bucket, so it ties with every K until adaptive precision simulates it with more requests."""
    return max(evaluation.noise, abs(evaluation.throughput)) if underfilled(evaluation) else evaluation.noise


def tie_tolerance(best: Evaluation, other: Evaluation) -> float:
    """How far (tokens/s) below ``best`` a point still ties with it: max(2 sigma, 0.5 %)."""
    return max(
        TIE_SIGMAS * math.hypot(comparison_sigma(best), comparison_sigma(other)), TIE_RELATIVE * abs(best.throughput)
    )


def is_tie(best: Evaluation, other: Evaluation) -> bool:
    """Whether ``other`` is within the noise of ``best`` (both feasible): max(2 sigma, 0.5 %)."""
    return other.throughput >= best.throughput - tie_tolerance(best, other)


def tied_by_noise_only(best: Evaluation, other: Evaluation) -> bool:
    """Tied, but further below the best than the 0.5 % floor: more precision could tell them apart."""
    return is_tie(best, other) and other.throughput < best.throughput - TIE_RELATIVE * abs(best.throughput)


def choose_in_bucket(evaluations: list[Evaluation]) -> Evaluation | None:
    """The smallest-K evaluation that ties with the best; infeasible ones only when nothing is feasible."""
    if not evaluations:
        return None
    members, _, _ = _ties(evaluations)
    return min(members, key=lambda e: e.point.num_speculative_tokens)


def _ties(evaluations: Sequence[Evaluation]) -> tuple[list[Evaluation], Evaluation, bool]:
    """(every evaluation tied with the best, the best, whether they are feasible)."""
    feasible = [e for e in evaluations if e.feasible]
    if not feasible:
        least = max(evaluations, key=lambda e: (e.score, -e.point.num_speculative_tokens))
        return [least], least, False
    best = max(feasible, key=lambda e: (e.throughput, -e.point.num_speculative_tokens))
    return [e for e in feasible if is_tie(best, e)], best, True


@dataclass(frozen=True)
class TieSet:
    """The K of one combo at one bucket within noise of its best, at the precision that told them apart.

    ``members`` (ascending K, the best included) are evaluations at ``refinement``: each refinement
    simulated every member of the tie set below it again with more requests.
    """

    best: Evaluation
    members: tuple[Evaluation, ...]
    refinement: int
    feasible: bool
    unsimulated_below: int | None = None  # the K just below the first pass's smallest tie, when never simulated

    @property
    def ks(self) -> tuple[int, ...]:
        return tuple(e.point.num_speculative_tokens for e in self.members)

    @property
    def choosable(self) -> tuple[int, ...]:
        """The K the table may take: the members that measured their bucket (not ``underfilled``) when one
        of them speculates; else, when the best speculates, every speculating member (K = 0 ties then only
        because the others say nothing); else all."""
        measured = tuple(e.point.num_speculative_tokens for e in self.members if not underfilled(e))
        if any(k > 0 for k in measured):
            return measured
        if self.best.point.num_speculative_tokens > 0:
            return tuple(k for k in self.ks if k > 0)
        return self.ks

    def member(self, k: int) -> Evaluation:
        return next(e for e in self.members if e.point.num_speculative_tokens == k)

    @property
    def tolerance(self) -> float:
        """The widest tie tolerance among the members, relative to the best's throughput."""
        if not self.feasible or self.best.throughput <= 0:
            return 0.0
        return max(tie_tolerance(self.best, e) for e in self.members) / self.best.throughput

    @property
    def noise_only(self) -> tuple[Evaluation, ...]:
        """Members tied with the best only because of the noise (further than 0.5 % below it)."""
        return tuple(e for e in self.members if tied_by_noise_only(self.best, e))

    def shortfall(self, k: int) -> float:
        """How far K's throughput is below the best's, relative to the best (0 for the best)."""
        best = self.best.throughput
        return max(0.0, (best - self.member(k).throughput) / best) if best > 0 else 0.0

    def describe(self) -> str:
        """E.g. 'K 4-8 within 0.9%', 'K 5 alone within 0.5% at 4x requests', 'K 5-6 within 2.6% (K 4 not
        simulated)' (the search stops below where the table could use; K 0 is speculation off)."""
        if not self.feasible:
            return f"K {format_ks(self.ks)} (no K meets the SLOs)"
        alone = " alone" if len(self.members) == 1 else ""
        precision = f" at {self.best.point.requests_factor}x requests" if self.refinement else ""
        below = f" (K {self.unsimulated_below} not simulated)" if self.unsimulated_below is not None else ""
        return f"K {format_ks(self.ks)}{alone} within {self.tolerance:.1%}{precision}{below}"


def format_ks(ks: Sequence[int]) -> str:
    """Ascending K as runs: (0, 3, 4, 5, 7) -> '0, 3-5, 7'."""
    runs: list[list[int]] = []
    for k in ks:
        if runs and k == runs[-1][-1] + 1:
            runs[-1].append(k)
        else:
            runs.append([k])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}\u2013{r[-1]}" for r in runs)


def bucket_tie_set(
    space: StudySpace, label: str, batch_size: int, completed: Mapping[Point, Evaluation]
) -> TieSet | None:
    """The tie set of ``label`` at one bucket (its K = 0 point included), at the highest finished refinement."""
    combo = space.combo(label)

    def evaluated(point: Point) -> Evaluation | None:  # a 0 row of this combo's table (see ``_zero_row``)
        evaluation = completed.get(point)
        return zero_row_evaluation(space, combo, batch_size, evaluation) if point.is_off else evaluation

    evaluations = [e for k in space.k_values if (e := evaluated(space.point(batch_size, label, k))) is not None]
    if not evaluations:
        return None
    members, best, feasible = _ties(evaluations)
    ks = space.k_values
    lowest = ks.index(min(e.point.num_speculative_tokens for e in members))
    unsimulated = lowest > 0 and space.point(batch_size, label, ks[lowest - 1]) not in completed
    refinement = 0
    while refinement < MAX_REFINEMENT:
        refined = [evaluated(e.point.refined(refinement + 1)) for e in members]
        if any(e is None for e in refined):
            break
        refinement += 1
        members, best, feasible = _ties([e for e in refined if e is not None])
    members.sort(key=lambda e: e.point.num_speculative_tokens)
    # Worth saying only while the first pass's smallest tie is still in the set (a refinement may drop it).
    unsimulated = unsimulated and feasible and members[0].point.num_speculative_tokens == ks[lowest]
    return TieSet(best, tuple(members), refinement, feasible, ks[lowest - 1] if unsimulated else None)


def monotone_ks(allowed: Sequence[Sequence[int]]) -> list[int]:
    """One K per bucket (ascending batch size) from each bucket's allowed K: the fewest rises of K with
    the batch size, then the fewest changes, then the smallest K (a dynamic programme over buckets)."""
    if not allowed:
        return []
    # cost[k] = (rises, changes, sum of K) of the best choice up to this bucket ending with K = k
    cost = {k: (0, 0, k) for k in allowed[0]}
    back: list[dict[int, int]] = []
    for options in allowed[1:]:
        step_cost: dict[int, tuple[int, int, int]] = {}
        step_back: dict[int, int] = {}
        for k in options:
            choices = sorted(
                ((rises + (k > prev), changes + (k != prev), total + k), prev)
                for prev, (rises, changes, total) in cost.items()
            )
            step_cost[k], step_back[k] = choices[0]
        cost = step_cost
        back.append(step_back)
    k = min(cost, key=lambda key: (cost[key], key))
    ks = [k]
    for step_back in reversed(back):
        k = step_back[k]
        ks.append(k)
    return ks[::-1]


@dataclass(frozen=True)
class BucketChoice:
    """The chosen K at one bucket, the batch sizes it covers, the evaluation behind it, its tie set."""

    batch_size: int
    first_batch_size: int
    last_batch_size: int
    num_speculative_tokens: int
    evaluation: Evaluation | None
    note: str | None = None
    ties: TieSet | None = None


@dataclass(frozen=True)
class ComboScore:
    """A combo's aggregate: buckets it covers and the weighted geometric mean of chosen throughput."""

    combo: Combo
    buckets_covered: int
    aggregate_throughput_tokens_per_s: float
    choices: tuple[BucketChoice, ...]
    # Buckets where no simulated config of this combo (K = 0 included) meets the SLOs. They rank the
    # combo before its aggregate does: a bucket left out of the mean must not make a combo look better.
    infeasible_batch_sizes: tuple[int, ...] = ()


def merge_schedule(rows: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Merge neighbouring rows with the same K; rows must be sorted and contiguous."""
    merged: list[tuple[int, int, int]] = []
    for start, end, k in rows:
        if merged and merged[-1][2] == k and merged[-1][1] + 1 == start:
            merged[-1] = (merged[-1][0], end, k)
        else:
            merged.append((start, end, k))
    return merged


def bucket_evaluations(
    space: StudySpace, combo: Combo, batch_size: int, completed: Mapping[Point, Evaluation]
) -> list[Evaluation]:
    """The evaluations of ``combo`` at one bucket, its K = 0 point included."""
    points = [space.point(batch_size, combo.label, k) for k in space.k_values]
    return [completed[p] for p in points if p in completed]


def _tie_sets(space: StudySpace, label: str, completed: Mapping[Point, Evaluation]) -> list[TieSet | None]:
    """Per bucket, the combo's tie set; None where the combo itself (K >= 1) was never simulated."""
    tie_sets = []
    for batch_size in space.batch_sizes:
        own = any(space.point(batch_size, label, k) in completed for k in space.k_values[1:])
        tie_sets.append(bucket_tie_set(space, label, batch_size, completed) if own else None)
    return tie_sets


def schedule_ks(tie_sets: Sequence[TieSet | None]) -> list[int | None]:
    """The K table over the buckets that have a tie set (``monotone_ks``); None elsewhere."""
    present = [t for t in tie_sets if t is not None]
    chosen = iter(monotone_ks([t.choosable for t in present]))
    return [next(chosen) if t is not None else None for t in tie_sets]


def combo_score(space: StudySpace, combo: Combo, completed: Mapping[Point, Evaluation]) -> ComboScore:
    ranges = bucket_ranges(space.batch_sizes, space.max_batch_size)
    tie_sets = _tie_sets(space, combo.label, completed)
    choices = []
    infeasible: list[int] = []
    log_sum = 0.0
    weight_sum = 0.0
    for batch_size, (first, last), weight, ties, k in zip(
        space.batch_sizes, ranges, space.weights, tie_sets, schedule_ks(tie_sets)
    ):
        if ties is None or k is None:
            choices.append(BucketChoice(batch_size, first, last, -1, None))
            continue
        chosen = ties.member(k)
        if not chosen.feasible:
            infeasible.append(batch_size)
        elif chosen.throughput > 0:
            log_sum += weight * math.log(chosen.throughput)
            weight_sum += weight
        choices.append(BucketChoice(batch_size, first, last, k, chosen, ties=ties))
    aggregate = math.exp(log_sum / weight_sum) if weight_sum > 0 else 0.0
    covered = sum(1 for t in tie_sets if t is not None)
    return ComboScore(combo, covered, aggregate, tuple(choices), tuple(infeasible))


def combo_gap(
    space: StudySpace, top: ComboScore, other: ComboScore, completed: Mapping[Point, Evaluation]
) -> tuple[float, float, list[float]]:
    """(log of top's aggregate over other's, its standard error, each bucket's share of the variance).

    Bucket by bucket, the two chosen points are compared at the precision both reached (the same
    requests), so only their acceptance noise counts.
    """
    gap = variance = weight_sum = 0.0
    shares = []
    for weight, mine, theirs in zip(space.weights, top.choices, other.choices):
        pair = common_precision(mine.evaluation, theirs.evaluation, completed)
        if pair is None:
            shares.append(0.0)
            continue
        a, b = pair
        gap += weight * (math.log(a.throughput) - math.log(b.throughput))
        share = weight**2 * ((comparison_sigma(a) / a.throughput) ** 2 + (comparison_sigma(b) / b.throughput) ** 2)
        variance += share
        weight_sum += weight
        shares.append(share)
    if weight_sum <= 0:
        return 0.0, 0.0, shares
    return gap / weight_sum, math.sqrt(variance) / weight_sum, [x / weight_sum**2 for x in shares]


def common_precision(
    a: Evaluation | None, b: Evaluation | None, completed: Mapping[Point, Evaluation]
) -> tuple[Evaluation, Evaluation] | None:
    """Two points' evaluations at the highest precision both reached (the same requests); None unless
    both are feasible with a positive throughput."""
    if a is None or b is None:
        return None
    level = min(a.point.refinement, b.point.refinement)
    if a.point.refinement != level:
        a = completed.get(a.point.refined(level), a)
    if b.point.refinement != level:
        b = completed.get(b.point.refined(level), b)
    if not (a.feasible and b.feasible and a.throughput > 0 and b.throughput > 0):
        return None
    return a, b


def combo_tie(gap: float, stderr: float) -> bool:
    return gap <= max(TIE_SIGMAS * stderr, TIE_RELATIVE)


def pick_score(
    space: StudySpace, scores: Sequence[ComboScore], completed: Mapping[Point, Evaluation]
) -> tuple[ComboScore, ComboScore, list[ComboScore]] | None:
    """(winner, top, ranking): among the most covered scores, those with the fewest buckets where nothing
    meets the SLOs, the top aggregate; near-ties (within noise or 0.5 %) go to the earlier one in
    ``scores`` (the earlier combo in the document: the simpler rule/sampling first)."""
    scores = [s for s in scores if s.buckets_covered > 0]
    if not scores:
        return None
    most_covered = max(s.buckets_covered for s in scores)
    eligible = [s for s in scores if s.buckets_covered == most_covered]
    fewest_infeasible = min(len(s.infeasible_batch_sizes) for s in eligible)
    eligible = [s for s in eligible if len(s.infeasible_batch_sizes) == fewest_infeasible]
    top = max(eligible, key=lambda s: s.aggregate_throughput_tokens_per_s)
    winner = next(s for s in eligible if s is top or combo_tie(*combo_gap(space, top, s, completed)[:2]))
    ranking = sorted(
        scores,
        key=lambda s: (-s.buckets_covered, len(s.infeasible_batch_sizes), -s.aggregate_throughput_tokens_per_s),
    )
    return winner, top, ranking

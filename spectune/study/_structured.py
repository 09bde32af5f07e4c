"""The structure-aware search: screen every combo at one bucket, then follow K from bucket to bucket.

Throughput is separable by bucket (each bucket is its own closed-loop simulation) and, along K,
close to unimodal: it rises while drafts are accepted often enough to pay for themselves and falls
once verification stops being free. Near its top it is often a plateau, and a tie goes to the
smaller K, so a bucket is *settled* when its best K is bracketed (both neighbours known) and the
smallest K that ties with the best has been evaluated along with the K just below it, which does not
tie (the plateau's low end) -- at the smaller batch sizes only down to the smallest K tied at the next
larger one: a K below it would make the table rise there -- and the K just above the largest tie.
So instead of a black-box search over (bucket, combo, K):

1. at the representative (most common) bucket, simulate the first combo's whole K curve (K = 0, speculation
   off, is the shared left end of every curve), then search K for every other combo by hill-climbing from
   the first one's optimum (combos of a method peak at similar K);
2. keep the ``keep_combos`` best combos there *of each runtime* (as served with K drafts, with adaptive
   verification, with SGLang's adaptive steps: each policy needs its own best), and any other within
   noise of the last of them (after adaptive precision, below, when the noise alone decides);
2b. a runtime policy (adaptive verification, SGLang's adaptive steps) is screened only on the combos
   the K-as-served runtime keeps, and first follows one combo with each bucket only bracketed. Its
   buckets do not wait for each other: each starts from its K-as-served twin's best K there, moved by
   the gap between the two at the representative bucket, so its walk runs beside the twin's rather
   than a round per bucket after it. Once every bracket is known, a runtime whose best table trails
   the best by more than the noise and ``CONTENTION_MARGIN`` is done: it cannot win, and settling it
   would move it by the noise. One that can still win is then searched like the K-as-served runtime:
   all its combos screened, ``keep_combos`` followed, every bucket settled, refined (step 4). On the
   decision study, where the runtime policies trail by 13-16 %, that leaves out about a quarter of the
   points;
3. for each kept combo, settle the representative bucket, then walk outwards in both directions
   bucket by bucket, starting each bucket's K search at the neighbour's optimum (towards larger
   batches, at the smallest K that ties with it) and hill-climbing (preferring smaller K at larger
   batch sizes, where the optimum moves down);
3b. for a single-K policy (static K, adaptive verification under one K max), once the tables are
   settled: each K of a kept combo's table at every bucket, so that one K is known everywhere (for a
   runtime that cannot win, only its table's K at the representative bucket: reported, not searched).
   Static K needs only the K-as-served tables, so it runs beside the policies' brackets;
4. adaptive precision: re-simulate with more requests the tie sets whose noise leaves a decision of
   the recommendation open (``_precision.precision_requests``), while the work added (simulated
   steps) stays within ``refine_budget`` times the search's own on the runtimes refined -- not the
   points only a single K asked for (``structured_single_k_points``), which measure that policy, not
   the tables: with or without static K, the K table is refined alike;
4b. where adaptive verification is searched and nothing measures its acceptance estimate's
   ``confidence_auc``: its best entry's chosen table at a weak and a strong ranker
   (``_sensitivity``), so that the recommendation says how the answer moves with it -- beside the
   refinements when adaptive verification cannot win (no refinement moves its entry), after them
   when it can;
5. with budget left (``n_trials``), fill the rest of the space nearest the known optima.

The search is shaped for rounds: a round's points run side by side (lockstep, parallel workers), so on
a GPU, or with a worker per point, a round costs about one simulation however many points it holds,
and the wall time follows the number of rounds. So the first combo's curve is simulated whole in one
round; a hill-climb probes its start with both neighbours at once (a bracket needs them anyway; only
when the optimum moved is one wasted), or towards larger batches with the K below it; and the walk is
pipelined: a bucket starts its search from its neighbour's best so far, as soon as the neighbour has
one, rather than once the neighbour is settled (the buckets' climbs overlap; a start that the
neighbour's later results move costs the probes it wasted). On the decision study that took 11
rounds where the walk bucket by bucket took 16, for about 5 % more points; with its five policies,
2b's side-by-side buckets and the steps run beside others took 15 rounds where 17 were taken before,
for 5 points fewer (``benchmarks/study_wall.py --replay``). One at a time
(``structured_next_point``) the same rules learn each result before the next probe.

``structured_next_points`` returns every point the search needs now -- the independent steps of all
searches in flight (the screening of every combo, each kept combo's two directions, every refinement)
-- so that they can be simulated together; a step that depends on another's result is not in the list
until that result is known. Every decision is a pure function of the ``SearchState`` read from
storage, so the search resumes after a crash and runs unchanged with many workers: a point held by a
running trial is left out, and a worker with nothing to take waits for the others' results. A round's
points are all decided on the results known when it began, so a search whose round was cut (``n_trials``,
a stop) decides the rest knowing part of it, and may take a few points more or fewer than an uncut run
(a refinement that fits the budget sooner, a combo it then need not follow); it stops by the same rules.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection

from spectune.config import POLICY_RUNTIMES, StudyMetrics, combo_label
from spectune.study._policies import SINGLE_K_POLICIES
from spectune.study._precision import precision_requests, refine_pair
from spectune.study._recommend import (
    TieSet,
    bucket_tie_set,
    choose_in_bucket,
    combo_gap,
    combo_score,
    combo_tie,
    common_precision,
    is_tie,
    pick_score,
    schedule_ks,
    tied_by_noise_only,
)
from spectune.study._records import Evaluation, SearchState
from spectune.study._sensitivity import ADAPTIVE_VERIFICATION_POLICIES, sensitivity_points
from spectune.study._space import Combo, Point, StudySpace

__all__ = [
    "REFINE_BUDGET",
    "next_k",
    "next_ks",
    "structured_converged",
    "structured_next_point",
    "structured_next_points",
    "structured_single_k_points",
]

# Adaptive precision may add this share of the search's own work (simulated steps: a simulation with
# 4x the requests has about 4x the steps).
REFINE_BUDGET = 0.5
# A runtime policy whose bracketed table trails the best by more than this (and outside the noise) is
# not settled: settling moves a table by the noise, not by this much.
CONTENTION_MARGIN = 0.02
ADAPTIVE_VERIFICATION_RUNTIMES = frozenset(POLICY_RUNTIMES[policy] for policy in ADAPTIVE_VERIFICATION_POLICIES)


def structured_next_points(
    state: SearchState, *, keep_combos: int, refine_budget: float = REFINE_BUDGET
) -> list[Point]:
    """Every free point the search needs now, most useful first (deterministic).

    Until the search has converged: the steps of every search in flight whose result no other step in
    the list waits for (empty while all of them are held by running trials: wait for those). After:
    the rest of the space in fill order, for a budget (``n_trials``) past convergence.
    """
    needed = _needed(state, keep_combos, refine_budget)
    if not needed:
        ranking = _rank_at(state, state.space.batch_sizes[state.space.representative_bucket()])
        needed = _fill_order(state, ranking)
    return [p for p in needed if state.is_free(p)]


def structured_next_point(
    state: SearchState, *, keep_combos: int, refine_budget: float = REFINE_BUDGET
) -> Point | None:
    """The most useful free point, or None when nothing is free (all evaluated, held or given up)."""
    points = structured_next_points(state, keep_combos=keep_combos, refine_budget=refine_budget)
    return points[0] if points else None


def structured_converged(state: SearchState, *, keep_combos: int, refine_budget: float = REFINE_BUDGET) -> bool:
    """True once screening, the kept combos' settled buckets and the refinements are all done."""
    return not _needed(state, keep_combos, refine_budget)


def structured_single_k_points(
    state: SearchState, *, keep_combos: int, refine_budget: float = REFINE_BUDGET
) -> frozenset[Point]:
    """The points of ``structured_next_points`` that only a single-K policy (static K, one K max) asks for:
    a trial that takes one records it (``ATTR_SINGLE_K``, kept in ``SearchState.single_k``), so that its
    work does not widen the refinement budget (step 4: those points measure the policy, not the tables)."""
    return _answer(state, keep_combos, refine_budget)[1]


# The last ``_needed`` answers of this process: every trial of a round asks the same question (the
# trials decide one after another, each on the results before the round plus the points held, which
# the answer does not depend on), and the answer costs milliseconds late in a study.
_NEEDED_CACHE_SIZE = 16
_Answer = tuple[list[Point], frozenset[Point]]
_needed_cache: dict[tuple[object, ...], tuple[StudySpace, tuple[Evaluation, ...], _Answer]] = {}


def _needed(state: SearchState, keep_combos: int, refine_budget: float) -> list[Point]:
    """Unsettled points the search needs now, in priority order (duplicates removed)."""
    return list(_answer(state, keep_combos, refine_budget)[0])


def _answer(state: SearchState, keep_combos: int, refine_budget: float) -> _Answer:
    """``_needed_now``'s answer (the points needed, those of them only a single K asks for).

    A pure function of the space, the evaluations (and which of them only a single K asked for), the
    points given up and the refined points held (they spend the refinement budget); the answer is reused
    while all of them are equal."""
    evaluations = tuple(state.completed.values())
    refining = frozenset(p for p in state.claimed if p.refinement)
    key = (
        id(state.space), keep_combos, refine_budget, state.given_up(), refining, frozenset(state.single_k),
        *(e.point for e in evaluations),
    )  # fmt: skip
    cached = _needed_cache.get(key)
    if cached is not None and cached[0] is state.space and cached[1] == evaluations:
        return cached[2]
    answer = _needed_now(state, keep_combos, refine_budget)
    if len(_needed_cache) >= _NEEDED_CACHE_SIZE:
        _needed_cache.clear()
    _needed_cache[key] = (state.space, evaluations, answer)
    return answer


def _needed_now(state: SearchState, keep_combos: int, refine_budget: float) -> _Answer:
    """The points the search needs now, and those of them that only the single-K steps ask for."""
    space = state.space
    rep = space.representative_bucket()
    rep_batch_size = space.batch_sizes[rep]
    runtimes = list(dict.fromkeys(c.runtime for c in space.combos))
    # Without the K-as-served runtime ('none') every runtime is searched in full, as one.
    settled = {runtime for runtime in runtimes if runtime == "none" or "none" not in runtimes}
    screened = [c for c in space.combos if c.runtime in settled]
    needed = [Point.off(rep_batch_size)]
    needed += _screening_steps(state, rep_batch_size, screened)
    needed += [Point.off(b) for b in space.batch_sizes if b != rep_batch_size]
    needed = [p for p in needed if not state.is_settled(p)]
    single_k: list[Point] = []
    if not needed:
        # Each runtime keeps its own combos; a runtime policy first follows one, bracketed, not settled.
        kept = _follow(state, runtimes, settled, keep_combos, refine_budget, needed)
        if not needed:
            contending = _contending_runtimes(state, runtimes) - settled
            settled |= contending
            kept += _follow(state, sorted(contending, key=runtimes.index), settled, keep_combos, refine_budget, needed)
            single_k = _single_k_steps(state, list(dict.fromkeys(kept)), settled)
        elif "none" in runtimes and not any(p.combo is not None and p.combo.runtime == "none" for p in needed):
            # The K-as-served runtime is settled while the policies still bracket theirs: its single K
            # (static K) needs only its own tables, so it runs beside them rather than a round later.
            single_k = _single_k_steps(
                state, [label for label in kept if space.combo(label).runtime == "none"], settled
            )
        single_k = [p for p in single_k if p not in needed]
        needed += single_k
    if not needed:
        groups = precision_requests(state.space, state.completed, runtimes=[r for r in runtimes if r in settled])
        needed = _refinement_steps(state, refine_budget, groups, settled)
        if not settled & ADAPTIVE_VERIFICATION_RUNTIMES:
            # Adaptive verification is not refined (it cannot win): its best entry is final, and its
            # sensitivity points (outside the refinement budget) run beside the refinements.
            needed += sensitivity_points(space, state.completed)
    if not needed:
        needed = sensitivity_points(space, state.completed)
    return list(dict.fromkeys(p for p in needed if not state.is_settled(p))), frozenset(single_k)


def _follow(
    state: SearchState,
    runtimes: list[str],
    settled: set[str],
    keep_combos: int,
    refine_budget: float,
    needed: list[Point],
) -> list[str]:
    """The combos each of ``runtimes`` follows from the representative bucket, their steps added to
    ``needed``: ``keep_combos`` of a runtime in ``settled``, each bucket settled; else one, each bucket
    only bracketed (its best K known with both neighbours), enough to tell whether it can still win."""
    space = state.space
    rep = space.representative_bucket()
    kept: list[str] = []
    base_kept: list[str] = []
    for runtime in runtimes:
        settle = runtime in settled
        if runtime != "none" and "none" in runtimes:
            if not base_kept:
                continue  # the K-as-served runtime's kept combos are still being decided
            screening = _policy_screening_steps(state, runtime, base_kept, settle)
            if screening:
                needed += screening
                continue
        kept_here, contest = _kept_combos(
            state,
            space.batch_sizes[rep],
            keep_combos if settle else 1,
            lambda group: _refinement_steps(state, refine_budget, [group], {runtime}),
            runtime,
        )
        needed += contest
        if contest:
            continue
        kept += kept_here
        if runtime == "none":
            base_kept = kept_here
        for label in kept_here:
            needed += _chain_steps(state, label, rep, settle=settle)
    return kept


def _contending_runtimes(state: SearchState, runtimes: list[str]) -> set[str]:
    """The runtimes whose best table can still win once its buckets are settled: the top one (most
    buckets covered, fewest missing the SLOs, best aggregate) and every other as covered and as feasible
    that ties with it by the noise rule or trails it by less than ``CONTENTION_MARGIN``. A table of
    bracketed optima is a slight overestimate (the best of noisy neighbours), so a runtime left out
    would lose once settled too."""
    space = state.space
    bests = []
    for runtime in runtimes:
        scores = [combo_score(space, combo, state.completed) for combo in space.runtime_combos(runtime)]
        picked = pick_score(space, scores, state.completed)
        if picked is not None:
            bests.append(picked[1])
    if not bests:
        return set(runtimes)
    most = max(s.buckets_covered for s in bests)
    eligible = [s for s in bests if s.buckets_covered == most]
    fewest = min(len(s.infeasible_batch_sizes) for s in eligible)
    eligible = [s for s in eligible if len(s.infeasible_batch_sizes) == fewest]
    top = max(eligible, key=lambda s: s.aggregate_throughput_tokens_per_s)
    contending = {top.combo.runtime}
    for other in eligible:
        gap, stderr, _ = combo_gap(space, top, other, state.completed)
        if combo_tie(gap, stderr) or gap < CONTENTION_MARGIN:
            contending.add(other.combo.runtime)
    return contending


def _screening_steps(state: SearchState, batch_size: int, combos: list[Combo]) -> list[Point]:
    """Every K of the first combo (its whole curve: the anchor of the others, found in one round rather
    than a bracket search's four); once they are known, every other of ``combos``' steps, warm from its best."""
    space = state.space
    first = combos[0].label
    middle = space.middle_k
    curve = [space.point(batch_size, first, k) for k in sorted(space.k_values[1:], key=lambda k: (abs(k - middle), k))]
    steps = [p for p in curve if not state.is_settled(p)]
    if steps:
        return steps
    anchor = _best_k(state, first, batch_size)
    anchor = middle if anchor is None else anchor
    return [
        step for c in combos[1:] for step in _curve_steps(state, c.label, batch_size, start=anchor, prefer_lower=False)
    ]


def _policy_screening_steps(state: SearchState, runtime: str, base_kept: list[str], settle: bool) -> list[Point]:
    """A runtime policy's screening at the representative bucket: only its combos of the candidate,
    rule and sampling that the K-as-served runtime keeps (they rank the same: the rule and sampling set
    the acceptance, which the policy does not change), or all of them when none is such or the policy can
    still win (``settle``); each hill-climbs from the first combo's best, as the screening does (a
    runtime policy's best K sits below its twin's: it trims what the K drafted)."""
    space = state.space
    batch_size = space.batch_sizes[space.representative_bucket()]
    combos = space.runtime_combos(runtime)
    twins = {(c.candidate, c.rejection_sample_method, c.draft_sample_method) for c in map(space.combo, base_kept)}
    chosen = [c for c in combos if (c.candidate, c.rejection_sample_method, c.draft_sample_method) in twins]
    anchor = _best_k(state, space.combos[0].label, batch_size) or space.middle_k
    return [
        step
        for combo in (combos if settle or not chosen else chosen)
        for step in _curve_steps(state, combo.label, batch_size, start=anchor, prefer_lower=False)
    ]


def _chain_steps(state: SearchState, label: str, rep: int, *, settle: bool = True) -> list[Point]:
    """One kept combo: settle the representative bucket and walk outwards each way. Each bucket starts
    from its neighbour's best so far, once the neighbour has a result with K >= 1 (the start may move
    with later results; the bucket's own hill-climb follows from what it has found), so the buckets'
    climbs and plateaus overlap; the walk stops at the first bucket whose neighbour has no result yet.
    Without ``settle`` each bucket's climb stops at its bracket (no plateau)."""
    space = state.space
    steps = _plateau_steps(state, label, space.batch_sizes[rep]) if settle else []
    reference = _reference_start(state, label, rep)
    for direction in (1, -1):
        index = rep + direction
        while 0 <= index < len(space.batch_sizes):
            neighbour, batch_size = space.batch_sizes[index - direction], space.batch_sizes[index]
            start = reference(batch_size) if reference is not None else None
            if start is None and any(k > 0 for k in _curve(state, label, neighbour)):
                # Going up in batch size the optimum moves down: start from the smallest K that ties with
                # the neighbour's best; going down it moves up: start from the neighbour's best itself.
                start = _best_k(state, label, neighbour, smallest_tie=direction > 0)
            if start is None:
                if reference is None:
                    break  # nothing to start from yet (the representative bucket was screened: never there)
                index += direction  # a policy's bucket waits for its reference; the next may have one
                continue
            curve = _curve_steps(state, label, batch_size, start=start, prefer_lower=direction > 0)
            if curve:
                steps += curve
            elif settle:
                # Towards smaller batches the table may not fall below the larger neighbour's K (it would
                # rise there), so the plateau matters only down to the smallest K tied at that neighbour.
                ties = _tie_range(state, label, neighbour) if direction < 0 else None
                steps += _plateau_steps(state, label, batch_size, floor=ties[0] if ties else 0)
            index += direction
    return steps


def _reference_start(state: SearchState, label: str, rep: int) -> Callable[[int], int | None] | None:
    """For a runtime policy's combo: where each bucket's K search starts without waiting for its
    neighbour -- its own best there once it has one, else the best K of the K-as-served combo it is
    served over (same candidate, rule and sampling; else that candidate's most followed one) moved
    by the gap between the two at the representative bucket. So every bucket's climb starts in the
    round after the screening, beside the others, where a walk from neighbour to neighbour would take
    a round per bucket after the K-as-served runtime's own walk. None for a K-as-served combo (its
    walk is what the policies start from) or while nothing is known to start from."""
    space = state.space
    rep_batch_size = space.batch_sizes[rep]
    own_at_rep = _best_k(state, label, rep_batch_size) if _over_a_twin(space, label) else None
    if own_at_rep is None:
        return None
    combo = space.combo(label)
    twins = [c.label for c in space.runtime_combos("none") if c.candidate == combo.candidate]
    if not twins:
        return None
    twin = combo_label(combo.candidate, combo.rejection_sample_method, combo.draft_sample_method, "none")
    twins.sort(key=lambda other: (other != twin, -len(_followed_buckets(state, other))))
    ks = space.k_values

    def start(batch_size: int) -> int | None:
        own = _best_k(state, label, batch_size)
        if own is not None and own > 0:
            return own
        for other in twins:
            at_bucket, at_rep = _best_k(state, other, batch_size), _best_k(state, other, rep_batch_size)
            if at_bucket and at_rep:
                return min(max(at_bucket + own_at_rep - at_rep, ks[1]), ks[-1])
        return None

    return start


def _over_a_twin(space: StudySpace, label: str) -> bool:
    """A runtime policy's combo in a space that also serves K as drafted (its search starts from those)."""
    return space.combo(label).runtime != "none" and any(c.runtime == "none" for c in space.combos)


def _followed_buckets(state: SearchState, label: str) -> list[int]:
    return [b for b in state.space.batch_sizes if any(k > 0 for k in _curve(state, label, b))]


def _plateau_steps(state: SearchState, label: str, batch_size: int, *, floor: int = 0) -> list[Point]:
    """The K just below the smallest K tied with the best (not below ``floor``) and the K just above the
    largest, those not evaluated yet; none: the bucket is settled. Above: near the top a noisy dip can
    hide a better K behind a tied neighbour from the hill-climb."""
    ties = _tie_range(state, label, batch_size)
    if ties is None:
        return []
    ks = state.space.k_values
    lowest, highest = ks.index(ties[0]), ks.index(ties[1])
    neighbours = ([ks[lowest - 1]] if lowest > 0 and ties[0] > floor else []) + (
        [ks[highest + 1]] if highest + 1 < len(ks) else []
    )
    points = (state.space.point(batch_size, label, k) for k in neighbours)
    return [p for p in points if not state.is_settled(p)]


def _tie_range(state: SearchState, label: str, batch_size: int) -> tuple[int, int] | None:
    """The smallest and largest evaluated K tied with the best (first pass); None when nothing meets the
    SLOs (the least violating point is the answer: no plateau) or nothing is evaluated."""
    space = state.space
    evaluations = [e for k in space.k_values if (e := state.completed.get(space.point(batch_size, label, k)))]
    feasible = [e for e in evaluations if e.feasible]
    if not feasible:
        return None
    best = max(feasible, key=lambda e: (e.throughput, -e.point.num_speculative_tokens))
    tied = [e.point.num_speculative_tokens for e in feasible if is_tie(best, e)]
    return min(tied), max(tied)


def _kept_combos(
    state: SearchState,
    batch_size: int,
    keep_combos: int,
    refine: Callable[[list[Point]], list[Point]],
    runtime: str = "none",
) -> tuple[list[str], list[Point]]:
    """(combos to follow, points to refine first) among the combos of one runtime. The ``keep_combos``
    best at the bucket, and every next one that ties with the last of them: a tie through noise alone is
    refined first (``refine`` returns the group's points to run, empty when past the budget or the last
    precision), else both are kept."""
    space = state.space
    ranked = [label for label in _rank_at(state, batch_size) if space.combo(label).runtime == runtime]
    kept = ranked[:keep_combos]
    last = bucket_tie_set(space, kept[-1], batch_size, state.completed) if kept else None
    for label in ranked[keep_combos:]:
        other = bucket_tie_set(space, label, batch_size, state.completed)
        pair = common_precision(last.best, other.best, state.completed) if last and other else None
        if pair is None or not is_tie(*pair):
            continue  # a lower-ranked combo may still tie: its noise may be larger (an underfilled best)
        if last is not None and other is not None and tied_by_noise_only(*pair):
            steps = refine(refine_pair(last, other))
            if steps:
                return kept, steps
        kept.append(label)
    return kept, []


def _single_k_steps(state: SearchState, kept: list[str], settled: set[str]) -> list[Point]:
    """For a single-K policy (static K, adaptive verification under one K max): each K of a kept combo's
    table at every bucket, so that one K is compared over all buckets. The best single K is usually one of
    the per-bucket optima; once the tables are settled, these are the points it still lacks. A runtime
    that cannot win (not ``settled``) gets only its table's K at the representative bucket: a single K no
    better than its table, reported, not searched."""
    space = state.space
    runtimes = {POLICY_RUNTIMES[p] for p in space.policies if p in SINGLE_K_POLICIES}
    rep = space.representative_bucket()
    steps: list[Point] = []
    for label in kept:
        if space.combo(label).runtime not in runtimes:
            continue
        table = schedule_ks(_bucket_tie_sets(state, label))
        ks = {k for k in table if k} if space.combo(label).runtime in settled else {table[rep] or 0}
        ks.discard(0)
        for k in sorted(ks):
            steps += [space.point(b, label, k) for b in space.batch_sizes]
    return [p for p in steps if not state.is_settled(p)]


def _bucket_tie_sets(state: SearchState, label: str) -> list[TieSet | None]:
    return [bucket_tie_set(state.space, label, b, state.completed) for b in state.space.batch_sizes]


def _refinement_steps(
    state: SearchState, refine_budget: float, groups: list[list[Point]], runtimes: Collection[str]
) -> list[Point]:
    """The refined points of every group (most decisive first) that fits the budget, whole: ``refine_budget``
    times the work searched on ``runtimes`` (the runtimes refined) and K = 0. A runtime policy that cannot
    win adds nothing: its points make no tie set of the refined runtimes less certain; nor do the points
    only a single K asked for (``state.single_k``): they measure that policy, not the tables refined."""

    def counted(point: Point) -> bool:  # the sensitivity points (``confidence_auc`` set) count in none of it
        return point.confidence_auc is None and (point.combo is None or point.combo.runtime in runtimes)

    spent = sum(_work(state, p) for p in [*state.completed, *state.claimed] if p.refinement and counted(p))
    allowance = refine_budget * sum(
        _work(state, p) for p in state.completed if not p.refinement and counted(p) and p not in state.single_k
    )
    allowance -= spent
    steps: list[Point] = []
    for group in groups:
        todo = [p for p in group if not state.is_settled(p)]
        cost = sum(_work(state, p) for p in todo if p not in state.claimed)
        if cost > allowance:
            continue
        allowance -= cost
        steps += todo
    return steps


def _work(state: SearchState, point: Point) -> float:
    """A simulation's work in simulated steps (what its time grows with), deterministic unlike its wall
    time; one not run yet: its first pass's times its requests factor. 1 without the counter."""
    evaluation = state.completed.get(point)
    if evaluation is not None:
        return _steps(evaluation.metrics)
    base = state.completed.get(point.base)
    return point.requests_factor * (_steps(base.metrics) if base is not None else 1.0)


def _steps(metrics: StudyMetrics) -> float:
    steps = metrics.simulated_steps
    return float(steps) if steps is not None and steps > 0 else 1.0


def _fill_order(state: SearchState, ranking: list[str]) -> list[Point]:
    """Every remaining point: best-ranked combos first, buckets outwards, K nearest the known optimum."""
    space = state.space
    outward = _outward_order(len(space.batch_sizes), space.representative_bucket())
    rank_of = {label: i for i, label in enumerate(ranking)}
    bucket_rank = {space.batch_sizes[index]: i for i, index in enumerate(outward)}

    def priority(point: Point) -> tuple[int, int, int, int]:
        if point.combo is None:
            return (-1, bucket_rank[point.batch_size], 0, 0)
        reference = _best_k(state, point.combo.label, point.batch_size)
        if reference is None:
            reference = space.middle_k
        distance = abs(point.num_speculative_tokens - reference)
        return (
            rank_of.get(point.combo.label, len(ranking)),
            bucket_rank[point.batch_size],
            distance,
            point.num_speculative_tokens,
        )

    return sorted(space.points(), key=priority)


def _curve(state: SearchState, label: str, batch_size: int) -> dict[int, float]:
    """Scores known along K for one combo at one bucket (K = 0 from the shared off point)."""
    values = {}
    for k in state.space.k_values:
        point = state.space.point(batch_size, label, k)
        evaluation = state.completed.get(point)
        if evaluation is not None:
            values[k] = evaluation.score
        elif state.is_settled(point):
            values[k] = -math.inf  # given up after repeated failures
    return values


def _best_k(state: SearchState, label: str, batch_size: int, *, smallest_tie: bool = False) -> int | None:
    """The best K known for (combo, bucket); with ``smallest_tie``, the smallest K tying with it."""
    values = _curve(state, label, batch_size)
    if not values:
        return None
    if smallest_tie:
        evaluations = [e for k in values if (e := state.completed.get(state.space.point(batch_size, label, k)))]
        chosen = choose_in_bucket(evaluations)
        if chosen is not None:
            return chosen.point.num_speculative_tokens
    return max(values, key=lambda k: (values[k], -k))


def _curve_steps(state: SearchState, label: str, batch_size: int, *, start: int, prefer_lower: bool) -> list[Point]:
    """The points of one (combo, bucket) K search that can run now; none when its optimum is bracketed."""
    ks = next_ks(_curve(state, label, batch_size), state.space.k_values, start=start, prefer_lower=prefer_lower)
    return [state.space.point(batch_size, label, k) for k in ks]  # all unknown (given-up K count as known)


def next_k(values: dict[int, float], ks: tuple[int, ...], *, start: int, prefer_lower: bool) -> int | None:
    """The first of ``next_ks``: the next K of a search that probes one at a time; None when bracketed."""
    probes = next_ks(values, ks, start=start, prefer_lower=prefer_lower)
    return probes[0] if probes else None


def next_ks(values: dict[int, float], ks: tuple[int, ...], *, start: int, prefer_lower: bool) -> list[int]:
    """The K to evaluate next on a unimodal curve, most useful first; empty when the best K's neighbours
    are both known.

    A hill-climb from ``start`` (from a neighbouring bucket or combo: the optimum usually moved by a
    step or two): the start and both its neighbours at once, then the neighbours of the best not known
    yet, the ``prefer_lower`` side first. A bracket needs both neighbours anyway, so probing them
    together costs a point only when the optimum moved, and saves a round whenever it did not. With
    ``prefer_lower`` (towards larger batches, where the optimum moves down and a simulation reads the
    most logits) the start goes with the K below it only: the one above is probed once the start
    proves best. The search follows the raw best (ties to the smaller K); the choice among near-ties
    happens later, in the recommendation.
    """
    known = values if start in values else {**values, start: math.inf}  # unknown: probed as the best
    best = max(known, key=lambda k: (known[k], -k))
    i = ks.index(best)
    lower = max((ks.index(k) for k in known if k < best), default=-1)
    upper = min((ks.index(k) for k in known if k > best), default=len(ks))
    sides = [(i - lower - 1, i - 1), (upper - i - 1, i + 1)]  # (unknown K on that side, its nearest)
    if not prefer_lower:
        sides.reverse()
    probes = [ks[j] for gap, j in sides if gap > 0]
    if start in values:
        return probes
    return [start, *probes[:1]] if prefer_lower else [start, *probes]


def _rank_at(state: SearchState, batch_size: int) -> list[str]:
    """Combo labels by their best score at one bucket (at the precision their tie sets reached; K = 0
    counts only for combos never simulated with K >= 1); unevaluated combos last, document order on ties."""
    scored = []
    for order, combo in enumerate(state.space.combos):
        values = {k: v for k, v in _curve(state, combo.label, batch_size).items() if k > 0}
        best = max(values.values()) if values else -math.inf
        ties = bucket_tie_set(state.space, combo.label, batch_size, state.completed) if values else None
        if ties is not None and ties.refinement and ties.feasible:
            best = ties.best.score
        scored.append((-best, order, combo.label))
    return [label for _, _, label in sorted(scored)]


def _outward_order(count: int, center: int) -> list[int]:
    """Bucket indices from ``center`` outwards: c, c+1, c-1, c+2, c-2, ..."""
    order = [center]
    for distance in range(1, count):
        for index in (center + distance, center - distance):
            if 0 <= index < count:
                order.append(index)
    return order

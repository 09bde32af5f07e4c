"""The structure-aware search: screen every combo at one bucket, then follow K from bucket to bucket.

Throughput is separable by bucket (each bucket is its own closed-loop simulation) and, along K,
close to unimodal: it rises while drafts are accepted often enough to pay for themselves and falls
once verification stops being free. So instead of a black-box search over (bucket, combo, K):

1. at the representative (most common) bucket, search K for the first combo with a golden-section-like
   bracket search (K = 0, speculation off, is the shared left end of every curve), then for every
   other combo by hill-climbing from the first one's optimum (combos of a method peak at similar K);
2. keep the ``keep_combos`` best combos there;
3. for each kept combo, walk outwards bucket by bucket, starting each bucket's K search at the
   neighbouring bucket's optimum (towards larger batches, at the smallest K that ties with it) and
   hill-climbing one step at a time (preferring smaller K at larger batch sizes, where the optimum
   moves down);
4. with budget left, do the same for the other combos, then fill the rest of the space nearest the
   known optima first.

Every decision is a pure function of the ``SearchState`` read from storage, so the search resumes
after a crash and runs unchanged with many workers: a point held by a running trial is skipped and
the next useful point is proposed instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from spectune.study._recommend import choose_in_bucket
from spectune.study._records import SearchState
from spectune.study._space import OFF, Point, StudySpace

__all__ = ["next_k", "structured_converged", "structured_next_point"]

_GOLDEN_STEP = 0.382  # fraction of a bracket side probed next (1 - 1/phi)


def structured_next_point(state: SearchState, *, keep_combos: int) -> Point | None:
    """The most useful free point, or None when every point is evaluated, held or given up."""
    for point, _ in _candidates(state, keep_combos):
        if state.is_free(point):
            return point
    return None


def structured_converged(state: SearchState, *, keep_combos: int) -> bool:
    """True once screening and the kept combos' per-bucket searches have all settled."""
    return all(not is_core or state.is_settled(point) for point, is_core in _candidates(state, keep_combos))


def _candidates(state: SearchState, keep_combos: int) -> Iterator[tuple[Point, bool]]:
    """Points in priority order, each with whether it belongs to the core search (steps 1-3)."""
    space = state.space
    rep = space.representative_bucket()
    rep_batch_size = space.batch_sizes[rep]
    outward = _outward_order(len(space.batch_sizes), rep)
    middle = _middle_k(space)

    yield Point(rep_batch_size, OFF, 0), True
    anchor: int | None = None  # the first fully searched combo's best K: where the others start
    for combo in space.combos:
        if anchor is None:
            point = _curve_step(state, combo.label, rep_batch_size, start=middle, warm=False, prefer_lower=False)
            if point is None:
                anchor = _best_k(state, combo.label, rep_batch_size)
        else:
            point = _curve_step(state, combo.label, rep_batch_size, start=anchor, warm=True, prefer_lower=False)
        if point is not None:
            yield point, True
    for index in outward[1:]:
        yield Point(space.batch_sizes[index], OFF, 0), True

    ranking = _rank_at(state, rep_batch_size)
    for position, label in enumerate(ranking):
        for point in _bucket_chain(state, label, rep, outward):
            yield point, position < keep_combos
    yield from ((point, False) for point in _fill_order(state, ranking, outward))


def _bucket_chain(state: SearchState, label: str, rep: int, outward: list[int]) -> Iterator[Point]:
    """One combo's K search at every bucket, each warm-started from its neighbour towards ``rep``."""
    space = state.space
    for index in outward[1:]:
        neighbour = index - 1 if index > rep else index + 1
        # Going up in batch size the optimum moves down: start from the smallest K that ties with the
        # neighbour's best; going down it moves up: start from the neighbour's best itself.
        start = _best_k(state, label, space.batch_sizes[neighbour], smallest_tie=index > rep)
        if start is None:
            start = _middle_k(space)
        point = _curve_step(state, label, space.batch_sizes[index], start=start, warm=True, prefer_lower=index > rep)
        if point is not None:
            yield point


def _fill_order(state: SearchState, ranking: list[str], outward: list[int]) -> list[Point]:
    """Every remaining point: best-ranked combos first, buckets outwards, K nearest the known optimum."""
    space = state.space
    rank_of = {label: i for i, label in enumerate(ranking)}
    bucket_rank = {space.batch_sizes[index]: i for i, index in enumerate(outward)}

    def priority(point: Point) -> tuple[int, int, int, int]:
        if point.is_off:
            return (-1, bucket_rank[point.batch_size], 0, 0)
        reference = _best_k(state, point.combo, point.batch_size)
        if reference is None:
            reference = _middle_k(space)
        distance = abs(point.num_speculative_tokens - reference)
        return (rank_of.get(point.combo, len(ranking)), bucket_rank[point.batch_size], distance, point.num_speculative_tokens)

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


def _curve_step(
    state: SearchState, label: str, batch_size: int, *, start: int, warm: bool, prefer_lower: bool
) -> Point | None:
    """The next point of one (combo, bucket) K search, or None when its optimum is bracketed."""
    k = next_k(_curve(state, label, batch_size), state.space.k_values, start=start, warm=warm, prefer_lower=prefer_lower)
    return None if k is None else state.space.point(batch_size, label, k)


def next_k(values: dict[int, float], ks: tuple[int, ...], *, start: int, warm: bool, prefer_lower: bool) -> int | None:
    """Next K to evaluate on a unimodal curve, or None when the best K's neighbours are both known.

    The search follows the raw best (ties to the smaller K); the choice among near-ties happens later,
    in the recommendation. Cold: probe the wider unexplored side of the best at 0.382 of its width
    (golden-section-like, O(log) probes). Warm (the start came from a neighbouring bucket): probe the
    adjacent K, on the ``prefer_lower`` side first -- the optimum usually moved by a step or two.
    """
    if start not in values:
        return start
    best = max(values, key=lambda k: (values[k], -k))
    i = ks.index(best)
    lower = max((ks.index(k) for k in values if k < best), default=-1)
    upper = min((ks.index(k) for k in values if k > best), default=len(ks))
    left_gap, right_gap = i - lower - 1, upper - i - 1
    if left_gap == 0 and right_gap == 0:
        return None
    if warm:
        go_left = left_gap > 0 and (prefer_lower or right_gap == 0)
        return ks[i - 1] if go_left else ks[i + 1]
    go_left = left_gap > right_gap
    gap = left_gap if go_left else right_gap
    step = max(1, round(_GOLDEN_STEP * (gap + 1)))
    return ks[i - step] if go_left else ks[i + step]


def _rank_at(state: SearchState, batch_size: int) -> list[str]:
    """Combo labels by their best score at one bucket; unevaluated combos last, document order on ties."""
    scored = []
    for order, combo in enumerate(state.space.combos):
        values = {k: v for k, v in _curve(state, combo.label, batch_size).items() if k > 0}
        best = max(values.values()) if values else -math.inf
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


def _middle_k(space: StudySpace) -> int:
    return (space.min_num_speculative_tokens + space.max_num_speculative_tokens + 1) // 2

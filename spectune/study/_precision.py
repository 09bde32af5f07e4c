"""Adaptive precision: which points to simulate again with more requests, and why.

A study simulates a point with its bucket's requests. Where the noise of those simulations
leaves a decision open, more requests can close it: ``precision_requests`` says which tie sets to
simulate again and in what order, each refinement with ``_space.REFINE_FACTOR`` times the requests of
the one below, at most ``_recommend.MAX_REFINEMENT`` refinements.

It asks only where the answer can change: a tie set that holds a K only through the noise, when that K
changes the K table, or two combos within noise of each other, when that decides the combo. A refined
tie set is recomputed among its members at the new precision (``_recommend.bucket_tie_set``), so a
whole tie set is simulated again, never one point of it; comparisons are always between simulations of
the same requests (``_recommend.common_precision``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from spectune.study._recommend import (
    MAX_REFINEMENT,
    TIE_RELATIVE,
    ComboScore,
    TieSet,
    combo_gap,
    combo_score,
    combo_tie,
    pick_score,
    schedule_ks,
)
from spectune.study._records import Evaluation
from spectune.study._space import Point, StudySpace

__all__ = ["precision_requests", "refine_pair"]


def precision_requests(
    space: StudySpace, completed: Mapping[Point, Evaluation], *, runtimes: Sequence[str] | None = None
) -> list[list[Point]]:
    """Groups of refined points that would settle a decision the noise leaves open, most decisive first.

    A group is a whole tie set simulated again with ``REFINE_FACTOR`` times the requests (its tie set
    at the next precision needs every member). Asked for only up to ``MAX_REFINEMENT`` and only where
    it can change the recommendation:

    - the combo: for the recommended combo when it is not the top one, then every other, when it ties
      with the top one through noise alone (further apart than 0.5 %), the two tie sets of the bucket
      that contributes most to that noise;
    - the K table: a bucket of the recommended combo whose tie set holds K tied only through noise,
      when the table without them would differ.
    With runtime policies, each runtime's combos are one such decision (each policy needs its own best
    combo and table), the runtimes in document order (only ``runtimes``, when given: the others cannot win).
    Points already evaluated are included (the caller skips them); the groups are deterministic.
    """
    groups: list[list[Point]] = []
    for runtime in dict.fromkeys(c.runtime for c in space.combos):
        if runtimes is not None and runtime not in runtimes:
            continue
        scores = [combo_score(space, c, completed) for c in space.combos if c.runtime == runtime]
        groups += _precision_groups(space, completed, scores)
    return groups


def _precision_groups(
    space: StudySpace, completed: Mapping[Point, Evaluation], scores: Sequence[ComboScore]
) -> list[list[Point]]:
    """``precision_requests`` among ``scores`` (one runtime's combos)."""
    picked = pick_score(space, scores, completed)
    if picked is None:
        return []
    winner, top, ranking = picked
    groups: list[list[Point]] = []
    # The winner when it is not the top, then every other combo as covered as the top and within its noise:
    # more precision may show it ahead (or not), which changes the combo either way.
    rivals = [winner] if winner is not top else []
    rivals += [s for s in ranking if s is not top and s is not winner and s.buckets_covered == top.buckets_covered]
    for rival in rivals:
        gap, stderr, shares = combo_gap(space, top, rival, completed)
        if gap > TIE_RELATIVE and combo_tie(gap, stderr):
            order = sorted(range(len(shares)), key=lambda i: (-shares[i], i))
            for i in order:
                group = refine_pair(top.choices[i].ties, rival.choices[i].ties)
                if shares[i] > 0 and group:
                    groups.append(group)
                    break
    tie_sets = [c.ties for c in winner.choices]
    table = schedule_ks(tie_sets)
    for i, ties in enumerate(tie_sets):
        if ties is None or not ties.noise_only or ties.refinement >= MAX_REFINEMENT:
            continue
        certain = [e for e in ties.members if e not in ties.noise_only]
        narrowed = dataclasses.replace(ties, members=tuple(certain))
        if schedule_ks([narrowed if j == i else t for j, t in enumerate(tie_sets)]) != table:
            groups.append([e.point.refined(ties.refinement + 1) for e in ties.members])
    return groups


def refine_pair(a: TieSet | None, b: TieSet | None) -> list[Point]:
    """Refine whichever of two tie sets is at the lower precision (both when equal), so they meet."""
    if a is None or b is None:
        return []
    level = min(a.refinement, b.refinement)
    if level >= MAX_REFINEMENT:
        return []
    points = [e.point.refined(level + 1) for t in (a, b) if t.refinement == level for e in t.members]
    return list(dict.fromkeys(points))  # the shared K = 0 point once

"""The policies a study compares, each read from the same evaluations: static K, K table, adaptive
verification (one K max), adaptive verification over a table, SGLang adaptive steps.

A policy is scored like a combo today: per bucket one chosen point, aggregated by the weighted
geometric mean over buckets. The table policies (``k_table``, ``adaptive_verification_table``,
``sglang_adaptive``, whose slots are per batch size) take each bucket's K from its tie set
(``_recommend.combo_score``); the single-K policies (``static``, ``adaptive_verification``) take one K
>= 1 for every bucket, among the K simulated at every bucket: the best aggregate, then the smallest K
within noise of it. Each policy's combo is the best of its runtime's combos (near-ties to the earlier
one in the document), and the policies compare by the same noise rule as two combos
(``_recommend.combo_gap``).

On a tie the preference follows ``POLICY_PREFERENCE``: the K table first (what the study has always
recommended, and what every engine takes: vLLM, TensorRT-LLM, SGLang through pinned slots), then a
static K, then the runtime policies, which must win outside the noise: they rest on an acceptance
estimate whose quality no log spectune calibrates from measures (``confidence_auc``; unset, it is the
synthesized drafter's). SGLang's policy is compared with the others but never recommended for vLLM:
``sglang.txt`` serves it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from spectune.config import POLICY_RUNTIMES
from spectune.study._recommend import (
    BucketChoice,
    ComboScore,
    combo_gap,
    combo_score,
    combo_tie,
    pick_score,
)
from spectune.study._records import Evaluation
from spectune.study._space import POLICY_LABELS, Combo, Point, StudySpace, bucket_ranges

__all__ = [
    "POLICY_PREFERENCE",
    "SINGLE_K_POLICIES",
    "PolicyScore",
    "PolicyVerdict",
    "pick_policy",
    "policy_scores",
    "static_score",
]

POLICY_PREFERENCE = ("k_table", "static", "adaptive_verification", "adaptive_verification_table", "sglang_adaptive")
SINGLE_K_POLICIES = frozenset({"static", "adaptive_verification"})
VLLM_POLICIES = frozenset(POLICY_PREFERENCE) - {"sglang_adaptive"}
STATIC_NOTE = "one K at every batch size"


@dataclass(frozen=True)
class PolicyScore:
    """One policy's best combo and its choices; ``top`` is the best aggregate among that policy's combos
    (``score`` is an earlier combo when within noise of it) and ``ranking`` all of them."""

    policy: str
    score: ComboScore
    top: ComboScore
    ranking: tuple[ComboScore, ...]

    @property
    def combo(self) -> Combo:
        return self.score.combo

    @property
    def aggregate_throughput_tokens_per_s(self) -> float:
        return self.score.aggregate_throughput_tokens_per_s

    @property
    def max_num_speculative_tokens(self) -> int:
        return max((c.num_speculative_tokens for c in self.score.choices), default=0)

    def describe(self) -> str:
        """E.g. 'adaptive verification (K <= 7)', 'static K = 4', 'the K table'."""
        k = self.max_num_speculative_tokens
        if self.policy == "static":
            return f"static K = {k}"
        if self.policy == "k_table":
            return POLICY_LABELS["k_table"]
        return f"{POLICY_LABELS[self.policy]} (K <= {k})"


@dataclass(frozen=True)
class PolicyVerdict:
    """The policy to serve: ``winner``; ``top`` has the best aggregate; ``tied``: every other policy
    within noise of ``top`` with how far behind it (relative); ``ranking``: every policy, best first."""

    winner: PolicyScore
    top: PolicyScore
    tied: tuple[tuple[PolicyScore, float], ...]
    ranking: tuple[PolicyScore, ...]

    def sentence(self) -> str:
        """E.g. 'adaptive verification (K <= 7) within 1.2% of the K table: either; behind it: static K = 4
        by 3.1%' (and which is recommended when the preference, not the aggregate, decides)."""
        top = self.top.describe()
        tied = {id(p) for p, _ in self.tied}
        behind = [p for p in self.ranking if p is not self.top and id(p) not in tied]
        if self.tied:
            within = ", ".join(f"{p.describe()} within {gap:.1%}" for p, gap in self.tied)
            text = f"policies: {within} of {top}: either"
            if self.winner is not self.top:
                text += (
                    f"; {self.winner.describe()} is recommended (on a tie: the K table, then a static K, then "
                    "the runtime policies, whose acceptance estimate the profile only assumes)"
                )
        elif behind:
            text = f"policies: {top} is best, outside the noise"
        else:
            return f"policies: {top} (the only one simulated)"
        if behind:
            text += "; behind it: " + ", ".join(f"{p.describe()} by {self._shortfall(p):.1%}" for p in behind)
        return text

    def _shortfall(self, other: PolicyScore) -> float:
        return -_relative(other.aggregate_throughput_tokens_per_s, self.top.aggregate_throughput_tokens_per_s)


def _relative(a: float, b: float) -> float:
    return a / b - 1 if b > 0 else math.inf


def static_score(space: StudySpace, combo: Combo, completed: Mapping[Point, Evaluation]) -> ComboScore:
    """The combo served with one K >= 1 at every bucket: among the K simulated at every bucket, the
    fewest buckets where it misses the SLOs, then the best aggregate, then the smallest K within noise
    of it. No K simulated everywhere: a score that covers no bucket."""
    ranges = bucket_ranges(space.batch_sizes, space.max_batch_size)
    scores = []
    for k in space.k_values[1:]:
        found = [completed.get(space.point(b, combo.label, k)) for b in space.batch_sizes]
        evaluations = [e for e in found if e is not None]
        if len(evaluations) < len(found):
            continue
        choices = []
        infeasible = []
        log_sum = weight_sum = 0.0
        for batch_size, (first, last), weight, evaluation in zip(space.batch_sizes, ranges, space.weights, evaluations):
            if not evaluation.feasible:
                infeasible.append(batch_size)
            elif evaluation.throughput > 0:
                log_sum += weight * math.log(evaluation.throughput)
                weight_sum += weight
            choices.append(BucketChoice(batch_size, first, last, k, evaluation, STATIC_NOTE))
        aggregate = math.exp(log_sum / weight_sum) if weight_sum > 0 else 0.0
        scores.append(ComboScore(combo, len(space.batch_sizes), aggregate, tuple(choices), tuple(infeasible)))
    if not scores:
        return ComboScore(combo, 0, 0.0, (), ())
    picked = pick_score(space, scores, completed)  # ascending K: near-ties go to the smaller K
    return picked[0] if picked is not None else ComboScore(combo, 0, 0.0, (), ())


def policy_scores(space: StudySpace, completed: Mapping[Point, Evaluation]) -> list[PolicyScore]:
    """Every searched policy's best combo (in ``space.policies`` order); a policy none of whose combos
    was simulated at K >= 1 is left out."""
    out = []
    for policy in space.policies:
        combos = space.runtime_combos(POLICY_RUNTIMES[policy])
        if policy in SINGLE_K_POLICIES:
            scores = [static_score(space, combo, completed) for combo in combos]
        else:
            scores = [combo_score(space, combo, completed) for combo in combos]
        picked = pick_score(space, scores, completed)
        if picked is not None:
            winner, top, ranking = picked
            out.append(PolicyScore(policy, winner, top, tuple(ranking)))
    return out


def pick_policy(
    space: StudySpace, scores: Sequence[PolicyScore], completed: Mapping[Point, Evaluation]
) -> PolicyVerdict | None:
    """The policy to serve among ``scores``: the most covered, fewest buckets missing the SLOs, the top
    aggregate; every policy within noise of the top ties with it, and the tie goes to the first in
    ``POLICY_PREFERENCE``."""
    if not scores:
        return None
    most_covered = max(s.score.buckets_covered for s in scores)
    eligible = [s for s in scores if s.score.buckets_covered == most_covered]
    fewest = min(len(s.score.infeasible_batch_sizes) for s in eligible)
    eligible = [s for s in eligible if len(s.score.infeasible_batch_sizes) == fewest]
    top = max(eligible, key=lambda s: (s.aggregate_throughput_tokens_per_s, -POLICY_PREFERENCE.index(s.policy)))
    tied = []
    for other in eligible:
        if other is top:
            continue
        gap, stderr, _ = combo_gap(space, top.score, other.score, completed)
        if combo_tie(gap, stderr):
            behind = -_relative(other.aggregate_throughput_tokens_per_s, top.aggregate_throughput_tokens_per_s)
            tied.append((other, max(0.0, behind)))
    candidates = [top, *(p for p, _ in tied)]
    winner = min(candidates, key=lambda s: POLICY_PREFERENCE.index(s.policy))
    ranking = sorted(
        scores,
        key=lambda s: (
            -s.score.buckets_covered,
            len(s.score.infeasible_batch_sizes),
            -s.aggregate_throughput_tokens_per_s,
        ),
    )
    tied.sort(key=lambda pair: POLICY_PREFERENCE.index(pair[0].policy))
    return PolicyVerdict(winner, top, tuple(tied), tuple(ranking))

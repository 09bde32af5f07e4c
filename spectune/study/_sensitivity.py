"""How the answer moves with ``confidence_auc`` where nothing measures it.

vLLM's adaptive verification admits drafts by an online acceptance estimate; how well that estimate
ranks accepted drafts above rejected ones is the acceptance's ``confidence_auc``. Where the profile
sets none, the documented default (``DEFAULT_CONFIDENCE_AUC``) is an assumption, so a study that
searches an adaptive-verification policy on such a candidate also simulates that policy's best entry
-- its chosen K max per bucket, as the recommendation reads it -- at each of ``SENSITIVITY_AUCS``,
a weak and a strong ranker around the default (docs/policies.md says why these), at the buckets where
the default applies. The recommendation then says how far the entry stands at each value from the
best vLLM policy the estimate does not touch (static K, the K table), and whether the policy it
recommends would change.

Call order: once nothing else is needed (the entry's table is then final), the structured and the
exhaustive searches ask ``sensitivity_points`` for these points. They are ordinary trials -- a
``Point`` with its ``confidence_auc`` set, outside the space the search walks -- so a resumed study
never simulates them twice; ``auc_sensitivity`` reads them back for the recommendation.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from spectune.config import DEFAULT_CONFIDENCE_AUC
from spectune.study._policies import PolicyScore, pick_policy, policy_scores
from spectune.study._recommend import TIE_RELATIVE, TIE_SIGMAS, BucketChoice, combo_gap, combo_tie
from spectune.study._records import Evaluation
from spectune.study._space import Point, StudySpace

__all__ = [
    "ADAPTIVE_VERIFICATION_POLICIES",
    "SENSITIVITY_AUCS",
    "AucOutcome",
    "AucSensitivity",
    "auc_sensitivity",
    "sensitivity_points",
]

# A weak and a strong ranker around the default: the range the synthesized draft rows span
# (tests/workload/test_confidence.py holds them to it), 0.5 being chance and 1 an oracle.
SENSITIVITY_AUCS = (0.6, 0.95)
ADAPTIVE_VERIFICATION_POLICIES = ("adaptive_verification", "adaptive_verification_table")
# The vLLM policies whose numbers no acceptance estimate touches: what an adaptive entry is held against.
ESTIMATE_FREE_POLICIES = ("k_table", "static")


def sensitivity_points(space: StudySpace, completed: Mapping[Point, Evaluation]) -> list[Point]:
    """The points that show how the best adaptive-verification entry moves with ``confidence_auc``:
    each of its chosen points (K >= 1) at a bucket where the AUC is assumed, at each of
    ``SENSITIVITY_AUCS``; none when no adaptive-verification policy is searched or the AUC is measured."""
    if not any(policy in ADAPTIVE_VERIFICATION_POLICIES for policy in space.policies):
        return []
    if not any(assumed_batch_sizes(space, candidate.name) for candidate in space.candidates):
        return []  # measured everywhere: no need to score the policies
    entry = _best_entry(space, policy_scores(space, completed), completed)
    if entry is None:
        return []
    assumed = assumed_batch_sizes(space, entry.combo.candidate)
    if not assumed:  # measured (or a study stored before it recorded where it is not)
        return []
    chosen = [c.evaluation.point for c in entry.score.choices if c.evaluation is not None and _varies(c, assumed)]
    return [dataclasses.replace(point, confidence_auc=auc) for auc in SENSITIVITY_AUCS for point in chosen]


def assumed_batch_sizes(space: StudySpace, candidate: str) -> tuple[int, ...] | None:
    """The batch sizes where ``candidate``'s acceptance sets no confidence_auc (``study_context``); None
    where the space does not say (a study made before it did, or without adaptive verification)."""
    facts = space.context.get("candidates", {}).get(candidate, {})
    assumed = facts.get("confidence_auc_assumed_at")
    return tuple(assumed) if assumed is not None else None


@dataclass(frozen=True)
class AucOutcome:
    """The adaptive entry at one ``confidence_auc``: ``entry`` its score (None: not all simulated yet),
    ``gap`` its aggregate relative to the reference's (None without either), ``tied`` whether the two
    are within the noise, ``recommended`` the policy recommended between them, ``margin`` how far the
    entry's log gap is past what it must beat to be recommended (negative: short of it)."""

    confidence_auc: float
    assumed: bool
    entry: PolicyScore | None
    gap: float | None = None
    tied: bool = False
    recommended: PolicyScore | None = None
    margin: float | None = None


@dataclass(frozen=True)
class AucSensitivity:
    """How the best adaptive-verification entry moves with ``confidence_auc`` (``outcomes``: the assumed
    value first, then ``SENSITIVITY_AUCS``), held against ``reference``, the best estimate-free policy."""

    entry: PolicyScore
    reference: PolicyScore | None
    assumed_batch_sizes: tuple[int, ...]
    all_batch_sizes: bool
    outcomes: tuple[AucOutcome, ...]

    @property
    def simulated(self) -> bool:
        return all(o.entry is not None for o in self.outcomes)

    @property
    def assumed(self) -> AucOutcome:
        return self.outcomes[0]

    def flips(self) -> list[AucOutcome]:
        """The values at which another policy than at the assumed one would be recommended."""
        recommended = self.assumed.recommended
        return [
            o
            for o in self.outcomes[1:]
            if o.recommended is not None and recommended is not None and o.recommended.policy != recommended.policy
        ]

    def sentence(self) -> str:
        """E.g. 'confidence_auc 0.75 is assumed (...): adaptive verification (K <= 4) against the K table:
        -16.3% at 0.75 (assumed), -19.0% at 0.6, -9.1% at 0.95: the K table stays recommended'."""
        where = "" if self.all_batch_sizes else f" at batch sizes {', '.join(map(str, self.assumed_batch_sizes))}"
        head = (
            f"confidence_auc {self.assumed.confidence_auc:g} is assumed (the default: nothing measures it for "
            f"{self.entry.combo.candidate}{where})"
        )
        if not self.simulated:
            return (
                f"{head}; how the answer moves with it is not simulated yet: its points come after the search's own "
                "(resume the study; the tpe sampler never adds them)"
            )
        values = [f"{self._value(o)} at {o.confidence_auc:g}{self._aside(o)}" for o in self.outcomes]
        if self.reference is None:
            return (
                f"{head}: {self.entry.describe()}: {', '.join(values)} (no policy the estimate does not touch was "
                "searched to hold it against)"
            )
        return f"{head}: {self.entry.describe()} against {self.reference.describe()}: {', '.join(values)}: {self._verdict()}"

    def _value(self, outcome: AucOutcome) -> str:
        if self.reference is None:
            assert outcome.entry is not None and self.assumed.entry is not None
            if outcome.assumed:
                return f"{outcome.entry.aggregate_throughput_tokens_per_s:,.0f} tokens/s"
            at_default = self.assumed.entry.aggregate_throughput_tokens_per_s
            return f"{_relative(outcome.entry.aggregate_throughput_tokens_per_s, at_default):+.1%}"
        assert outcome.gap is not None
        return f"{outcome.gap:+.1%}"

    @staticmethod
    def _aside(outcome: AucOutcome) -> str:
        words = [word for word, said in (("assumed", outcome.assumed), ("within the noise", outcome.tied)) if said]
        return f" ({'; '.join(words)})" if words else ""

    def _verdict(self) -> str:
        recommended = self.assumed.recommended
        assert recommended is not None
        flips = self.flips()
        if not flips:
            return f"{recommended.describe()} stays recommended"
        parts = []
        for outcome in flips:
            assert outcome.recommended is not None
            text = f"{outcome.recommended.describe()} would be recommended at {outcome.confidence_auc:g}"
            crossing = self._crossing(outcome)
            if crossing is not None:
                text += f" (it switches near {crossing:.2f}, linearly interpolated)"
            parts.append(text)
        return "the answer flips: " + "; ".join(parts)

    def _crossing(self, outcome: AucOutcome) -> float | None:
        """Where the entry's margin, linear in the AUC between the assumed value and ``outcome``'s, is 0."""
        low, high = self.assumed, outcome
        if low.margin is None or high.margin is None or (low.margin > 0) == (high.margin > 0):
            return None
        share = low.margin / (low.margin - high.margin)
        return low.confidence_auc + share * (high.confidence_auc - low.confidence_auc)


def auc_sensitivity(
    space: StudySpace, scores: Sequence[PolicyScore], completed: Mapping[Point, Evaluation]
) -> AucSensitivity | None:
    """How the best adaptive-verification entry among ``scores`` moves with ``confidence_auc``; None when
    no such policy was searched or its AUC is measured at every bucket it was chosen at."""
    entry = _best_entry(space, scores, completed)
    if entry is None:
        return None
    assumed = assumed_batch_sizes(space, entry.combo.candidate)
    if assumed is None:  # a study stored before it said: what its run simulated says it
        assumed = tuple(sorted({p.batch_size for p in completed if p.confidence_auc is not None}))
    if not any(_varies(c, assumed) for c in entry.score.choices):
        return None
    references = [s for s in scores if s.policy in ESTIMATE_FREE_POLICIES]
    picked = pick_policy(space, references, completed)
    reference = picked.winner if picked is not None else None
    outcomes = [_outcome(space, entry, None, references, reference, assumed, completed)]
    outcomes += [_outcome(space, entry, auc, references, reference, assumed, completed) for auc in SENSITIVITY_AUCS]
    return AucSensitivity(entry, reference, assumed, set(assumed) >= set(space.batch_sizes), tuple(outcomes))


def _best_entry(
    space: StudySpace, scores: Sequence[PolicyScore], completed: Mapping[Point, Evaluation]
) -> PolicyScore | None:
    """The adaptive-verification policy the recommendation would pick between the two (its rules)."""
    picked = pick_policy(space, [s for s in scores if s.policy in ADAPTIVE_VERIFICATION_POLICIES], completed)
    return picked.winner if picked is not None else None


def _varies(choice: BucketChoice, assumed: Sequence[int]) -> bool:
    """Whether the bucket's chosen point verifies drafts under an assumed AUC (a 0 row verifies none)."""
    return choice.evaluation is not None and choice.num_speculative_tokens > 0 and choice.batch_size in assumed


def _outcome(
    space: StudySpace,
    entry: PolicyScore,
    auc: float | None,
    references: Sequence[PolicyScore],
    reference: PolicyScore | None,
    assumed: Sequence[int],
    completed: Mapping[Point, Evaluation],
) -> AucOutcome:
    """The entry at ``auc`` (None: as the study simulated it, at the default) against ``reference``."""
    moved = entry if auc is None else _entry_at(space, entry, auc, assumed, completed)
    value = DEFAULT_CONFIDENCE_AUC if auc is None else auc
    if moved is None or reference is None:
        return AucOutcome(value, auc is None, moved)
    verdict = pick_policy(space, [*references, moved], completed)
    assert verdict is not None
    gap, stderr, _ = combo_gap(space, moved.score, reference.score, completed)
    return AucOutcome(
        value,
        auc is None,
        moved,
        gap=_relative(moved.aggregate_throughput_tokens_per_s, reference.aggregate_throughput_tokens_per_s),
        tied=combo_tie(abs(gap), stderr),
        recommended=verdict.winner,
        margin=gap - max(TIE_SIGMAS * stderr, TIE_RELATIVE),  # recommended over the reference once past 0
    )


def _entry_at(
    space: StudySpace, entry: PolicyScore, auc: float, assumed: Sequence[int], completed: Mapping[Point, Evaluation]
) -> PolicyScore | None:
    """``entry`` with each chosen point at an assumed bucket simulated at ``auc`` instead; None until all are."""
    choices = []
    for choice in entry.score.choices:
        if _varies(choice, assumed):
            assert choice.evaluation is not None
            moved = completed.get(dataclasses.replace(choice.evaluation.point, confidence_auc=auc))
            if moved is None:
                return None
            choice = dataclasses.replace(choice, evaluation=moved)
        choices.append(choice)
    aggregate, infeasible = _aggregate(space, choices)
    score = dataclasses.replace(
        entry.score,
        aggregate_throughput_tokens_per_s=aggregate,
        choices=tuple(choices),
        infeasible_batch_sizes=infeasible,
    )
    return dataclasses.replace(entry, score=score, top=score, ranking=(score,))


def _aggregate(space: StudySpace, choices: Sequence[BucketChoice]) -> tuple[float, tuple[int, ...]]:
    """(the weighted geometric mean of the feasible chosen throughputs, the buckets that miss the SLOs),
    as a policy's score aggregates its choices (``_recommend.combo_score``)."""
    log_sum = weight_sum = 0.0
    infeasible = []
    for weight, choice in zip(space.weights, choices):
        evaluation = choice.evaluation
        if evaluation is None:
            continue
        if not evaluation.feasible:
            infeasible.append(choice.batch_size)
        elif evaluation.throughput > 0:
            log_sum += weight * math.log(evaluation.throughput)
            weight_sum += weight
    return (math.exp(log_sum / weight_sum) if weight_sum > 0 else 0.0), tuple(infeasible)


def _relative(a: float, b: float) -> float:
    return a / b - 1 if b > 0 else math.inf

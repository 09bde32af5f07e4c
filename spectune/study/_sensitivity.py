"""How the answer moves with ``confidence_auc`` where nothing measures it.

vLLM's adaptive verification admits drafts by an online acceptance estimate; how well that estimate
ranks accepted drafts above rejected ones is the acceptance's ``confidence_auc``. Where the profile sets
none, the simulation draws the estimate's feature from the synthesized rows themselves (``BankFeatures``,
``spectune/simulator/_acceptance_estimate.py``): its quality is then the pair family's, a property of
spectune's synthesized drafter rather than a measurement of the real one. So a study that searches an
adaptive-verification policy on such a candidate also simulates that policy's best entry -- its chosen
K max per bucket, as the recommendation reads it -- at each of ``SENSITIVITY_AUCS``, a weak and a strong
ranker (docs/policies.md says why these), at the buckets where nothing measures it. The recommendation
then says what the synthesized rows' AUC is (``synthesized_auc_facts``, kept in the study's space), how
far the entry stands at each value from the best vLLM policy the estimate does not touch (static K, the
K table), and whether the policy it recommends would change.

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

from spectune.config import DEFAULT_CONFIDENCE_AUC, StudyDocument
from spectune.study._policies import PolicyScore, pick_policy, policy_scores
from spectune.study._recommend import TIE_RELATIVE, TIE_SIGMAS, BucketChoice, combo_gap, combo_tie
from spectune.study._records import Evaluation
from spectune.study._space import Combo, Point, StudySpace

__all__ = [
    "ADAPTIVE_VERIFICATION_POLICIES",
    "SENSITIVITY_AUCS",
    "AucOutcome",
    "AucSensitivity",
    "SynthesizedAuc",
    "auc_sensitivity",
    "sensitivity_points",
    "synthesized_auc_facts",
]

# A weak and a strong ranker: the range the synthesized draft rows span (tests/workload/test_confidence.py
# holds them to it), 0.5 being chance and 1 an oracle.
SENSITIVITY_AUCS = (0.6, 0.95)
ADAPTIVE_VERIFICATION_POLICIES = ("adaptive_verification", "adaptive_verification_table")
# The vLLM policies whose numbers no acceptance estimate touches: what an adaptive entry is held against.
ESTIMATE_FREE_POLICIES = ("k_table", "static")


def sensitivity_points(space: StudySpace, completed: Mapping[Point, Evaluation]) -> list[Point]:
    """The points that show how the best adaptive-verification entry moves with ``confidence_auc``:
    each of its chosen points (K >= 1) at a bucket where nothing measures the AUC, at each of
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


def synthesized_auc_facts(
    document: StudyDocument, candidate: str, batch_sizes: Sequence[int]
) -> dict[str, dict[str, list[float]]]:
    """For the space (``study_context``): per draft sampling of ``candidate``'s adaptive-verification combos,
    per batch size of ``batch_sizes`` (those where its acceptance sets no confidence_auc), the AUC by draft
    position of the synthesized rows its simulations draw the estimate's feature from
    (``synthesized_confidence_aucs``, up to the searched K max)."""
    from spectune.simulator._policy_setup import synthesized_confidence_aucs  # torch: only where it is needed
    from spectune.study._point_simulation import simulation_document

    combos: dict[str, Combo] = {}  # the rule plays no part: a row's acceptance is the standard rule's
    for c, rule, sampling, runtime in document.runtime_combinations():
        if c.label == candidate and runtime == "vllm_adaptive":
            combos.setdefault(sampling, Combo(candidate, rule, sampling, runtime))
    k = document.search.num_speculative_tokens.max

    def by_position(batch_size: int, combo: Combo) -> list[float]:
        simulated = simulation_document(document, Point(batch_size, combo, k))
        return [round(auc, 4) for auc in synthesized_confidence_aucs(simulated)]

    return {sampling: {str(b): by_position(b, c) for b in batch_sizes} for sampling, c in combos.items()}


@dataclass(frozen=True)
class AucOutcome:
    """The adaptive entry at one ``confidence_auc``: ``entry`` its score (None: not all simulated yet),
    ``gap`` its aggregate relative to the reference's (None without either), ``tied`` whether the two
    are within the noise, ``recommended`` the policy recommended between them, ``margin`` how far the
    entry's log gap is past what it must beat to be recommended (negative: short of it). ``base``: the
    entry as the study simulated it, its ``confidence_auc`` that of the ranking it was simulated with."""

    confidence_auc: float
    base: bool
    entry: PolicyScore | None
    gap: float | None = None
    tied: bool = False
    recommended: PolicyScore | None = None
    margin: float | None = None


@dataclass(frozen=True)
class SynthesizedAuc:
    """The AUC of the synthesized rows the entry's simulations drew the estimate's feature from, over its
    chosen buckets where nothing measures it and their draft positions up to the chosen K max: the mean
    (``mean``), the lowest and the highest; ``by_batch_size``: whether they differ between buckets."""

    mean: float
    low: float
    high: float
    by_batch_size: bool

    def describe(self) -> str:
        """E.g. 'AUC 0.78 on its rows, 0.71-0.86 by draft position'."""
        low, high = f"{self.low:.2f}", f"{self.high:.2f}"
        by = "by draft position and batch size" if self.by_batch_size else "by draft position"
        return f"AUC {self.mean:.2f} on its rows" + ("" if low == high else f", {low}-{high} {by}")


@dataclass(frozen=True)
class AucSensitivity:
    """How the best adaptive-verification entry moves with ``confidence_auc`` (``outcomes``: the entry as
    simulated first, then ``SENSITIVITY_AUCS``), held against ``reference``, the best estimate-free policy.
    ``synthesized``: what the simulated ranking was; None in a study stored before the space recorded it,
    whose simulations drew the features at ``DEFAULT_CONFIDENCE_AUC``."""

    entry: PolicyScore
    reference: PolicyScore | None
    assumed_batch_sizes: tuple[int, ...]
    all_batch_sizes: bool
    outcomes: tuple[AucOutcome, ...]
    synthesized: SynthesizedAuc | None = None

    @property
    def simulated(self) -> bool:
        return all(o.entry is not None for o in self.outcomes)

    @property
    def base(self) -> AucOutcome:
        return self.outcomes[0]

    def flips(self) -> list[AucOutcome]:
        """The values at which another policy than as simulated would be recommended."""
        recommended = self.base.recommended
        return [
            o
            for o in self.outcomes[1:]
            if o.recommended is not None and recommended is not None and o.recommended.policy != recommended.policy
        ]

    def describe_value(self, outcome: AucOutcome) -> str:
        """The outcome's confidence_auc as tables show it: '0.78 (synthesized)', '0.6'."""
        return self._number(outcome) + (f" ({self._base_word})" if outcome.base else "")

    def sentence(self) -> str:
        """E.g. 'confidence_auc is not measured for eagle3: the simulation ranks drafts by the synthesized
        drafter's logits (AUC 0.78 on its rows, 0.71-0.86 by draft position): adaptive verification (K <= 4)
        against the K table: -16.3% at 0.78 (synthesized), -19.0% at 0.6, -9.1% at 0.95: the K table stays
        recommended'."""
        where = "" if self.all_batch_sizes else f" at batch sizes {', '.join(map(str, self.assumed_batch_sizes))}"
        candidate = self.entry.combo.candidate
        if self.synthesized is None:
            head = (
                f"confidence_auc {self.base.confidence_auc:g} is assumed (the default: nothing measures it for "
                f"{candidate}{where})"
            )
        else:
            head = (
                f"confidence_auc is not measured for {candidate}{where}: the simulation ranks drafts by the "
                f"synthesized drafter's logits ({self.synthesized.describe()})"
            )
        if not self.simulated:
            return (
                f"{head}; how the answer moves with it is not simulated yet: its points come after the search's own "
                "(resume the study; the tpe sampler never adds them)"
            )
        values = [f"{self._value(o)} at {self._number(o)}{self._aside(o)}" for o in self.outcomes]
        if self.reference is None:
            return (
                f"{head}: {self.entry.describe()}: {', '.join(values)} (no policy the estimate does not touch was "
                "searched to hold it against)"
            )
        return f"{head}: {self.entry.describe()} against {self.reference.describe()}: {', '.join(values)}: {self._verdict()}"

    @property
    def _base_word(self) -> str:
        return "assumed" if self.synthesized is None else "synthesized"

    def _number(self, outcome: AucOutcome) -> str:
        synthesized = outcome.base and self.synthesized is not None
        return f"{outcome.confidence_auc:.2f}" if synthesized else f"{outcome.confidence_auc:g}"

    def _value(self, outcome: AucOutcome) -> str:
        if self.reference is None:
            assert outcome.entry is not None and self.base.entry is not None
            if outcome.base:
                return f"{outcome.entry.aggregate_throughput_tokens_per_s:,.0f} tokens/s"
            as_simulated = self.base.entry.aggregate_throughput_tokens_per_s
            return f"{_relative(outcome.entry.aggregate_throughput_tokens_per_s, as_simulated):+.1%}"
        assert outcome.gap is not None
        return f"{outcome.gap:+.1%}"

    def _aside(self, outcome: AucOutcome) -> str:
        words = [word for word, said in ((self._base_word, outcome.base), ("within the noise", outcome.tied)) if said]
        return f" ({'; '.join(words)})" if words else ""

    def _verdict(self) -> str:
        recommended = self.base.recommended
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
        """Where the entry's margin, linear in the AUC between the simulated value and ``outcome``'s, is 0."""
        low, high = self.base, outcome
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
    synthesized = _synthesized(space, entry, assumed)
    base = DEFAULT_CONFIDENCE_AUC if synthesized is None else synthesized.mean
    outcomes = [_outcome(space, entry, None, base, references, reference, assumed, completed)]
    outcomes += [
        _outcome(space, entry, auc, auc, references, reference, assumed, completed) for auc in SENSITIVITY_AUCS
    ]
    return AucSensitivity(
        entry, reference, assumed, set(assumed) >= set(space.batch_sizes), tuple(outcomes), synthesized
    )


def _synthesized(space: StudySpace, entry: PolicyScore, assumed: Sequence[int]) -> SynthesizedAuc | None:
    """The synthesized rows' AUC over the entry's chosen points that vary (``synthesized_auc_facts``, in the
    space); None where the space does not hold it (a study stored before it did)."""
    facts = space.context.get("candidates", {}).get(entry.combo.candidate, {}).get("synthesized_confidence_auc")
    by_batch_size = (facts or {}).get(entry.combo.draft_sample_method)
    if by_batch_size is None:
        return None
    per_bucket = [
        by_batch_size[str(c.batch_size)][: c.num_speculative_tokens] for c in entry.score.choices if _varies(c, assumed)
    ]
    aucs = [auc for bucket in per_bucket for auc in bucket]
    first = per_bucket[0]
    return SynthesizedAuc(
        mean=sum(aucs) / len(aucs),
        low=min(aucs),
        high=max(aucs),
        by_batch_size=any(bucket[: len(first)] != first[: len(bucket)] for bucket in per_bucket),
    )


def _best_entry(
    space: StudySpace, scores: Sequence[PolicyScore], completed: Mapping[Point, Evaluation]
) -> PolicyScore | None:
    """The adaptive-verification policy the recommendation would pick between the two (its rules)."""
    picked = pick_policy(space, [s for s in scores if s.policy in ADAPTIVE_VERIFICATION_POLICIES], completed)
    return picked.winner if picked is not None else None


def _varies(choice: BucketChoice, assumed: Sequence[int]) -> bool:
    """Whether the bucket's chosen point verifies drafts where nothing measures the AUC (a 0 row verifies none)."""
    return choice.evaluation is not None and choice.num_speculative_tokens > 0 and choice.batch_size in assumed


def _outcome(
    space: StudySpace,
    entry: PolicyScore,
    auc: float | None,
    value: float,
    references: Sequence[PolicyScore],
    reference: PolicyScore | None,
    assumed: Sequence[int],
    completed: Mapping[Point, Evaluation],
) -> AucOutcome:
    """The entry at ``auc`` (None: as the study simulated it, at a ranking of AUC ``value``) against
    ``reference``."""
    moved = entry if auc is None else _entry_at(space, entry, auc, assumed, completed)
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
    """``entry`` with each chosen point where nothing measures the AUC simulated at ``auc`` instead; None until
    all are."""
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

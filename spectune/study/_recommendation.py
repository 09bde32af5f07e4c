"""The recommendation: the vLLM policy to serve, its combo and a K per batch-size bucket, with notes.

``_policies`` scores every searched policy from the evaluations; the best vLLM one is recommended,
its combo chosen as ``_recommend`` describes (near-ties to the earlier combo in the document), and its
K per bucket merged into ``num_speculative_tokens_per_batch_size`` rows (one row for a single-K
policy). SGLang's adaptive steps, where searched, are compared with it in a note and exported by
``sglang.txt``. Where adaptive verification is searched on an acceptance whose ``confidence_auc`` nothing
measures, a note says how the answer moves with it (``_sensitivity``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from spectune.study._policies import (
    SINGLE_K_POLICIES,
    VLLM_POLICIES,
    PolicyScore,
    PolicyVerdict,
    pick_policy,
    policy_scores,
)
from spectune.study._recommend import (
    BucketChoice,
    ComboScore,
    bucket_evaluations,
    combo_gap,
    combo_tie,
    merge_schedule,
    underfilled,
)
from spectune.study._records import Evaluation
from spectune.study._sensitivity import AucSensitivity, auc_sensitivity
from spectune.study._space import Combo, Point, StudySpace
from spectune.study._zero_row import zero_row_notes

__all__ = ["Recommendation", "recommend"]


@dataclass(frozen=True)
class Recommendation:
    """The config to serve: one policy of one combo, one K (K max for adaptive verification) per bucket,
    merged schedule rows [start_bs, end_bs, K]; ``policies`` every searched policy's best (the
    comparison), ``sglang`` SGLang's adaptive steps where searched (compared, served by sglang.txt)."""

    space: StudySpace
    combo: Combo
    choices: tuple[BucketChoice, ...]
    schedule: tuple[tuple[int, int, int], ...]
    num_speculative_tokens: int
    aggregate_throughput_tokens_per_s: float
    ranking: tuple[ComboScore, ...]
    notes: tuple[str, ...]
    policy: str = "k_table"
    policies: tuple[PolicyScore, ...] = ()
    sglang: PolicyScore | None = None
    verdict: PolicyVerdict | None = None
    sglang_preferred: bool = False  # sglang.txt serves ``sglang`` (not behind the recommendation outside noise)
    # How adaptive verification moves with a confidence_auc nothing measures (``_sensitivity``), where it applies.
    auc_sensitivity: AucSensitivity | None = None

    @property
    def speculation_off_everywhere(self) -> bool:
        return all(k == 0 for _, _, k in self.schedule)

    @property
    def adaptive_verification(self) -> bool:
        """Whether vLLM serves it with enable_adaptive_verification."""
        return self.combo.runtime == "vllm_adaptive"

    @property
    def has_table(self) -> bool:
        """Whether the policy has a per-batch-size table (static K and one K max have none)."""
        return self.policy not in SINGLE_K_POLICIES


def _fill_unevaluated(
    choices: tuple[BucketChoice, ...], space: StudySpace, completed: Mapping[Point, Evaluation]
) -> tuple[list[BucketChoice], list[str]]:
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
    """The best vLLM policy (``_policies.pick_policy``), its best combo by aggregate over buckets
    (near-ties to the earlier combo), with its K per bucket."""
    scores = policy_scores(space, completed)
    verdict = pick_policy(space, [s for s in scores if s.policy in VLLM_POLICIES], completed)
    if verdict is None:
        return None
    chosen = verdict.winner
    winner, top, ranking = chosen.score, chosen.top, chosen.ranking
    choices, notes = _fill_unevaluated(winner.choices, space, completed)
    sglang = next((s for s in scores if s.policy == "sglang_adaptive"), None)
    if len(space.policies) > 1:
        notes.append(verdict.sentence())
    sensitivity = auc_sensitivity(space, scores, completed)
    if sensitivity is not None:
        notes.append(sensitivity.sentence())
    sglang_preferred = False
    if sglang is not None:
        note, sglang_preferred = _sglang_note(space, sglang, chosen, completed)
        notes.append(note)
    if winner is not top:
        gap, stderr, _ = combo_gap(space, top, winner, completed)
        notes.append(
            f"{top.combo.label} is {gap:.1%} ahead (standard error {stderr:.1%}): within the noise or 0.5 %, so the "
            f"earlier combo in the document, {winner.combo.label}, is recommended"
        )
    for choice in choices:
        if choice.evaluation is not None and not choice.evaluation.feasible:
            notes.append(
                f"batch size {choice.batch_size}: no simulated config meets the SLOs; the least violating is used"
            )
        if any(
            e.stderr >= e.throughput > 0 for e in bucket_evaluations(space, winner.combo, choice.batch_size, completed)
        ):
            notes.append(
                f"batch size {choice.batch_size}: some simulations were too short for the simulator to estimate "
                "their noise (standard error = the whole throughput); comparisons rest on their acceptance counts "
                "alone; simulate more requests or longer outputs"
            )
    notes.extend(_infeasible_notes(ranking))
    notes.extend(_underfilled_notes(choices))
    notes.extend(_rise_notes(choices))
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
        policy=chosen.policy,
        policies=tuple(scores),
        sglang=sglang,
        sglang_preferred=sglang_preferred,
        verdict=verdict,
        auc_sensitivity=sensitivity,
    )


def _sglang_note(
    space: StudySpace, sglang: PolicyScore, chosen: PolicyScore, completed: Mapping[Point, Evaluation]
) -> tuple[str, bool]:
    """How SGLang's adaptive steps compare with the vLLM policy recommended (different servers: compared,
    not chosen between), and whether sglang.txt serves them: unless they fall behind outside the noise
    (then it serves the recommended table, pinned)."""
    gap, stderr, _ = combo_gap(space, sglang.score, chosen.score, completed)
    tied = combo_tie(abs(gap), stderr)
    within = " (within the noise)" if tied else ""
    ratio = sglang.aggregate_throughput_tokens_per_s / chosen.aggregate_throughput_tokens_per_s - 1
    preferred = tied or ratio > 0
    serves = "sglang.txt serves it" if preferred else f"sglang.txt serves {chosen.describe()} instead"
    return (
        f"{sglang.describe()} on {sglang.combo.label}: {sglang.aggregate_throughput_tokens_per_s:,.0f} tokens/s, "
        f"{ratio:+.1%} against {chosen.describe()}{within}; {serves}",
        preferred,
    )


def _infeasible_notes(ranking: Sequence[ComboScore]) -> list[str]:
    """For every combo compared, the buckets where none of its configs meets the SLOs (they rank it lower)."""
    if not any(s.infeasible_batch_sizes for s in ranking):
        return []
    return [
        f"{s.combo.label}: "
        + (
            "no config meets the SLOs at batch size(s) " + ", ".join(str(b) for b in s.infeasible_batch_sizes)
            if s.infeasible_batch_sizes
            else "meets the SLOs at every batch size"
        )
        for s in ranking
    ]


def _underfilled_notes(choices: Sequence[BucketChoice]) -> list[str]:
    """Buckets whose tie set holds an underfilled simulation (its throughput is not the bucket's)."""
    notes = []
    for choice in choices:
        if choice.ties is None:
            continue
        short = [e for e in choice.ties.members if underfilled(e)]
        if short:
            fill = ", ".join(f"K {e.point.num_speculative_tokens}: {e.metrics.mean_batch_size:.1f}" for e in short)
            notes.append(
                f"batch size {choice.batch_size}: the batch stayed well below {choice.batch_size} (mean {fill}) -- too few "
                "requests for a steady state (or a KV cache too small), so these K tie with every other and the table "
                "takes none of them; simulate more requests (schedule.requests_per_batch_size)"
            )
    return notes


def _rise_notes(choices: Sequence[BucketChoice]) -> list[str]:
    """Why K rises with the batch size where it does: no choice within the tie sets avoids it."""
    notes = []
    known = [c for c in choices if c.ties is not None]
    for low, high in zip(known, known[1:]):
        if high.num_speculative_tokens > low.num_speculative_tokens:
            assert low.ties is not None and high.ties is not None
            notes.append(
                f"K rises from {low.num_speculative_tokens} at batch size {low.batch_size} to {high.num_speculative_tokens} at "
                f"batch size {high.batch_size}: the evidence rules out a non-increasing table here (tied at "
                f"{low.batch_size}: {low.ties.describe()}; at {high.batch_size}: {high.ties.describe()})"
            )
    return notes

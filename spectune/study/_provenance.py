"""What a recommendation rests on: per bucket, whether its K's acceptance was measured or extrapolated.

A study's numbers are only as good as the acceptance it simulates. Each bucket of a recommendation
is marked when

- its K goes past the positions the acceptance profile measured (the rest follow the candidate's
  extrapolation rule);
- it drafts with another draft sampling than the profile was measured with (the acceptance is then
  derived through the pair family, not measured), or serves traffic at another temperature;
- its K is at the edge of the searched range, so a K outside it might be better: widen the range.

The facts needed travel in the study's space (``StudySpace.context``, from ``study_context``), so
marks can be computed from the storage alone, as ``spectune export`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from spectune.config import POLICY_RUNTIMES, AcceptanceSource, StudyDocument
from spectune.study._recommendation import Recommendation
from spectune.study._records import Evaluation
from spectune.study._sensitivity import synthesized_auc_facts
from spectune.study._space import Point, StudySpace
from spectune.study._zero_row import zero_row_context

__all__ = ["BucketProvenance", "Mark", "mean_tokens", "provenance_notes", "recommendation_provenance", "study_context"]

MarkCode = Literal["extrapolated_k", "draft_sampling", "temperature", "range_edge"]


@dataclass(frozen=True)
class Mark:
    """One reason a bucket's numbers are less than measured: a code, a few words for tables, a sentence."""

    code: MarkCode
    short: str
    message: str


@dataclass(frozen=True)
class BucketProvenance:
    """The marks of one bucket of a recommendation (none: acceptance measured, K inside the range)."""

    batch_size: int
    first_batch_size: int
    last_batch_size: int
    num_speculative_tokens: int
    marks: tuple[Mark, ...]

    @property
    def summary(self) -> str:
        """The marks' short forms, for a table cell ('' when there are none)."""
        return "; ".join(mark.short for mark in self.marks)


def mean_tokens(length: Any) -> float | None:
    """Mean of a workload length: a whole number, or a distribution's mean (uniform: the midpoint)."""
    if isinstance(length, int | float):
        return float(length)
    mean = getattr(length, "mean_tokens", None)
    if mean is not None:
        return float(mean)
    low, high = getattr(length, "min_tokens", None), getattr(length, "max_tokens", None)
    return (low + high) / 2 if low is not None and high is not None else None


def study_context(document: StudyDocument) -> dict[str, Any]:
    """The document facts that marks and the measurement plan need, as plain JSON data."""
    workload = document.workload
    prompt, output = mean_tokens(workload.prompt_tokens), mean_tokens(workload.output_tokens)
    if workload.lengths_csv is not None:
        pairs = workload.lengths_csv.pairs
        prompt, output = sum(p for p, _ in pairs) / len(pairs), sum(o for _, o in pairs) / len(pairs)
    temperatures, _ = workload.temperature_mix
    adaptive = any(POLICY_RUNTIMES[policy] == "vllm_adaptive" for policy in document.search.policies)
    return {
        "zero_row": zero_row_context(document, prompt, output),
        "target_model": document.target_model.name,
        "tensor_parallel_size": document.target_model.tensor_parallel_size,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "temperatures": list(temperatures),
        "max_num_seqs": workload.max_num_seqs,
        "candidates": {
            candidate.label: {
                "measured_positions": candidate.acceptance.num_positions_measured,
                "measured_with": candidate.acceptance.measured_with,
                "measured_temperature": candidate.acceptance.measured_temperature,
                "extrapolation": candidate.acceptance.extrapolation,
                # Only where adaptive verification is searched: other studies' spaces stay as stored.
                **(_confidence_auc_facts(candidate.label, candidate.acceptance, document) if adaptive else {}),
            }
            for candidate in document.candidates
        },
    } | _step_time_spread(document)


def _confidence_auc_facts(label: str, acceptance: AcceptanceSource, document: StudyDocument) -> dict[str, Any]:
    """The study's batch sizes where the acceptance sets no confidence_auc (the simulation then ranks drafts
    by the synthesized rows' own feature) and, where there are any, those rows' AUC (``_sensitivity``)."""
    unmeasured = [b for b in document.schedule.batch_sizes if acceptance.confidence_auc_at(b) is None]
    facts: dict[str, Any] = {"confidence_auc_assumed_at": unmeasured}
    if unmeasured:
        facts["synthesized_confidence_auc"] = synthesized_auc_facts(document, label, unmeasured)
    return facts


def _step_time_spread(document: StudyDocument) -> dict[str, Any]:
    """[batch size, K, MAD / median] per row of a measured table with repeats (``_records.measured_step_noise``)."""
    table = document.cost_model.step_times if document.cost_model.method == "measured" else None
    rows = [
        [p.batch_size, p.num_speculative_tokens, p.step_time_mad_ms / p.step_time_ms]
        for p in (table.points if table is not None else ())
        if p.step_time_mad_ms is not None
    ]
    return {"step_time_spread": rows} if rows else {}  # absent otherwise: older studies' spaces stay as stored


def _acceptance_marks(k: int, sampling: str, facts: Mapping[str, Any], temperatures: list[float]) -> list[Mark]:
    marks = []
    measured = facts.get("measured_positions")
    if isinstance(measured, int) and k > measured:
        rule = facts.get("extrapolation", "repeat_last")
        marks.append(
            Mark(
                "extrapolated_k",
                f"K>{measured} extrapolated",
                f"acceptance past the profile's {measured} measured position(s) is extrapolated ({rule}); calibrate from "
                f"a deployment that drafts K={k} to measure it",
            )
        )
    measured_with = facts.get("measured_with")
    if measured_with and sampling != measured_with:
        marks.append(
            Mark(
                "draft_sampling",
                f"{sampling} derived",
                f"the profile was measured with {measured_with} drafting; acceptance under {sampling} drafting is derived "
                "from it (the pair family), not measured",
            )
        )
    measured_temperature = facts.get("measured_temperature")
    if measured_temperature is not None and any(abs(t - measured_temperature) > 1e-9 for t in temperatures):
        shown = ", ".join(f"{t:g}" for t in temperatures)
        marks.append(
            Mark(
                "temperature",
                f"T {measured_temperature:g}->{shown}",
                f"the traffic samples at temperature {shown}, the profile was measured at {measured_temperature:g}",
            )
        )
    return marks


def _edge_mark(k: int, fastest_k: int | None, space: StudySpace) -> Mark | None:
    """Chosen K, or the fastest K (the tie rule may have chosen a smaller one), at an end of the range."""
    low, high = space.min_num_speculative_tokens, space.max_num_speculative_tokens
    if high in (k, fastest_k):
        return Mark(
            "range_edge",
            "widen the range",
            f"throughput peaks at the largest K searched ({low}-{high}): a larger K "
            "may be better; widen search.num_speculative_tokens.max",
        )
    if k == low and low > 1:
        return Mark(
            "range_edge",
            "widen the range",
            f"the best K is the smallest searched ({low}-{high}): a smaller K may "
            "be better; lower search.num_speculative_tokens.min",
        )
    return None


def _fastest_k(recommendation: Recommendation, batch_size: int, completed: Mapping[Point, Evaluation]) -> int | None:
    """The K of the recommended combo's highest feasible throughput at one bucket (None: nothing simulated)."""
    space = recommendation.space
    found = [
        e
        for k in space.k_values
        if (e := completed.get(space.point(batch_size, recommendation.combo.label, k))) is not None
    ]
    feasible = [e for e in found if e.feasible]
    best = max(feasible, key=lambda e: e.throughput, default=None)
    return best.point.num_speculative_tokens if best is not None else None


def recommendation_provenance(
    recommendation: Recommendation, completed: Mapping[Point, Evaluation] | None = None
) -> tuple[BucketProvenance, ...]:
    """Marks per bucket of ``recommendation``; a study stored without context gets only range marks.

    ``completed`` (every evaluation) lets the range mark see a fastest K that the tie rule passed over.
    """
    space = recommendation.space
    facts = space.context.get("candidates", {}).get(recommendation.combo.candidate, {})
    temperatures = list(space.context.get("temperatures") or [])
    result = []
    for choice in recommendation.choices:
        k = choice.num_speculative_tokens
        marks: list[Mark] = []
        if k > 0:
            marks += _acceptance_marks(k, recommendation.combo.draft_sample_method, facts, temperatures)
            edge = _edge_mark(k, _fastest_k(recommendation, choice.batch_size, completed or {}), space)
            if edge is not None:
                marks.append(edge)
        result.append(
            BucketProvenance(choice.batch_size, choice.first_batch_size, choice.last_batch_size, k, tuple(marks))
        )
    return tuple(result)


def provenance_notes(provenance: tuple[BucketProvenance, ...]) -> list[str]:
    """One sentence per distinct mark, naming the buckets it applies to (for notes, comments and reports)."""
    buckets: dict[str, list[BucketProvenance]] = {}
    for bucket in provenance:
        for mark in bucket.marks:
            buckets.setdefault(mark.message, []).append(bucket)
    notes = []
    for message, marked in buckets.items():
        where = ", ".join(f"{b.first_batch_size}-{b.last_batch_size} (K={b.num_speculative_tokens})" for b in marked)
        notes.append(f"batch sizes {where}: {message}")
    return notes

"""From a study document to what the search needs: the space, the fingerprint, the simulations.

Each point becomes a simulation document: the candidate's speculative base with the point's K, rule
and draft sampling, its acceptance and drafter, the study's deployment, and the workload as a closed
loop at the point's batch size. The K = 0 point (speculation off) is plain decoding, the same for
every candidate: it is simulated as a lookup drafter (no draft pass, no draft prefill) whose schedule
is K = 0 at every batch size.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from spectune.config import SimulationDocument, SpeculativeConfig, StudyDocument
from spectune.study._provenance import study_context
from spectune.study._space import Candidate, Combo, Constraint, Point, StudySpace

__all__ = ["SimulationEvaluator", "document_fingerprint", "simulation_document", "space_from_document"]

_BASE_EXCLUDE = {"num_speculative_tokens", "rejection_sample_method", "draft_sample_method"}
# Simulation result fields kept per trial (the rest -- wall times, step shares -- is about the run).
_KEPT_METRICS = (
    "throughput_tokens_per_s",
    "throughput_stderr_tokens_per_s",
    "tpot_p50_ms",
    "tpot_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "mean_acceptance_length",
    "acceptance_per_position",
    "num_drafts",
    "num_draft_tokens",
    "num_accepted_tokens",
    "mean_batch_size",
    "mean_step_ms",
    "num_requests",
    "output_tokens",
    "simulated_steps",
    "truncated",
    "wall_time_s",
)


def space_from_document(document: StudyDocument) -> StudySpace:
    candidates = tuple(
        Candidate(c.label, c.speculative.model_dump(mode="json", exclude_none=True, exclude=_BASE_EXCLUDE))
        for c in document.candidates
    )
    return StudySpace(
        name=document.name,
        candidates=candidates,
        combos=tuple(Combo(c.label, rule, sampling) for c, rule, sampling in document.combinations()),
        batch_sizes=tuple(document.schedule.batch_sizes),
        min_num_speculative_tokens=document.search.num_speculative_tokens.min,
        max_num_speculative_tokens=document.search.num_speculative_tokens.max,
        max_batch_size=document.workload.max_num_seqs,
        batch_size_weights=tuple(document.schedule.weights or ()),
        objectives=tuple(document.objectives),
        constraints=tuple(Constraint(m, op, bound) for m, op, bound in document.constraint_triples()),  # type: ignore[arg-type]
        skipped_combos=tuple(label for label, _ in document.skipped_combinations()),
        context=study_context(document),
    )


def simulator_version() -> str:
    """The simulator's version, recorded with a study (a study does not resume across versions)."""
    import spectune.simulator  # torch comes with it; only study runs need it

    return f"simulator {spectune.simulator.__version__}"


def document_fingerprint(document: StudyDocument) -> dict[str, str]:
    """sha256 of what determines the results (not the budget, sampler or storage) and the simulator version.

    Acceptance profiles are hashed by their rates (already read into the model), not their path, so
    moving the folder does not change the study; editing a profile does.
    """
    data = document.model_dump(mode="json", exclude={"trials", "storage"})
    data["simulation"].pop("lockstep_memory_gib", None)  # how points share a call, not what they compute
    for candidate in data["candidates"]:
        candidate["acceptance"].pop("profile", None)
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return {"document_sha256": hashlib.sha256(canonical.encode()).hexdigest(), "simulator_version": simulator_version()}


def simulation_document(document: StudyDocument, point: Point) -> SimulationDocument:
    """The simulation of one point."""
    # A refinement (adaptive precision) simulates a multiple of the bucket's requests, past the cap.
    requests = document.schedule.num_requests(point.batch_size, document.workload.num_requests) * point.requests_factor
    workload = document.workload.model_copy(update={"concurrency": point.batch_size, "num_requests": requests})
    if point.is_off:
        candidate = document.candidates[0]
        speculative: dict[str, Any] = {
            "method": "ngram",
            "num_speculative_tokens": 1,
            "num_speculative_tokens_per_batch_size": [[1, document.workload.max_num_seqs, 0]],
        }
        drafter = None
    else:
        label, rule, sampling = point.combo.rsplit("/", 2)
        candidate = next(c for c in document.candidates if c.label == label)
        speculative = candidate.speculative.model_dump(mode="json", exclude_none=True, exclude=_BASE_EXCLUDE)
        speculative |= {"num_speculative_tokens": point.num_speculative_tokens, "rejection_sample_method": rule, "draft_sample_method": sampling}
        drafter = candidate.drafter
    fields = {
        "kind": "simulation",
        "name": f"{document.name} {point.key}",
        "seed": document.seed,
        "speculative": SpeculativeConfig.model_validate(speculative, context={"notices": []}),
        "acceptance": candidate.acceptance,
        "workload": workload,
        "hardware": document.hardware,
        "target_model": document.target_model,
        "drafter": drafter,
        "cost_model": document.cost_model,
        "simulation": document.simulation,
    }
    return SimulationDocument.model_validate(fields, context={"notices": []})


class SimulationEvaluator:
    """Simulates a point of a study document (picklable, so worker processes can run it)."""

    def __init__(self, document: StudyDocument) -> None:
        self.document = document

    def __call__(self, point: Point) -> Mapping[str, Any]:
        return self.evaluate_many([point])[0]

    def evaluate_many(self, points: Sequence[Point]) -> list[Mapping[str, Any]]:
        """The points' metrics, simulated side by side where they can share a call (lockstep)."""
        from spectune.simulator import simulate_many

        results = simulate_many([simulation_document(self.document, point) for point in points], baseline=False)
        return [{name: r[name] for name in _KEPT_METRICS if name in r} for r in (result.to_dict() for result in results)]

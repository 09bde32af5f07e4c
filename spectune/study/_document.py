"""From a study document to what the search needs: the space, the fingerprint, the simulations.

A point's simulation document is ``_point_simulation.simulation_document``'s; ``SimulationEvaluator``
simulates a batch of points side by side.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from spectune.config import (
    DEFAULT_POLICIES,
    FIELDS_ADDED_FOR_VLLM_0_33,
    POLICY_RUNTIMES,
    SimulationDocument,
    StudyDocument,
    StudyMetrics,
    default_num_speculative_tokens,
)
from spectune.study._objective import Evaluator
from spectune.study._point_simulation import sglang_candidate_steps, simulation_document
from spectune.study._provenance import study_context
from spectune.study._space import Candidate, Combo, Point, StudySpace

__all__ = [
    "SimulationEvaluator",
    "document_fingerprint",
    "sglang_candidate_steps",
    "simulation_document",
    "simulation_documents",
    "space_from_document",
]

_BASE_EXCLUDE = {"num_speculative_tokens", "rejection_sample_method", "draft_sample_method"}


def space_from_document(document: StudyDocument) -> StudySpace:
    candidates = tuple(
        Candidate(c.label, c.speculative.model_dump(mode="json", exclude_none=True, exclude=_BASE_EXCLUDE))
        for c in document.candidates
    )
    return StudySpace(
        name=document.name,
        candidates=candidates,
        combos=tuple(
            Combo(c.label, rule, sampling, runtime) for c, rule, sampling, runtime in document.runtime_combinations()
        ),
        batch_sizes=tuple(document.schedule.batch_sizes),
        min_num_speculative_tokens=document.search.num_speculative_tokens.min,
        max_num_speculative_tokens=document.search.num_speculative_tokens.max,
        max_batch_size=document.workload.max_num_seqs,
        batch_size_weights=tuple(document.schedule.weights or ()),
        objectives=tuple(document.objectives),
        constraints=tuple(c.model_copy(update={"text": None}) for c in document.constraints),
        skipped_combos=tuple(label for label, _ in document.skipped_combinations()),
        policies=tuple(document.search.policies),
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
    if data["search"]["policies"] == DEFAULT_POLICIES:  # a study made before policies searched its K table
        del data["search"]["policies"]
    for how in ("lockstep_memory_gib", "engine"):  # how points are verified, not what they compute
        data["simulation"].pop(how, None)
    # A context limit only refuses a workload at validation; it changes no simulated number, and studies made
    # before presets carried it must resume under the same hash.
    data["target_model"].pop("max_model_len_tokens", None)
    # The FP8 rate prices only 1-byte weights; where no model has them it changes no number, and studies made
    # before GPUs carried it must resume under the same hash.
    # (A default drafter is a head sized from the target, or a BF16 draft-LLM preset.)
    weights = [document.target_model.bytes_per_parameter]
    weights += [c.drafter.bytes_per_parameter for c in document.candidates if c.drafter is not None]
    if 1 not in weights:
        data["hardware"]["gpu"].pop("dense_fp8_flops", None)
    for candidate in data["candidates"]:
        acceptance = candidate["acceptance"]
        acceptance.pop("profile", None)
        # Unset, confidence_auc (issue 36) leaves a study's hash as it was before the field existed.
        for rates in (acceptance, *(acceptance.get("bins") or ())):
            if rates.get("confidence_auc") is None:
                rates.pop("confidence_auc", None)
        # Studies made before a candidate's base lost its K hashed vLLM's default K (suffix, mtp): so does this.
        speculative = candidate["speculative"]
        for name in FIELDS_ADDED_FOR_VLLM_0_33:  # unset, they leave a study's hash as it was before them
            if speculative.get(name) is None:
                speculative.pop(name, None)
        speculative["num_speculative_tokens"] = default_num_speculative_tokens(
            speculative["method"], speculative.get("suffix_decoding_max_tree_depth")
        )
    # Where no confidence_auc is set, adaptive verification's estimate learns from the synthesized rows'
    # feature (``BankFeatures``), not a binormal model at 0.75 as before: a study that searches it does not
    # resume across that change; one that does not simulated the same numbers and still resumes.
    if any(POLICY_RUNTIMES[policy] == "vllm_adaptive" for policy in document.search.policies):
        data["adaptive_verification_features"] = "synthesized rows"
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return {"document_sha256": hashlib.sha256(canonical.encode()).hexdigest(), "simulator_version": simulator_version()}


def simulation_documents(document: StudyDocument) -> list[SimulationDocument]:
    """The simulation of every point of the study's space: all a study can simulate (a refinement
    simulates more requests of a point's workload and changes nothing else: ``simulation_document``)."""
    return [simulation_document(document, point) for point in space_from_document(document).points()]


class SimulationEvaluator(Evaluator):
    """Simulates a point of a study document (picklable, so worker processes can run it); ``processes``:
    the study's worker processes on this machine, which share its device's memory."""

    def __init__(self, document: StudyDocument, processes: int = 1) -> None:
        self.document = document
        self.processes = processes

    def __call__(self, point: Point) -> StudyMetrics:
        return self.evaluate_many([point])[0]

    def evaluate_many(self, points: Sequence[Point]) -> list[StudyMetrics]:
        """The points' metrics, simulated side by side where they can share a call (lockstep)."""
        from spectune.simulator import simulate_many

        documents = [simulation_document(self.document, point) for point in points]
        results = simulate_many(documents, baseline=False, processes=self.processes)
        return [StudyMetrics.from_mapping(result.to_dict()) for result in results]

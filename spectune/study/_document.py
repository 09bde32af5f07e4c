"""From a study document to what the search needs: the space, the fingerprint, the simulations.

Each point becomes a simulation document, copied from the study's validated parts (nothing is
validated again): the candidate's speculative base with the point's K, rule and draft sampling, its
acceptance and drafter, the study's deployment, and the workload as a closed loop at the point's
batch size. The K = 0 point (speculation off) is plain decoding, the same for every candidate. The
combo's runtime adds vLLM's ``enable_adaptive_verification`` (K is the drafting depth and the budget's
cap; a point's ``confidence_auc`` replaces the acceptance's) or SGLang's adaptive steps: one slot, candidate steps 1..K, starting at K (a bucket is simulated
at one batch size, so one slot serves it; ``sglang_candidate_steps``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

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


def simulation_document(document: StudyDocument, point: Point) -> SimulationDocument:
    """The simulation of one point: the K = 0 point is plain decoding (``speculative: null``)."""
    # A refinement (adaptive precision) simulates a multiple of the bucket's requests, past the cap.
    requests = document.schedule.num_requests(point.batch_size, document.workload.num_requests) * point.requests_factor
    update = {
        "name": f"{document.name} {point.key}",
        "workload": document.workload.model_copy(update={"concurrency": point.batch_size, "num_requests": requests}),
    }
    if point.combo is not None:
        candidate = document.candidate(point.combo.candidate)
        speculative = candidate.speculative.config(
            point.num_speculative_tokens, point.combo.rejection_sample_method, point.combo.draft_sample_method
        )
        if point.combo.runtime == "vllm_adaptive":
            speculative = speculative.model_copy(update={"enable_adaptive_verification": True})
        acceptance = candidate.acceptance
        if point.confidence_auc is not None:  # the sensitivity to it (``_sensitivity``): in place of any given
            auc = {"confidence_auc": point.confidence_auc}
            bins = [b.model_copy(update=auc) for b in acceptance.bins] if acceptance.bins else acceptance.bins
            acceptance = acceptance.model_copy(update=auc | {"bins": bins})
        update |= {"speculative": speculative, "acceptance": acceptance, "drafter": candidate.drafter}
        if point.combo.runtime == "sglang_adaptive":
            update["sglang_adaptive"] = _sglang_adaptive(point.num_speculative_tokens)
    return _plain_decoding(document).model_copy(update=update)


def simulation_documents(document: StudyDocument) -> list[SimulationDocument]:
    """The simulation of every point of the study's space: all a study can simulate (a refinement
    simulates more requests of a point's workload and changes nothing else: ``simulation_document``)."""
    return [simulation_document(document, point) for point in space_from_document(document).points()]


def sglang_candidate_steps(max_num_speculative_tokens: int) -> list[int]:
    """SGLang's candidate steps for K max: every step 1..K max. SGLang moves one candidate at a time (a
    step up while its EMA of accepted drafts exceeds the step - 0.5, adaptive_spec_params.py:213-250),
    so every step between is a place it can settle; 0 is left out because K = 0 is the study's own
    'off' point (a bucket whose best is 0 gets the singleton [0])."""
    return list(range(1, max_num_speculative_tokens + 1))


def _sglang_adaptive(max_num_speculative_tokens: int) -> Any:
    from spectune.config import SglangAdaptive, SglangAdaptiveSlot

    slot = SglangAdaptiveSlot(candidate_steps=sglang_candidate_steps(max_num_speculative_tokens))
    return SglangAdaptive(slots={1: slot})


def _plain_decoding(document: StudyDocument) -> SimulationDocument:
    """The study's deployment and traffic served without speculation: what every point's document is a copy of."""
    return SimulationDocument.model_construct(
        kind="simulation",
        name=document.name,
        seed=document.seed,
        speculative=None,
        acceptance=None,
        workload=document.workload,
        hardware=document.hardware,
        target_model=document.target_model,
        drafter=None,
        cost_model=document.cost_model,
        simulation=document.simulation,
    )


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

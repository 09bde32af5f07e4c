"""What a study point simulates: its simulation document.

Each point becomes a simulation document, copied from the study's validated parts (nothing is
validated again): the candidate's speculative base with the point's K, rule and draft sampling, its
acceptance and drafter, the study's deployment, and the workload as a closed loop at the point's
batch size. The K = 0 point (speculation off) is plain decoding, the same for every candidate. The
combo's runtime adds vLLM's ``enable_adaptive_verification`` (K is the drafting depth and the budget's
cap; a point's ``confidence_auc`` replaces the acceptance's) or SGLang's adaptive steps: one slot, candidate
steps 1..K, starting at K (a bucket is simulated at one batch size, so one slot serves it;
``sglang_candidate_steps``).
"""

from __future__ import annotations

from typing import Any

from spectune.config import SimulationDocument, StudyDocument
from spectune.study._space import Point

__all__ = ["sglang_candidate_steps", "simulation_document"]


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

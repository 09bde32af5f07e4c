"""The runtime policy a simulation document asks for, built for one serving loop."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from spectune.config import SimulationDocument
from spectune.cost import CostLimits, StepTimer
from spectune.simulator._acceptance_estimate import DEFAULT_CONFIDENCE_AUC, BinormalFeatures
from spectune.simulator._adaptive_verification import profiled_cost_tables
from spectune.simulator._loop import LoopInputs
from spectune.simulator._policy import AdaptiveVerification, SglangSteps, StepPolicy
from spectune.simulator._sglang_adaptive import AdaptiveSteps

__all__ = ["confidence_auc", "drafting_depth", "runtime_policy", "runtime_verifies"]


def drafting_depth(document: SimulationDocument) -> int:
    """The most drafts a request carries in a step: K, or SGLang's largest candidate if larger."""
    spec = document.speculative
    if spec is None:
        return 0
    adaptive = document.sglang_adaptive
    candidates = [step for slot in adaptive.slots.values() for step in slot.candidate_steps] if adaptive else []
    return max([spec.num_speculative_tokens, *candidates])


def runtime_verifies(document: SimulationDocument) -> bool:
    """Whether SGLang's slots can ever draft (some candidate above 0)."""
    adaptive = document.sglang_adaptive
    assert adaptive is not None
    return any(step > 0 for slot in adaptive.slots.values() for step in slot.candidate_steps)


def confidence_auc(document: SimulationDocument, batch_size: int) -> float:
    """The acceptance's confidence_auc at ``batch_size`` (its bin's, else the source's), else the default."""
    acceptance = document.acceptance
    chosen = acceptance.confidence_auc_at(batch_size) if acceptance is not None else None
    return chosen if chosen is not None else DEFAULT_CONFIDENCE_AUC


def runtime_policy(
    document: SimulationDocument,
    k_for_batch: Callable[[int], int],
    step_timer: StepTimer,
    inputs: LoopInputs,
    conditional_rates: Callable[[int], np.ndarray],
    *,
    seed: int,
    limits: CostLimits | None = None,
) -> StepPolicy | None:
    """The loop's policy: SGLang's adaptive steps, vLLM's adaptive verification over ``k_for_batch``, or
    None (every drafted token verified). One per replica: each server keeps its own state."""
    spec = document.speculative
    if spec is None:
        return None
    if document.sglang_adaptive is not None:
        adaptive = document.sglang_adaptive
        capture = adaptive.capture_sizes(inputs.max_running_requests)  # SGLang captures up to its max batch
        return SglangSteps(AdaptiveSteps(adaptive, spec.num_speculative_tokens, capture))
    if not spec.enable_adaptive_verification:
        return None
    max_k = spec.num_speculative_tokens
    tables = profiled_cost_tables(
        step_timer,
        max_k,
        max_num_seqs=inputs.max_running_requests,
        max_num_batched_tokens=inputs.max_num_batched_tokens,
        max_requests=limits.max_batch_size if limits is not None else None,
        max_verify_width=(
            limits.max_num_speculative_tokens + 1
            if limits is not None and limits.max_num_speculative_tokens is not None
            else None
        ),
    )
    # the estimate's quality at the batch the deployment mostly runs (its concurrency)
    auc = confidence_auc(document, inputs.closed_loop_concurrency or inputs.max_running_requests)
    return AdaptiveVerification(
        k_for_batch,
        tables=tables,
        features=BinormalFeatures(auc, seed=seed),
        conditional_rates=conditional_rates,
        num_requests=len(inputs.output_tokens),
        max_k=max_k,
        seed=seed + 1,
    )

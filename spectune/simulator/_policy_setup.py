"""The runtime policy a simulation document asks for, built for one serving loop."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from spectune.config import DEFAULT_CONFIDENCE_AUC, SimulationDocument
from spectune.cost import CostLimits, StepTimer
from spectune.simulator._acceptance_estimate import BankFeatures, BinormalFeatures, FeatureSampler
from spectune.simulator._adaptive_verification import profiled_cost_tables
from spectune.simulator._backend import resolve_device
from spectune.simulator._loop import LoopInputs
from spectune.simulator._policy import AdaptiveVerification, SglangSteps, StepPolicy
from spectune.simulator._replicas import closed_share
from spectune.simulator._sglang_adaptive import AdaptiveSteps
from spectune.workload import LogitSynthesizer
from spectune.workload._confidence import calibrated_confidence, weighted_auc

__all__ = [
    "confidence_auc",
    "drafting_depth",
    "runtime_policy",
    "runtime_verifies",
    "synthesized_confidence_aucs",
]


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


def confidence_auc(document: SimulationDocument, batch_size: int) -> float | None:
    """The confidence_auc the acceptance sets at ``batch_size`` (its bin's, else the source's), which the
    estimate's features are drawn at (``BinormalFeatures``). None where it sets none: the features then come
    from the synthesized rows the drafts are verified on (``BankFeatures``). Synthetic acceptance is decided
    by its rates, not by the rows, so no row carries an outcome to draw from: there the documented
    ``DEFAULT_CONFIDENCE_AUC`` applies."""
    acceptance = document.acceptance
    chosen = acceptance.confidence_auc_at(batch_size) if acceptance is not None else None
    spec = document.speculative
    if chosen is None and spec is not None and spec.rejection_sample_method == "synthetic":
        return DEFAULT_CONFIDENCE_AUC
    return chosen


def synthesized_confidence_aucs(document: SimulationDocument) -> list[float]:
    """Per draft position (K of them), the AUC of vLLM's feature against acceptance on the rows
    ``BankFeatures`` draws from in ``document`` (``weighted_auc``; pooled over each replica's acceptance bin
    and the workload's temperatures, each by its share of requests): what its estimate can learn where the
    acceptance sets no confidence_auc. The rows are calibrated as the simulation's synthesizers calibrate
    them, without building their banks."""
    spec, acceptance = document.speculative, document.acceptance
    assert spec is not None and acceptance is not None  # the synthesized rows of a speculative document
    max_k = drafting_depth(document)
    workload = document.workload
    temperatures, shares = workload.temperature_mix
    if workload.concurrency is None:
        concurrencies = {workload.max_num_seqs}
    else:  # each replica's share of the closed loop, as ``runtime_policy`` reads it
        replicas = document.num_replicas
        concurrencies = {closed_share(workload.concurrency, replicas, r) for r in range(replicas)} - {0}
    rates = [acceptance.rates_for_batch(c).conditional(max_k) for c in sorted(concurrencies)]
    device = resolve_device(document.simulation.device)
    aucs = []
    for position in range(max_k):
        features: list[np.ndarray] = []
        accept: list[np.ndarray] = []
        weights: list[np.ndarray] = []
        for bin_rates in rates:
            for temperature, share in zip(temperatures, shares):
                feature, probability = calibrated_confidence(
                    bin_rates[position],
                    temperature,
                    measured_with=acceptance.measured_with,
                    draft_sample_method=spec.draft_sample_method,
                    vocab_size=workload.vocab_size,
                    bank_rows=document.simulation.bank_rows,
                    device=device,
                )
                features.append(feature)
                accept.append(probability)
                weights.append(np.full(len(feature), share))
        aucs.append(weighted_auc(np.concatenate(features), np.concatenate(accept), np.concatenate(weights)))
    return aucs


def runtime_policy(
    document: SimulationDocument,
    k_for_batch: Callable[[int], int],
    step_timer: StepTimer,
    inputs: LoopInputs,
    conditional_rates: Callable[[int], np.ndarray],
    *,
    synthesizer: Callable[[int], LogitSynthesizer],
    temperature_index: np.ndarray,
    seed: int,
    limits: CostLimits | None = None,
) -> StepPolicy | None:
    """The loop's policy: SGLang's adaptive steps, vLLM's adaptive verification over ``k_for_batch``, or
    None (every drafted token verified). One per replica: each server keeps its own state.

    synthesizer: the synthesizer the drafts are verified with at a batch size (its acceptance bin's)
    temperature_index: int64 [requests of ``inputs``], each request's index into its temperatures
    """
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
    # the estimate's features at the batch the deployment mostly runs (its concurrency)
    concurrency = inputs.closed_loop_concurrency or inputs.max_running_requests
    auc = confidence_auc(document, concurrency)
    features: FeatureSampler = (
        BinormalFeatures(auc, seed=seed)
        if auc is not None
        else BankFeatures(synthesizer(concurrency), temperature_index, seed=seed)
    )
    return AdaptiveVerification(
        k_for_batch,
        tables=tables,
        features=features,
        conditional_rates=conditional_rates,
        num_requests=len(inputs.output_tokens),
        max_k=max_k,
        seed=seed + 1,
    )

"""Runtime policies: how many drafts each request drafts and verifies, asked by the serving loop each step.

``StepPolicy`` is a fixed K per batch size (a static K or a K table); ``AdaptiveVerification`` is vLLM
0.33.0's adaptive verification over it; ``SglangSteps`` is SGLang 0.5.23's adaptive steps. The engines
verify each request's whole K-draft chain; a policy that verifies fewer trims the emitted counts, which
for rejection sampling is exact: with the same draws, verifying a prefix of a drafts accepts
min(accepted, a) of them and emits one more token (a correction, or the bonus at position a).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from spectune.simulator._acceptance_estimate import FeatureSampler, OnlineAcceptanceEstimator
from spectune.simulator._adaptive_verification import CostTables, admit_top_slots, choose_budget
from spectune.simulator._sglang_adaptive import AdaptiveSteps

__all__ = ["AdaptiveVerification", "SglangSteps", "StepPolicy"]

Phases = tuple[float, float, float, float]
StepTimeFn = Callable[[int, int, float], Phases]


class StepPolicy:
    """A K per batch size, verified whole. Subclasses override the hooks they need.

    Call order in a step with ``B`` decoding requests:

    1. ``k_for_batch(batch)`` -> K, the drafts each request carries;
    2. if K > 0: ``plan(running, K, num_sampling_requests, num_non_draft_tokens)`` before the step's time;
    3. ``step_phases(step_time, B, K, mean_context)`` -> the step's (drafting, verification, sampling,
       overhead) seconds;
    4. if K > 0: ``settle(running, K, emitted, batch)`` with the engine's emitted tokens per request
       (accepted drafts of the whole chain + 1) -> the tokens the policy lets each request emit;
       if K = 0: ``unverified(B)``.
    ``verified_drafts`` then holds the draft tokens the step verified (vLLM's num_draft_tokens).
    """

    def __init__(self, k_for_batch: Callable[[int], int]) -> None:
        self.k_for_batch = k_for_batch
        self.verified_drafts = 0

    def plan(self, running: np.ndarray, k: int, num_sampling_requests: int, num_non_draft_tokens: int) -> None:
        self.verified_drafts = len(running) * k

    def step_phases(self, step_time: StepTimeFn, batch: int, k: int, mean_context: float) -> Phases:
        return step_time(batch, k, mean_context)

    def settle(self, running: np.ndarray, k: int, emitted: np.ndarray, batch: int) -> np.ndarray:
        return emitted

    def unverified(self, batch: int) -> None:
        """A step that drafted nothing (K = 0 at this batch size)."""


class SglangSteps(StepPolicy):
    """SGLang's slots pick K per batch; each verify's accepted drafts feed the routed slot's EMA. A step at
    0 steps feeds zeros: SGLang still verifies it as a plain decode (eagle_worker_v2.py,
    _build_trivial_verify_input) and counts it towards its next decision (a 0-step slot probes up)."""

    def __init__(self, steps: AdaptiveSteps) -> None:
        super().__init__(steps.k_for_batch)
        self.steps = steps

    def settle(self, running: np.ndarray, k: int, emitted: np.ndarray, batch: int) -> np.ndarray:
        self.steps.verified(batch, emitted - 1)
        return emitted

    def unverified(self, batch: int) -> None:
        self.steps.verified(batch, np.zeros(batch, dtype=np.int64))


def _interpolated(step_time: StepTimeFn, batch: int, tokens: int, context: float) -> tuple[float, float]:
    """(verification, sampling) seconds for ``tokens`` verified positions over ``batch`` requests: linear
    between the two whole verification widths around tokens / batch (a cost model answers at whole K)."""
    width = tokens / batch  # 1 + admitted drafts per request, >= 1
    low = int(np.floor(width))
    low_phases = step_time(batch, low - 1, context)
    if width == low:
        return low_phases[1], low_phases[2]
    high_phases = step_time(batch, low, context)
    share = width - low
    return (
        low_phases[1] + (high_phases[1] - low_phases[1]) * share,
        low_phases[2] + (high_phases[2] - low_phases[2]) * share,
    )


class AdaptiveVerification(StepPolicy):
    """vLLM's adaptive verification over K per batch size (the table, or num_speculative_tokens).

    The budget b comes from last step's estimates (``choose_budget``); the drafts admitted from this
    step's (``admit_top_slots``); the drafter still drafts K, so the step pays K drafts, and verification
    and sampling at the B + b tokens verified. ``conditional_rates(batch)`` gives float64 [>= K], the
    acceptance per position, for the drafts past a request's first rejection, whose outcome the chain's
    count does not say: their features are drawn as for a draft accepted with that probability.
    """

    def __init__(
        self,
        k_for_batch: Callable[[int], int],
        *,
        tables: CostTables,
        features: FeatureSampler,
        conditional_rates: Callable[[int], np.ndarray],
        num_requests: int,
        max_k: int,
        seed: int,
    ) -> None:
        super().__init__(k_for_batch)
        self.tables = tables
        self.features = features
        self.conditional_rates = conditional_rates
        self.estimator = OnlineAcceptanceEstimator(max_k)
        self.stale = np.ones((num_requests, max_k))  # each request's last estimates; 1 before its first step
        self.budget = 0
        self._rng = np.random.default_rng(seed)
        self._rates: dict[int, np.ndarray] = {}  # conditional_rates by batch size, asked every step

    def plan(self, running: np.ndarray, k: int, num_sampling_requests: int, num_non_draft_tokens: int) -> None:
        survival = np.cumprod(self.stale[running, :k], axis=1)
        self.budget = choose_budget(survival, None, num_sampling_requests, num_non_draft_tokens, self.tables)
        self.verified_drafts = self.budget

    def step_phases(self, step_time: StepTimeFn, batch: int, k: int, mean_context: float) -> Phases:
        drafting, verification, sampling, overhead = step_time(batch, k, mean_context)
        if k == 0 or self.budget == batch * k:
            return drafting, verification, sampling, overhead
        verification, sampling = _interpolated(step_time, batch, batch + self.budget, mean_context)
        return drafting, verification, sampling, overhead

    def settle(self, running: np.ndarray, k: int, emitted: np.ndarray, batch: int) -> np.ndarray:
        accepted = emitted - 1
        position = np.arange(k)[None, :]
        rates = self._rates.get(batch)
        if rates is None:
            rates = self._rates[batch] = self.conditional_rates(batch)
        later = self._rng.random((len(running), k)) < rates[None, :k]
        would_accept = (position < accepted[:, None]) | ((position > accepted[:, None]) & later)
        features = self.features.draw(would_accept, running)
        estimates = self.estimator.predict(features)
        admitted = admit_top_slots(np.cumprod(estimates, axis=1), None, self.budget)
        kept = np.minimum(accepted, admitted)
        self.estimator.observe(features, estimates, kept, admitted)
        self.stale[running, :k] = estimates
        return kept + 1

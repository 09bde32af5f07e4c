"""SGLang 0.5.23's adaptive steps at run time: one ``AdaptiveStepSlot`` per batch-size key.

The semantics of ``sglang/srt/speculative/adaptive_spec_params.py`` (``AdaptiveStepSlot.update``,
``_recompute_params``; ``AdaptiveSpeculativeParams._route``):

- a slot starts at the initial steps if they are a candidate, else at its middle candidate, with its
  EMA of accepted drafts per request at steps - 1;
- after each verify routed to it, the EMA takes the batch's mean accepted drafts (not while at 0 steps);
  the batch counts even at 0 steps; no decision during the first ``warmup_batches``, then one every
  ``update_interval`` batches;
- a decision from 0 steps probes the next candidate (resetting a negative EMA to that step's neutral
  value); otherwise it steps down while EMA <= (previous candidate - 0.5, or 0.5 when that candidate is
  0) + down_hysteresis, and only if it did not, steps up while EMA > current - 0.5 + up_hysteresis; with
  ceiling_coeff > 0 a kept or lowered step is capped at max(1, ceil(EMA x ceiling_coeff)).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from spectune.config import SglangAdaptive, SlotParameters

__all__ = ["AdaptiveSteps", "StepSlot"]


class StepSlot:
    """One batch-size key's step choice."""

    def __init__(self, parameters: SlotParameters, initial_steps: int) -> None:
        self.parameters = parameters
        candidates = parameters.candidate_steps
        self.steps = initial_steps if initial_steps in candidates else candidates[len(candidates) // 2]
        self.ema = float(self.steps - 1)
        self.batches = 0

    def update(self, num_accepted: np.ndarray) -> None:
        """Feed one verify's accepted drafts per request (int64 [B], bonus excluded)."""
        if num_accepted.size == 0:
            return
        p = self.parameters
        if self.steps > 0:
            self.ema = (1.0 - p.ema_alpha) * self.ema + p.ema_alpha * float(num_accepted.mean())
        self.batches += 1
        if self.batches <= p.warmup_batches or (self.batches - p.warmup_batches) % p.update_interval:
            return
        self.steps = self._decide()

    def _decide(self) -> int:
        p, candidates = self.parameters, self.parameters.candidate_steps
        old = self.steps
        index = candidates.index(old)
        if old == 0:
            target = candidates[min(index + 1, len(candidates) - 1)]
            if target > 0 and self.ema < 0:
                self.ema = float(target - 1)
            return target
        start = index
        while index > 0:
            below = candidates[index - 1]
            threshold = (0.5 if below == 0 else below - 0.5) + p.down_hysteresis
            if self.ema > threshold:
                break
            index -= 1
        if index == start:
            while index < len(candidates) - 1 and self.ema > candidates[index] - 0.5 + p.up_hysteresis:
                index += 1
        target = candidates[index]
        if p.ceiling_coeff > 0:
            ceiling = max(1, math.ceil(self.ema * p.ceiling_coeff))
            if ceiling < target <= old:
                while index > 0 and candidates[index] > ceiling:
                    index -= 1
                target = candidates[index]
        return target


class AdaptiveSteps:
    """The slots of one server: K for a batch, fed back by each verify."""

    def __init__(self, config: SglangAdaptive, initial_steps: int, capture_sizes: Sequence[int]) -> None:
        self.config = config
        self.capture_sizes = list(capture_sizes)
        self.slots = {key: StepSlot(config.slot_parameters(key), initial_steps) for key in config.slots}
        self._route: dict[int, StepSlot] = {}

    def slot(self, batch_size: int) -> StepSlot:
        known = self._route.get(batch_size)
        if known is None:
            known = self._route[batch_size] = self.slots[self.config.route(batch_size, self.capture_sizes)]
        return known

    def k_for_batch(self, batch_size: int) -> int:
        return self.slot(batch_size).steps

    def verified(self, batch_size: int, num_accepted: np.ndarray) -> None:
        self.slot(batch_size).update(num_accepted)

"""What a K = 0 row of a per-batch-size K table costs in vLLM: the drafter still runs.

spectune used to cost a K = 0 step as plain decoding with no drafter. vLLM does not serve a 0 row that
way: with ``num_speculative_tokens_per_batch_size``, a step with K = 0 still runs the drafter so that
its KV cache stays in sync (vLLM issue #49548 measured +6.6 % TPOT at concurrency 2 and +21.6 % at
189 against no speculation at all, H100, V1 runner, zero draft tokens), and Model Runner V2 before PR
#51575 ran every configured draft step and threw the drafts away. ``cost_model.zero_k_draft_cost``
picks the behaviour:

- ``none``: no drafter pass (speculation off, or an engine that skips the drafter);
- ``draft_prefill``: one drafter pass over the step's tokens (V1; MRV2 with #51575), costed as the
  roofline's pass that drafts one token;
- ``all_draft_steps``: all K draft passes of the configured ``num_speculative_tokens`` (MRV2 before #51575).

Lookup drafters (ngram, suffix) keep no KV cache and pay nothing. The term comes from the roofline
for any cost model, a measured table included (its K = 0 rows are plain decoding, measured without a
drafter).
"""

from __future__ import annotations

from spectune.cost._interface import CostLimits, CostModel, FitReport, StepPhases, StepTime, StepTimer
from spectune.cost._roofline import RooflineCostModel

__all__ = ["ZeroRowDraftCostModel", "zero_row_draft_time"]


def zero_row_draft_time(
    roofline: RooflineCostModel, mode: str, batch_size: int, context_tokens: float, num_speculative_tokens: int
) -> float:
    """Seconds a K = 0 step of a speculative deployment spends in the drafter (``mode`` as above)."""
    if mode == "draft_prefill":
        return roofline.drafting_time(batch_size, 1, context_tokens)
    if mode == "all_draft_steps":
        return roofline.drafting_time(batch_size, num_speculative_tokens, context_tokens)
    return 0.0


class ZeroRowDraftCostModel(CostModel):
    """Another cost model whose K = 0 steps also pay the drafter, as a 0 row of vLLM's K table does."""

    def __init__(self, inner: CostModel, roofline: RooflineCostModel, mode: str, num_speculative_tokens: int) -> None:
        self._inner = inner
        self._roofline = roofline
        self._mode = mode
        self._num_speculative_tokens = num_speculative_tokens

    @property
    def limits(self) -> CostLimits:
        return self._inner.limits

    def step_time(
        self, batch_size: int, num_speculative_tokens: int, context_tokens: float, *, draft_probabilities: bool = False
    ) -> StepTime:
        step = self._inner.step_time(
            batch_size, num_speculative_tokens, context_tokens, draft_probabilities=draft_probabilities
        )
        if num_speculative_tokens > 0:
            return step
        extra = zero_row_draft_time(
            self._roofline, self._mode, batch_size, context_tokens, self._num_speculative_tokens
        )
        return StepTime(
            drafting_s=step.drafting_s + extra,
            verification_s=step.verification_s,
            sampling_s=step.sampling_s,
            overhead_s=step.overhead_s,
        )

    def step_timer(self, *, draft_probabilities: bool = False) -> StepTimer:
        inner = self._inner.step_timer(draft_probabilities=draft_probabilities)

        def timer(batch_size: int, num_speculative_tokens: int, context_tokens: float) -> StepPhases:
            phases = inner(batch_size, num_speculative_tokens, context_tokens)
            if num_speculative_tokens > 0:
                return phases
            extra = zero_row_draft_time(
                self._roofline, self._mode, batch_size, context_tokens, self._num_speculative_tokens
            )
            drafting_s, verification_s, sampling_s, overhead_s = phases
            return drafting_s + extra, verification_s, sampling_s, overhead_s

        return timer

    def prefill_time(self, num_prompt_tokens: int, *, num_prompts: int = 1) -> float:
        return self._inner.prefill_time(num_prompt_tokens, num_prompts=num_prompts)

    def fit_report(self) -> FitReport | None:
        return self._inner.fit_report()

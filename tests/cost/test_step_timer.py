"""``step_timer``, the serving loop's way to ask a cost model for step times: the numbers ``step_time``
gives, bit for bit, on every kind of model and again on repeated (batch size, K); and the roofline's
``step_time`` against its formulas written out plainly (one pass recomputed whole each time), so that
keeping per-(batch size, K) pieces changed no bit."""

from __future__ import annotations

import pytest

from spectune.config import CostModelConfig, DrafterSpec, HardwareConfig, StepTimeTable, TargetModelSpec
from spectune.cost import RooflineCostModel, build_cost_model
from spectune.cost._interface import StepTime
from spectune.cost._roofline import expected_experts_touched

H100 = HardwareConfig.model_validate("h100-sxm")
LLAMA_8B = TargetModelSpec.model_validate("llama-3.1-8b")
EAGLE3_8B = DrafterSpec.model_validate("eagle3-llama-3.1-8b")
TABLE = StepTimeTable.model_validate(
    {
        "points": [
            {"batch_size": b, "num_speculative_tokens": k, "step_time_ms": 6.0 + 0.05 * b + 0.7 * k + 0.01 * b * k}
            for b in (1, 16, 64, 256)
            for k in (0, 2, 5)
        ]
    }
)
# (target, drafter, cost model config, K the deployment is built for)
DEPLOYMENTS = {
    "eagle3": (LLAMA_8B, EAGLE3_8B, {}, 5),
    "eagle3-spectune-sampler": (LLAMA_8B, EAGLE3_8B, {"sampler": "spectune"}, 5),
    "parallel-drafting": (LLAMA_8B, EAGLE3_8B.model_copy(update={"drafting": "parallel"}), {}, 5),
    "ngram": (LLAMA_8B, DrafterSpec.model_validate("ngram"), {}, 4),
    "plain": (LLAMA_8B, None, {}, 0),
    "moe-tp2": (
        TargetModelSpec.model_validate({"preset": "qwen3-30b-a3b", "tensor_parallel_size": 2}),
        None,
        {},
        0,
    ),
    "measured": (LLAMA_8B, EAGLE3_8B, {"method": "measured", "step_times": TABLE}, 5),
    "measured-at-context": (
        LLAMA_8B,
        EAGLE3_8B,
        {"method": "measured", "step_times": TABLE, "step_times_context_tokens": 1024},
        5,
    ),
    "zero-row": (LLAMA_8B, EAGLE3_8B, {"zero_k_draft_cost": "all_draft_steps"}, 5),
}
HARDWARE = {"moe-tp2": HardwareConfig.model_validate({"gpu": "h100-sxm", "num_gpus": 2})}


def _model(name: str):
    target, drafter, config, k = DEPLOYMENTS[name]
    return build_cost_model(
        HARDWARE.get(name, H100), target, drafter, CostModelConfig(**config), num_speculative_tokens=k
    )


def _grid(name: str) -> list[tuple[int, int, float]]:
    ks = range(DEPLOYMENTS[name][3] + 1)
    return [(b, k, c) for b in (1, 7, 64, 256, 300) for k in ks for c in (0.0, 17.25, 811.0 / 3, 4096.5)]


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
@pytest.mark.parametrize("draft_probabilities", [False, True])
def test_step_timer_gives_step_time_bit_for_bit(name, draft_probabilities):
    cost = _model(name)
    timer = cost.step_timer(draft_probabilities=draft_probabilities)
    for _ in range(2):  # the second round hits what the timer kept
        for batch, k, context in _grid(name):
            step = cost.step_time(batch, k, context, draft_probabilities=draft_probabilities)
            assert timer(batch, k, context) == (step.drafting_s, step.verification_s, step.sampling_s, step.overhead_s)


def _reference_pass(cost: RooflineCostModel, shape, requests, tokens_each, context, outputs) -> float:
    """One forward pass, as the roofline's module docstring writes it."""
    tokens = requests * tokens_each
    experts = expected_experts_touched(shape.num_experts, shape.experts_per_token, tokens) * shape.expert_bytes
    linear = max(
        (shape.weight_bytes + experts) / cost._bandwidth,
        (tokens * shape.body_flops_per_token + outputs * shape.head_flops_per_output) / cost._flops,
    )
    keys_per_query = context + (tokens_each + 1) / 2
    attention = max(
        requests * (context + tokens_each) * shape.kv_bytes_per_token / cost._bandwidth,
        tokens * keys_per_query * shape.attention_flops_per_query_key / cost._flops,
    )
    communication = shape.num_allreduces * (
        cost._allreduce_latency_s + tokens * shape.allreduce_bytes_per_token / cost._link
    )
    return linear + attention + communication


def _reference_drafting(cost: RooflineCostModel, batch: int, k: int, context: float) -> float:
    if k == 0:
        return 0.0
    if cost._draft is None:
        return batch * cost._drafter.host_time_per_request_s
    if cost._drafter.drafting == "parallel":
        return _reference_pass(cost, cost._draft, batch, k + 1, context, batch * k) + cost._draft_pass_overhead_s
    first = _reference_pass(cost, cost._draft, batch, k + 1, context, batch)
    later = _reference_pass(cost, cost._draft, batch, 1, context, batch)
    return first + (k - 1) * later + k * cost._draft_pass_overhead_s


@pytest.mark.parametrize("name", ["eagle3", "parallel-drafting", "ngram", "plain", "moe-tp2"])
def test_roofline_step_and_prefill_times_follow_the_plain_formulas(name):
    cost = _model(name)
    assert isinstance(cost, RooflineCostModel)
    for batch, k, context in _grid(name):
        step = cost.step_time(batch, k, context)
        assert step.drafting_s == _reference_drafting(cost, batch, k, context)
        assert step.verification_s == _reference_pass(cost, cost._target, batch, k + 1, context, batch * (k + 1))
    for tokens, prompts in [(1, 1), (600, 1), (1234, 3), (8192, 7)]:
        expected = _reference_pass(cost, cost._target, prompts, tokens / prompts, 0.0, prompts) + cost._overhead_s
        if cost._draft is not None:
            draft = _reference_pass(cost, cost._draft, prompts, tokens / prompts, 0.0, prompts)
            expected += draft + cost._draft_pass_overhead_s
        assert cost.prefill_time(tokens, num_prompts=prompts) == expected


@pytest.mark.parametrize("name", ["measured", "measured-at-context"])
def test_measured_step_time_is_the_roofline_split_scaled_to_the_table(name):
    cost = _model(name)
    roofline, table_context = cost._roofline, cost._table_context_tokens
    for batch, k, context in _grid(name):
        measured = cost._interpolate(batch, k)
        estimate = roofline.step_time(batch, k, context, draft_probabilities=True)
        total = measured
        if table_context is not None:
            at_table_context = roofline.step_time(batch, k, table_context, draft_probabilities=True)
            total = max(measured + estimate.total_s - at_table_context.total_s, min(measured, estimate.total_s))
        scale = total / estimate.total_s
        assert cost.step_time(batch, k, context, draft_probabilities=True) == StepTime(
            estimate.drafting_s * scale, estimate.verification_s * scale, estimate.sampling_s * scale,
            estimate.overhead_s * scale,
        )  # fmt: skip

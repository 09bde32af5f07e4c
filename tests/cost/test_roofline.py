"""The roofline cost model: sane preset numbers, the ridge point, and the best K falling with batch size."""

from __future__ import annotations

import math

import pytest

from spectune.config import CostModelConfig, DrafterSpec, HardwareConfig, TargetModelSpec, default_drafter
from spectune.cost import RooflineCostModel, SamplerWork, build_cost_model
from spectune.cost._interface import StepTime
from spectune.cost._roofline import expected_experts_touched
from spectune.errors import SpectuneError

H100 = HardwareConfig.model_validate("h100-sxm")
LLAMA_8B = TargetModelSpec.model_validate("llama-3.1-8b")
EAGLE3_8B = DrafterSpec.model_validate("eagle3-llama-3.1-8b")


def model(hardware=H100, target=LLAMA_8B, drafter=EAGLE3_8B, **config) -> RooflineCostModel:
    built = build_cost_model(hardware, target, drafter, CostModelConfig(**config))
    assert isinstance(built, RooflineCostModel)
    return built


def tokens_per_step(acceptance: float, k: int) -> float:
    """Expected tokens per step with constant acceptance: (1 - a^(K+1)) / (1 - a)."""
    return (1 - acceptance ** (k + 1)) / (1 - acceptance)


def best_k(cost, batch_size: int, acceptance: float, context: float, max_k: int = 15) -> int:
    rates = [tokens_per_step(acceptance, k) / cost.step_time(batch_size, k, context).total_s for k in range(max_k + 1)]
    return max(range(max_k + 1), key=rates.__getitem__)


def test_h100_llama_8b_decode_at_batch_1_is_weights_over_bandwidth():
    step = model().step_time(1, 0, 0)
    weights_over_bandwidth = LLAMA_8B.parameters_read_per_pass * 2 / (3.35e12 * 0.8)
    assert step.verification_s == pytest.approx(weights_over_bandwidth, rel=0.01)
    assert 0.004 < step.total_s < 0.010  # a few ms, as public runs report (6.3-7.5 ms)
    assert step.drafting_s == 0.0


def test_total_is_the_sum_of_the_phases():
    step = model().step_time(16, 4, 2000)
    assert step.total_s == pytest.approx(step.drafting_s + step.verification_s + step.sampling_s + step.overhead_s)
    assert min(step.drafting_s, step.verification_s, step.sampling_s, step.overhead_s) > 0


@pytest.mark.parametrize("tokens", [2, 16, 64, 128, 200])
def test_verification_is_flat_below_the_ridge_point(tokens):
    cost = model()
    assert H100.gpu.ridge_point_flop_per_byte == pytest.approx(258.3, abs=0.1)
    assert cost.verification_time(tokens, 0, 0) == pytest.approx(cost.verification_time(1, 0, 0), rel=0.01)


def test_verification_grows_linearly_above_the_ridge_point():
    cost = model()
    t1k, t2k, t4k = (cost.verification_time(n, 0, 0) for n in (1024, 2048, 4096))
    flops_per_token = 2 * LLAMA_8B.parameters_read_per_pass / (989e12 * 0.7)
    assert t2k - t1k == pytest.approx(1024 * flops_per_token, rel=0.05)
    assert t4k - t2k == pytest.approx(2 * (t2k - t1k), rel=0.02)


def test_verification_depends_on_batch_and_k_only_through_their_product_without_context():
    cost = model()
    reference = cost.verification_time(128, 0, 0)
    for batch_size, k in [(64, 1), (32, 3), (16, 7)]:
        assert cost.verification_time(batch_size, k, 0) == pytest.approx(reference, rel=0.01)


def test_kv_cache_reads_grow_with_context_and_are_shared_by_a_requests_drafts():
    cost = model()
    extra = cost.verification_time(64, 0, 4096) - cost.verification_time(64, 0, 0)
    assert extra == pytest.approx(64 * 4096 * LLAMA_8B.kv_cache_bytes_per_token / (3.35e12 * 0.8), rel=0.02)
    # verifying 4 tokens per request reads each request's cache once, not four times
    extra_k3 = cost.verification_time(64, 3, 4096) - cost.verification_time(64, 3, 0)
    assert extra_k3 == pytest.approx(extra, rel=0.05)


def test_best_k_falls_as_the_batch_grows():
    cost = model()
    k1, k64, k256 = (best_k(cost, batch_size, 0.8, context=512) for batch_size in (1, 64, 256))
    assert k1 > k64 > k256 >= 1
    assert k1 >= 5  # at batch 1, verification is free and only drafting costs
    # the same ranking with no context (weights only)
    k1, k64, k256 = (best_k(cost, batch_size, 0.8, context=0) for batch_size in (1, 64, 256))
    assert k1 > k64 > k256


def test_speculation_turns_off_at_large_batch_with_poor_acceptance():
    cost = model()
    assert best_k(cost, 512, 0.4, context=0) == 0
    assert best_k(cost, 1, 0.4, context=0) >= 1


def test_sequential_drafting_costs_one_pass_per_token():
    cost = model()
    passes = [cost.drafting_time(1, k, 1000) for k in range(1, 6)]
    steps = [b - a for a, b in zip(passes, passes[1:], strict=False)]
    assert max(steps) == pytest.approx(min(steps), rel=1e-9)
    head_pass = EAGLE3_8B.num_parameters * 2 / (3.35e12 * 0.8) + 1e-4
    assert steps[0] == pytest.approx(head_pass, rel=0.05)


def test_parallel_drafting_costs_one_pass_whatever_k():
    cost = model(drafter=DrafterSpec.model_validate("dflash-llama-3.1-8b"))
    assert cost.drafting_time(1, 15, 0) == pytest.approx(cost.drafting_time(1, 1, 0), rel=0.02)


def test_lookup_drafting_costs_no_gpu_time_but_its_host_time():
    assert model(drafter=DrafterSpec.model_validate("ngram")).drafting_time(64, 5, 1000) == 0.0
    suffix = DrafterSpec.model_validate({"preset": "suffix", "host_time_per_request_s": 2e-5})
    assert model(drafter=suffix).drafting_time(64, 5, 1000) == pytest.approx(64 * 2e-5)


def test_k_zero_is_plain_decoding_even_with_a_drafter():
    with_drafter, without = model().step_time(8, 0, 100), model(drafter=None).step_time(8, 0, 100)
    assert with_drafter == without


def test_k_above_zero_without_a_drafter_is_an_error():
    with pytest.raises(ValueError, match="num_speculative_tokens 2 needs a drafter"):
        model(drafter=None).step_time(1, 2, 0)


def test_spectune_sampler_reads_the_fp32_logits_once():
    cost = model(sampler="spectune")
    bandwidth = 3.35e12 * 0.8
    assert cost.step_time(32, 3, 0).sampling_s == pytest.approx(32 * 4 * 128256 * 4 / bandwidth)
    with_draft = cost.step_time(32, 3, 0, draft_probabilities=True).sampling_s
    assert with_draft == pytest.approx((32 * 4 * 128256 + 32 * 3 * 32000) * 4 / bandwidth)


def test_faster_memory_means_faster_decode_steps():
    by_gpu = {
        name: model(hardware=HardwareConfig.model_validate(name)).step_time(1, 0, 0).verification_s
        for name in ("l40s", "a100-80gb", "h100-sxm", "h200", "b200")
    }
    assert list(by_gpu.values()) == sorted(by_gpu.values(), reverse=True)


def test_tensor_parallel_splits_weights_and_adds_all_reduces():
    llama_70b = TargetModelSpec.model_validate("llama-3.1-70b")
    four_gpus = HardwareConfig.model_validate({"gpu": "h100-sxm", "num_gpus": 4})
    cost = model(hardware=four_gpus, target=llama_70b, drafter=None)
    weights = llama_70b.parameters_read_per_pass * 2 / 4 / (3.35e12 * 0.8)
    all_reduces = 2 * 80 * 5e-6
    assert cost.verification_time(1, 0, 0) == pytest.approx(weights + all_reduces, rel=0.01)
    eight = model(
        hardware=HardwareConfig.model_validate({"gpu": "h100-sxm", "num_gpus": 8}),
        target=llama_70b.model_copy(update={"tensor_parallel_size": 8}),
        drafter=None,
    )
    assert eight.verification_time(1, 0, 0) < 0.6 * cost.verification_time(1, 0, 0)


def test_prefill_is_compute_bound_and_includes_the_drafter():
    plain = model(drafter=None)
    per_token = 2 * (LLAMA_8B.parameters_read_per_pass - LLAMA_8B.lm_head_parameters) / (989e12 * 0.7)
    assert plain.prefill_time(8192) - plain.prefill_time(4096) > 4096 * per_token
    assert plain.prefill_time(4096) < plain.prefill_time(8192) < 2.5 * plain.prefill_time(4096)
    assert model().prefill_time(2048) > plain.prefill_time(2048)


def test_roofline_has_no_limits_and_no_fit_report():
    cost = model()
    assert cost.limits.max_batch_size is None and cost.limits.max_num_speculative_tokens == 64
    assert cost.fit_report() is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 1, 0.0), "batch_size must be an integer >= 1, got 0"),
        ((True, 1, 0.0), "batch_size must be an integer >= 1, got True"),
        ((1, -1, 0.0), r"num_speculative_tokens must be an integer in \[0, 64\], got -1"),
        ((1, 65, 0.0), r"num_speculative_tokens must be an integer in \[0, 64\], got 65"),
        ((1, 2.0, 0.0), r"num_speculative_tokens must be an integer in \[0, 64\], got 2.0"),
        ((1, 1, math.nan), "context_tokens must be a finite number >= 0, got nan"),
        ((1, 1, -5), "context_tokens must be a finite number >= 0, got -5"),
    ],
)
def test_bad_step_arguments_are_named(args, message):
    with pytest.raises(ValueError, match=message):
        model().step_time(*args)


def test_bad_prompt_length_is_named():
    with pytest.raises(ValueError, match=r"num_prompt_tokens must be an integer >= num_prompts \(1\), got 0"):
        model().prefill_time(0)
    with pytest.raises(ValueError, match=r"num_prompt_tokens must be an integer >= num_prompts \(4\), got 3"):
        model().prefill_time(3, num_prompts=4)
    with pytest.raises(ValueError, match="num_prompts must be an integer >= 1, got 0"):
        model().prefill_time(3, num_prompts=0)


def test_prompts_prefilled_together_share_the_weight_read_and_not_the_attention():
    cost = model(drafter=None)
    one = cost.prefill_time(4096)
    four = cost.prefill_time(4 * 4096, num_prompts=4)
    # four prompts in one pass: less than four separate passes (one weight read, one overhead) ...
    assert four < 4 * one
    # ... and less than one prompt four times as long (attention is quadratic per prompt)
    assert four < cost.prefill_time(4 * 4096)


def test_numpy_integers_are_accepted():
    numpy = pytest.importorskip("numpy")
    assert model().step_time(numpy.int64(4), numpy.int32(2), numpy.float32(10.0)) == model().step_time(4, 2, 10.0)


def test_build_refuses_a_deployment_that_does_not_fit():
    with pytest.raises(SpectuneError, match="target_model.tensor_parallel_size: weights need 141.1 GB per GPU"):
        build_cost_model(H100, TargetModelSpec.model_validate({"preset": "llama-3.1-70b", "tensor_parallel_size": 1}))


def test_step_time_is_a_frozen_value():
    step = StepTime(drafting_s=1.0, verification_s=2.0, sampling_s=0.5, overhead_s=0.25)
    assert step.total_s == 3.75
    with pytest.raises(AttributeError):
        step.total_s = 0.0  # type: ignore[misc]


def test_default_drafters_cost_less_than_the_target_per_pass():
    for method in ("eagle", "eagle3", "mtp", "draft_model", "dflash"):
        cost = model(drafter=default_drafter(method, LLAMA_8B))
        assert 0 < cost.drafting_time(1, 1, 0) < 0.4 * cost.verification_time(1, 1, 0), method


# --- vLLM's own sampler -------------------------------------------------------------------------

H200 = HardwareConfig.model_validate("h200")
SAME_VOCAB_DRAFTER = DrafterSpec.model_validate("eagle-llama-3.1-8b")  # draft logits over all 128256 tokens


def vllm_sampler(rule: str = "standard", *, all_greedy: bool = False, hardware=H200) -> RooflineCostModel:
    built = build_cost_model(
        hardware,
        LLAMA_8B,
        SAME_VOCAB_DRAFTER,
        CostModelConfig(),
        sampler_work=SamplerWork(rejection_sample_method=rule, all_greedy=all_greedy),
    )
    assert isinstance(built, RooflineCostModel)
    return built


@pytest.mark.parametrize(
    ("rule", "draft", "all_greedy", "batch", "k", "microseconds"),
    [
        ("standard", False, True, 64, 7, 88),
        ("standard", False, False, 256, 3, 246),
        ("standard", True, False, 64, 7, 178),
        ("block", True, False, 64, 7, 280),
        ("standard", True, False, 256, 7, 619),
        ("block", True, False, 256, 7, 1034),
        ("block", False, False, 256, 7, 379),
        ("synthetic", False, False, 64, 3, 80),
    ],
)
def test_vllm_sampler_charges_vllms_measured_h200_times_at_table_points(
    rule, draft, all_greedy, batch, k, microseconds
):
    sampling = vllm_sampler(rule, all_greedy=all_greedy).sampling_time(batch, k, draft_probabilities=draft)
    assert sampling == pytest.approx(microseconds * 1e-6, rel=1e-9)


def test_block_verification_with_draft_logits_costs_more_than_standard_under_vllms_sampler():
    standard, block = vllm_sampler("standard"), vllm_sampler("block")
    for batch, k in ((64, 7), (256, 7), (128, 5), (512, 4)):
        ratio = block.sampling_time(batch, k, draft_probabilities=True) / standard.sampling_time(
            batch, k, draft_probabilities=True
        )
        assert 1.3 < ratio < 1.8, (batch, k, ratio)
    # spectune's own kernels are charged one read of the logits whatever the rule
    ours = model(hardware=H200, drafter=SAME_VOCAB_DRAFTER, sampler="spectune")
    assert ours.sampling_time(64, 7, draft_probabilities=True) < standard.sampling_time(64, 7, draft_probabilities=True)


def test_vllm_sampler_interpolates_in_batch_and_k_and_scales_with_vocabulary_and_bandwidth():
    cost = vllm_sampler("standard")
    at = [cost.sampling_time(b, 5) for b in (1, 32, 64, 160, 256, 512)]
    assert at == sorted(at)  # more requests, more time
    assert cost.sampling_time(160, 5) == pytest.approx(
        (cost.sampling_time(64, 5) + cost.sampling_time(256, 5)) / 2, rel=1e-9
    )  # linear between table points
    assert cost.sampling_time(64, 5) == pytest.approx((81 + 114) / 2 * 1e-6, rel=1e-9)  # between K = 3 and 7
    small_vocab = build_cost_model(
        H200, LLAMA_8B.model_copy(update={"vocab_size": 128256 // 2}), SAME_VOCAB_DRAFTER, CostModelConfig()
    )
    floor = 14e-6  # launch latency: does not scale with the bytes
    assert small_vocab.step_time(256, 3, 0).sampling_s - floor == pytest.approx((246e-6 - floor) / 2, rel=1e-9)
    on_h100 = vllm_sampler("standard", hardware=H100).sampling_time(256, 3)
    assert on_h100 - floor == pytest.approx((246e-6 - floor) * 4.8 / 3.35, rel=1e-9)


# --- MoE targets -------------------------------------------------------------------------------

QWEN3_MOE = TargetModelSpec.model_validate("qwen3-30b-a3b")


def test_expected_experts_touched_matches_the_uniform_routing_formula():
    assert expected_experts_touched(256, 8, 48) / 256 == pytest.approx(0.78, abs=0.005)  # the public 78% at 48 tokens
    assert expected_experts_touched(128, 8, 1) == pytest.approx(8)
    assert expected_experts_touched(128, 8, 10_000) == pytest.approx(128)
    assert expected_experts_touched(0, 0, 100) == 0.0


def test_moe_verification_reads_more_experts_as_its_tokens_grow():
    cost = model(target=QWEN3_MOE, drafter=default_drafter("eagle3", QWEN3_MOE))
    expert_s = QWEN3_MOE.expert_parameters * 2 / (3.35e12 * 0.8)
    one, eight = cost.verification_time(1, 0, 0), cost.verification_time(8, 0, 0)
    touched = expected_experts_touched(128, 8, 8) - 8
    assert eight - one == pytest.approx(touched * expert_s, rel=0.02)
    dense_one, dense_eight = model().verification_time(1, 0, 0), model().verification_time(8, 0, 0)
    assert dense_eight == pytest.approx(dense_one, rel=0.01)  # a dense target's pass is flat there


def test_moe_target_best_k_at_a_large_batch_differs_from_its_dense_twin():
    # the dense twin: the same shapes with one dense MLP as wide as the experts a token runs through
    dense_twin = QWEN3_MOE.model_copy(
        update={
            "num_experts": 0,
            "num_experts_per_tok": 0,
            "moe_intermediate_size": 0,
            "intermediate_size": 8 * 768,
            "num_parameters": QWEN3_MOE.active_parameters,
        }
    )
    drafter = default_drafter("eagle3", QWEN3_MOE)
    moe, dense = model(target=QWEN3_MOE, drafter=drafter), model(target=dense_twin, drafter=drafter)
    assert moe.step_time(1, 0, 512).total_s == pytest.approx(dense.step_time(1, 0, 512).total_s, rel=0.01)
    # batch 1: each extra draft token drags 8 more experts through memory, so the MoE drafts less
    assert best_k(moe, 1, 0.8, 512) < best_k(dense, 1, 0.8, 512)
    # batch 64: 64 tokens already touch 126 of the 128 experts, extra tokens are nearly free again,
    # and the pass is 4x dearer than the twin's: the MoE's best K rises with batch, the twin's falls
    assert expected_experts_touched(128, 8, 64) > 125
    assert best_k(moe, 64, 0.8, 512) > best_k(moe, 1, 0.8, 512)
    assert best_k(moe, 64, 0.8, 512) > best_k(dense, 64, 0.8, 512)
    assert best_k(dense, 64, 0.8, 512) < best_k(dense, 1, 0.8, 512)


# --- drafter tensor parallelism ----------------------------------------------------------------


def test_draft_tensor_parallel_size_changes_the_drafting_time():
    llama_70b = TargetModelSpec.model_validate("llama-3.1-70b")
    four = HardwareConfig.model_validate({"gpu": "h100-sxm", "num_gpus": 4})
    head = default_drafter("eagle", llama_70b)
    at_tp4 = model(hardware=four, target=llama_70b, drafter=head).drafting_time(8, 3, 1000)
    at_tp1 = model(
        hardware=four, target=llama_70b, drafter=head.model_copy(update={"tensor_parallel_size": 1})
    ).drafting_time(8, 3, 1000)
    assert at_tp1 != pytest.approx(at_tp4, rel=0.05)
    assert at_tp1 > at_tp4  # one GPU reads the whole head (its LM head alone is 1 GB) with no all-reduce to pay

"""Roofline step times: each forward pass costs the larger of its HBM traffic and its FLOPs, per GPU.

A forward pass over T = B·q new tokens (B requests, q tokens each, c tokens already cached) is

- linear layers: max(weight bytes / bandwidth, 2·params·T / FLOP/s) -- weights are read once per pass,
  so the pass is free in T until T reaches the ridge point (≈ 258 tokens on an H100 at the default
  fractions) and linear beyond; this is why the best K falls as the batch grows;
- MoE: a pass reads the routed experts its T tokens touch. With E experts, k per token and routing
  taken as uniform, it touches E·(1 − (1 − k/E)^T) of them in expectation (256 experts, top 8: 78% at
  T = 48); the FLOPs count the k active experts per token. Bytes grow with T long before the ridge
  point, so an MoE target's verification gets dearer with B·(K+1) where a dense one's is free, and
  its best K at a large batch differs from its dense twin's;
- attention: max(B·(c + q)·KV bytes / bandwidth, 4·layers·heads·head_dim·T·(c + (q+1)/2) / FLOP/s) --
  the KV cache is read once per pass however many of a request's tokens query it, so long contexts
  make every step dearer and speculation relatively cheaper (MagicDec);
- tensor parallelism: 2 all-reduces per layer, each latency + ring traffic 2·(tp−1)/tp·T·hidden·2 bytes;
- precision: 1-byte weights (FP8) multiply at the GPU's dense FP8 rate where it has FP8 tensor cores
  (vLLM's FP8 checkpoints run W8A8 GEMMs on Hopper and later; an A100 widens them to BF16 first, so the
  BF16 rate holds there); other widths (BF16, 4-bit) multiply at the BF16 rate. Attention stays BF16.
  A quantized target (under 2 bytes a weight) keeps its LM head in BF16, read and multiplied as such:
  llm-compressor's documented FP8 recipe quantizes Linear layers with ignore=["lm_head"], and DeepSeek-V3's
  inference/model.py builds its FP8 model's head in the default dtype.

Everything is per GPU of one replica: weights, heads and KV heads are split tp ways (KV heads are
replicated when tp exceeds them). One step is

    drafting     sequential: a pass over B·(K+1) tokens (the last step's tokens, padded as vLLM does),
                 then K−1 passes over B tokens; parallel: one pass over B·(K+1); lookup: B × host time;
                 plus draft_pass_overhead_s per neural pass
    verification one target pass over B·(K+1) tokens with logits at every position
    sampling     cost_model.sampler 'vllm': vLLM's measured rejection-sampler times (see
                 ``_vllm_sampler``); 'spectune': the sampler reads B·(K+1)·V fp32 logits once
                 (+ B·K·V_draft with draft probabilities): bytes / bandwidth
    overhead     overhead_s

The achievable fractions and overheads are nominal: they put an H100 SXM decoding Llama-3.1-8B at
batch 1 between the public 158 tok/s (SGLang docs) and 133 tok/s (vLLM PR #16937). Measure and use a
table when it matters.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from spectune.config import MAX_NUM_SPECULATIVE_TOKENS, CostModelConfig, DrafterSpec, HardwareConfig, TargetModelSpec
from spectune.cost._interface import (
    CostLimits,
    CostModel,
    StepPhases,
    StepTime,
    StepTimer,
    check_prompt_tokens,
    check_step_arguments,
    timer_by_batch_and_k,
)
from spectune.cost._vllm_sampler import SamplerWork, VllmSamplerTimes

__all__ = ["RooflineCostModel", "expected_experts_touched"]

_LOGIT_BYTES = 4  # the sampler reads fp32 logits
_ACTIVATION_BYTES = 2  # bf16 activations in all-reduces
_BF16_BYTES = 2.0


@dataclass(frozen=True)
class _PassShape:
    """One model's per-GPU cost coefficients for a forward pass."""

    weight_bytes: float  # read once per pass, LM head included
    body_flops_per_token: float  # every layer but the LM head
    head_flops_per_output: float  # LM head, per position that needs logits
    kv_bytes_per_token: float  # per cached token of one request
    attention_flops_per_query_key: float
    num_allreduces: int
    allreduce_bytes_per_token: float
    fp8_gemms: bool = False  # 1-byte weights: the body's linear layers run at the GPU's FP8 rate
    bf16_head: bool = False  # the LM head stays BF16 beside a quantized body (multiplies at the BF16 rate)
    num_experts: int = 0  # MoE: routed experts per layer (0 = dense)
    experts_per_token: int = 0
    expert_bytes: float = 0.0  # one routed expert over all MoE layers, read when any token touches it


def expected_experts_touched(num_experts: int, experts_per_token: int, tokens: float) -> float:
    """Expected distinct experts (of ``num_experts``, ``experts_per_token`` each) that ``tokens`` tokens
    touch under uniform routing: E·(1 − (1 − k/E)^T) (count; 0 for a dense model)."""
    if num_experts == 0 or tokens <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - experts_per_token / num_experts) ** tokens)


def _pass_shape(
    *,
    params_read: float,
    head_params: float,
    bytes_per_param: float,
    layers: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    hidden: int,
    kv_bytes_per_element: float,
    tp: int,
    head_bytes_per_param: float | None = None,
) -> _PassShape:
    kv_heads_per_gpu = math.ceil(kv_heads / tp)
    head_bytes = bytes_per_param if head_bytes_per_param is None else head_bytes_per_param
    body_params = max(params_read - head_params, 0.0)
    return _PassShape(
        weight_bytes=(body_params * bytes_per_param + min(head_params, params_read) * head_bytes) / tp,
        body_flops_per_token=2 * max(params_read - head_params, 0.0) / tp,
        head_flops_per_output=2 * head_params / tp,
        kv_bytes_per_token=2 * layers * kv_heads_per_gpu * head_dim * kv_bytes_per_element,
        attention_flops_per_query_key=4 * layers * heads * head_dim / tp,
        num_allreduces=2 * layers if tp > 1 else 0,
        allreduce_bytes_per_token=2 * (tp - 1) / tp * hidden * _ACTIVATION_BYTES,
        fp8_gemms=bytes_per_param == 1,
        bf16_head=head_bytes != bytes_per_param,
    )


def _target_shape(target: TargetModelSpec) -> _PassShape:
    tp = target.tensor_parallel_size
    shape = _pass_shape(
        params_read=target.parameters_read_per_pass,
        head_params=target.lm_head_parameters,
        bytes_per_param=target.bytes_per_parameter,
        layers=target.num_hidden_layers,
        heads=target.num_attention_heads,
        kv_heads=target.num_key_value_heads,
        head_dim=target.head_dim,
        hidden=target.hidden_size,
        kv_bytes_per_element=target.kv_cache_bytes_per_element,
        tp=tp,
        head_bytes_per_param=_BF16_BYTES if target.bytes_per_parameter < _BF16_BYTES else None,
    )
    if not target.is_moe:
        return shape
    active_experts = target.num_experts_per_tok * target.expert_parameters
    return replace(
        shape,
        body_flops_per_token=shape.body_flops_per_token + 2 * active_experts / tp,
        num_experts=target.num_experts,
        experts_per_token=target.num_experts_per_tok,
        expert_bytes=target.expert_parameters * target.bytes_per_parameter / tp,
    )


def _drafter_shape(drafter: DrafterSpec, tp: int) -> _PassShape:
    return _pass_shape(
        params_read=drafter.num_parameters,
        head_params=drafter.vocab_size * drafter.hidden_size,
        bytes_per_param=drafter.bytes_per_parameter,
        layers=drafter.num_hidden_layers,
        heads=drafter.num_attention_heads,
        kv_heads=drafter.num_key_value_heads,
        head_dim=drafter.head_dim,
        hidden=drafter.hidden_size,
        kv_bytes_per_element=drafter.kv_cache_bytes_per_element,
        tp=tp,
    )


def _no_time(context: float) -> float:
    return 0.0


class _Pass:
    """One forward pass over ``requests`` × ``tokens_each`` new tokens with logits at ``outputs`` positions,
    as a function of the context already cached: what does not depend on it is computed once (a
    simulation asks for the same few passes every step, at a new mean context)."""

    __slots__ = (
        "attention_flops_per_query_key",
        "bandwidth",
        "communication",
        "flops",
        "keys_past_context",
        "kv_bytes_per_token",
        "linear",
        "requests",
        "tokens",
        "tokens_each",
    )

    def __init__(
        self, model: RooflineCostModel, shape: _PassShape, requests: int, tokens_each: float, outputs: int
    ) -> None:
        tokens = requests * tokens_each
        body_flops = model._fp8_flops if shape.fp8_gemms else model._flops
        body_work, head_work = tokens * shape.body_flops_per_token, outputs * shape.head_flops_per_output
        if shape.bf16_head and body_flops != model._flops:
            compute = body_work / body_flops + head_work / model._flops
        else:  # one rate for all: the sum first, so that unquantized targets keep their numbers bit for bit
            compute = (body_work + head_work) / body_flops
        self.linear = max((shape.weight_bytes + _routed_expert_bytes(shape, tokens)) / model._bandwidth, compute)
        self.communication = shape.num_allreduces * (
            model._allreduce_latency_s + tokens * shape.allreduce_bytes_per_token / model._link
        )
        self.requests, self.tokens_each, self.tokens = requests, tokens_each, tokens
        self.keys_past_context = (tokens_each + 1) / 2  # causal among the new tokens
        self.kv_bytes_per_token, self.bandwidth = shape.kv_bytes_per_token, model._bandwidth
        self.attention_flops_per_query_key, self.flops = shape.attention_flops_per_query_key, model._flops

    def seconds(self, context: float) -> float:
        attention = max(
            self.requests * (context + self.tokens_each) * self.kv_bytes_per_token / self.bandwidth,
            self.tokens * (context + self.keys_past_context) * self.attention_flops_per_query_key / self.flops,
        )
        return self.linear + attention + self.communication


def _routed_expert_bytes(shape: _PassShape, tokens: float) -> float:
    """MoE: bytes of the distinct routed experts a pass of ``tokens`` tokens reads (0 for a dense model)."""
    return expected_experts_touched(shape.num_experts, shape.experts_per_token, tokens) * shape.expert_bytes


class RooflineCostModel(CostModel):
    """Step times from bandwidth, FLOP/s and model shapes (see the module docstring for the formulas)."""

    def __init__(
        self,
        hardware: HardwareConfig,
        target_model: TargetModelSpec,
        drafter: DrafterSpec | None,
        config: CostModelConfig,
        *,
        sampler_work: SamplerWork | None = None,
    ) -> None:
        self._bandwidth = hardware.gpu.effective_bandwidth_bytes_per_s
        self._flops = hardware.gpu.effective_flops
        self._fp8_flops = hardware.gpu.effective_fp8_flops
        self._link = hardware.gpu.interconnect_bandwidth_bytes_per_s
        self._allreduce_latency_s = hardware.allreduce_latency_s
        self._target = _target_shape(target_model)
        self._vocab_size = target_model.vocab_size
        self._drafter = drafter
        self._draft: _PassShape | None = None
        if drafter is not None and drafter.drafting != "lookup":
            self._draft = _drafter_shape(drafter, drafter.tensor_parallel_size or target_model.tensor_parallel_size)
        self._overhead_s = config.overhead_s
        self._draft_pass_overhead_s = config.draft_pass_overhead_s
        self._vllm_sampler: VllmSamplerTimes | None = None
        if config.sampler == "vllm":
            self._vllm_sampler = VllmSamplerTimes(
                sampler_work or SamplerWork(),
                vocab_size=target_model.vocab_size,
                hbm_bandwidth_bytes_per_s=hardware.gpu.hbm_bandwidth_bytes_per_s,
            )

    @property
    def limits(self) -> CostLimits:
        return CostLimits(
            max_batch_size=None, min_num_speculative_tokens=0, max_num_speculative_tokens=MAX_NUM_SPECULATIVE_TOKENS
        )

    def _pass_time(self, shape: _PassShape, requests: int, tokens_each: float, context: float, outputs: int) -> float:
        """Seconds for one forward pass of ``requests`` × ``tokens_each`` new tokens over ``context`` cached ones."""
        return _Pass(self, shape, requests, tokens_each, outputs).seconds(context)

    def verification_time(self, batch_size: int, num_speculative_tokens: int, context_tokens: float) -> float:
        """One target pass over B·(K+1) tokens with logits at every position (seconds)."""
        return self._verification_pass(batch_size, num_speculative_tokens).seconds(context_tokens)

    def _verification_pass(self, batch_size: int, num_speculative_tokens: int) -> _Pass:
        tokens_each = num_speculative_tokens + 1
        return _Pass(self, self._target, batch_size, tokens_each, batch_size * tokens_each)

    def drafting_time(self, batch_size: int, num_speculative_tokens: int, context_tokens: float) -> float:
        """Proposing K tokens for each of ``batch_size`` requests (seconds; 0 when K = 0)."""
        return self._drafting(batch_size, num_speculative_tokens)(context_tokens)

    def _drafting(self, batch_size: int, num_speculative_tokens: int) -> Callable[[float], float]:
        """``drafting_time`` at (batch size, K) as a function of the context."""
        k = num_speculative_tokens
        if k == 0:
            return _no_time
        if self._drafter is None:
            raise ValueError(f"num_speculative_tokens {k} needs a drafter; this cost model was built without one")
        if self._draft is None:  # lookup: CPU (or a tiny GPU kernel), no neural pass
            host_s = batch_size * self._drafter.host_time_per_request_s
            return lambda context: host_s
        pass_overhead_s = self._draft_pass_overhead_s
        if self._drafter.drafting == "parallel":
            one = _Pass(self, self._draft, batch_size, k + 1, batch_size * k).seconds
            return lambda context: one(context) + pass_overhead_s
        first = _Pass(self, self._draft, batch_size, k + 1, batch_size).seconds
        later = _Pass(self, self._draft, batch_size, 1, batch_size).seconds
        overheads_s = k * pass_overhead_s
        return lambda context: first(context) + (k - 1) * later(context) + overheads_s

    def sampling_time(
        self, batch_size: int, num_speculative_tokens: int, *, draft_probabilities: bool = False
    ) -> float:
        """The rejection sampler's time (seconds): vLLM's measured sampler, or one read of the fp32 logits
        the sampler needs (cost_model.sampler: spectune)."""
        with_draft = draft_probabilities and self._drafter is not None and self._draft is not None
        if self._vllm_sampler is not None:
            return self._vllm_sampler.time_s(
                batch_size,
                num_speculative_tokens,
                draft_probabilities=with_draft,
                draft_vocab_size=self._drafter.vocab_size if with_draft and self._drafter is not None else 0,
            )
        rows = batch_size * (num_speculative_tokens + 1) * self._vocab_size
        if draft_probabilities and self._drafter is not None and self._draft is not None:
            rows += batch_size * num_speculative_tokens * self._drafter.vocab_size
        return rows * _LOGIT_BYTES / self._bandwidth

    def step_time(
        self, batch_size: int, num_speculative_tokens: int, context_tokens: float, *, draft_probabilities: bool = False
    ) -> StepTime:
        check_step_arguments(batch_size, num_speculative_tokens, context_tokens)
        return StepTime(*self._step(batch_size, num_speculative_tokens, draft_probabilities)(context_tokens))

    def step_timer(self, *, draft_probabilities: bool = False) -> StepTimer:
        return timer_by_batch_and_k(lambda b, k: self._step(b, k, draft_probabilities))

    def _step(
        self, batch_size: int, num_speculative_tokens: int, draft_probabilities: bool
    ) -> Callable[[float], StepPhases]:
        """A step's phases at (batch size, K) as a function of the context: only attention depends on it."""
        drafting = self._drafting(batch_size, num_speculative_tokens)
        verification = self._verification_pass(batch_size, num_speculative_tokens).seconds
        sampling_s = self.sampling_time(batch_size, num_speculative_tokens, draft_probabilities=draft_probabilities)
        overhead_s = self._overhead_s
        return lambda context: (drafting(context), verification(context), sampling_s, overhead_s)

    def prefill_time(self, num_prompt_tokens: int, *, num_prompts: int = 1) -> float:
        check_prompt_tokens(num_prompt_tokens, num_prompts)
        tokens_each = num_prompt_tokens / num_prompts  # attention is quadratic per prompt, not over their sum
        seconds = self._pass_time(self._target, num_prompts, tokens_each, 0.0, num_prompts) + self._overhead_s
        if self._draft is not None:
            draft = self._pass_time(self._draft, num_prompts, tokens_each, 0.0, num_prompts)
            seconds += draft + self._draft_pass_overhead_s
        return seconds

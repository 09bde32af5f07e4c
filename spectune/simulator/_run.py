"""``simulate``: build the pieces a simulation document asks for, run the loop, summarise."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from spectune.config import AcceptanceRates, SimulationDocument, kv_cache_capacity_tokens
from spectune.cost import CostModel, SamplerWork, build_cost_model
from spectune.simulator._backend import resolve_device, select_rejection_sample
from spectune.simulator._kv import BLOCK_SIZE_TOKENS, KvCacheCapacity, drafting_slots
from spectune.simulator._loop import LoopInputs, LoopTrace, StepVerifier, run_serving_loop
from spectune.simulator._metrics import KvCacheReport, SimulationResult, summarize
from spectune.simulator._replicas import run_replicas
from spectune.workload import LogitSynthesizer, RequestTable, SpeculationInputs, generate_requests

__all__ = ["simulate"]

Progress = Callable[[int, int], None]


def simulate(document: SimulationDocument, *, baseline: bool | None = None, progress: Progress | None = None) -> SimulationResult:
    """Simulate ``document``: its speculative config on its deployment and workload.

    ``baseline`` (default: ``document.simulation.baseline``) also simulates the same requests without
    speculation, for ``speedup_vs_no_spec``. ``progress(finished requests, total)`` is called per step.
    Same document, same seed: the same numbers.
    """
    device = resolve_device(document.simulation.device)
    previous_threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(document.simulation.cpu_threads)  # restored below: no lasting side effect
    try:
        return _simulate(document, device, baseline=baseline, progress=progress)
    finally:
        torch.set_num_threads(previous_threads)


def _simulate(document: SimulationDocument, device: torch.device, *, baseline: bool | None, progress: Progress | None) -> SimulationResult:
    started = time.perf_counter()
    requests = generate_requests(document.workload, seed=document.seed)
    inputs = _loop_inputs(document, requests)
    spec = document.speculative
    drafter = document.effective_drafter()
    work = _sampler_work(document)
    cost = build_cost_model(
        document.hardware, document.target_model, drafter, document.cost_model,
        num_speculative_tokens=spec.num_speculative_tokens, sampler_work=work,
    )  # fmt: skip
    verify = _Verifier(document, requests, device)
    replicas = document.num_replicas
    # vLLM turns dynamic speculation off under data parallelism: every batch gets the maximum K
    k_for_batch = spec.num_speculative_tokens_for_batch if replicas == 1 else lambda batch: spec.num_speculative_tokens
    kv_tokens = kv_cache_capacity_tokens(document.hardware, document.target_model, drafter)
    pools: list[KvCacheCapacity] = []

    def slots(k: int) -> int:
        return drafting_slots(spec.method, k, parallel_drafting=drafter.drafting == "parallel")

    def run_one(part: LoopInputs, verify_part: StepVerifier | None, on_step: Progress | None) -> LoopTrace:
        pools.append(KvCacheCapacity(kv_tokens // BLOCK_SIZE_TOKENS, len(part.output_tokens)))
        return run_serving_loop(
            part,
            k_for_batch=k_for_batch,
            verify=verify_part,
            step_time=_step_time_fn(cost, draft_probabilities=spec.draft_sample_method == "probabilistic"),
            prefill_time=_prefill_time_fn(cost),
            max_steps=document.simulation.max_steps,
            on_step=on_step,
            kv=pools[-1],
            lookahead_slots=slots,
            lookup_counts_prefills=document.simulation.k_lookup_counts_prefills,
        )

    trace = run_replicas(inputs, replicas, verify, run_one, progress)
    kv_report = KvCacheReport(
        capacity_tokens=kv_tokens,
        peak_usage=max(pool.peak_blocks_used / pool.num_blocks for pool in pools),
        num_preemptions=sum(pool.num_preemptions for pool in pools),
    )
    baseline_trace: LoopTrace | None = None
    if document.simulation.baseline if baseline is None else baseline:
        plain = build_cost_model(document.hardware, document.target_model, None, document.cost_model, sampler_work=work)
        plain_kv_tokens = kv_cache_capacity_tokens(document.hardware, document.target_model, None)

        def run_plain(part: LoopInputs, _: StepVerifier | None, on_step: Progress | None) -> LoopTrace:
            return run_serving_loop(
                part,
                k_for_batch=lambda batch: 0,
                verify=None,
                step_time=_step_time_fn(plain, draft_probabilities=False),
                prefill_time=_prefill_time_fn(plain),
                max_steps=document.simulation.max_steps,
                kv=KvCacheCapacity(plain_kv_tokens // BLOCK_SIZE_TOKENS, len(part.output_tokens)),
            )

        baseline_trace = run_replicas(inputs, replicas, None, run_plain, None)
    return summarize(
        trace,
        baseline=baseline_trace,
        wall_time_s=time.perf_counter() - started,
        kernel_wall_time_s=verify.kernel_s,
        synthesis_wall_time_s=verify.synthesis_s,
        num_replicas=replicas,
        kv_cache=kv_report,
    )


def _sampler_work(document: SimulationDocument) -> SamplerWork:
    """What vLLM's rejection sampler does each step of ``document``: its rule, and whether all requests are greedy."""
    spec = document.speculative
    rule = spec.rejection_sample_method
    if rule == "block" and spec.method in ("ngram", "ngram_gpu", "suffix"):
        rule = "standard"  # no draft distribution: vLLM verifies with the standard rule
    temperatures, _ = document.workload.temperature_mix
    return SamplerWork(rejection_sample_method=rule, all_greedy=all(t == 0 for t in temperatures))


def _loop_inputs(document: SimulationDocument, requests: RequestTable) -> LoopInputs:
    workload = document.workload
    return LoopInputs(
        arrival_s=requests.arrival_s,
        prompt_tokens=requests.prompt_tokens,
        output_tokens=requests.output_tokens,
        closed_loop_concurrency=workload.concurrency,
        max_running_requests=workload.max_num_seqs,
        max_num_batched_tokens=workload.max_num_batched_tokens,
    )


def _step_time_fn(cost: CostModel, *, draft_probabilities: bool) -> Callable[[int, int, float], tuple[float, float, float, float]]:
    def step_time(batch_size: int, num_speculative_tokens: int, context_tokens: float) -> tuple[float, float, float, float]:
        t = cost.step_time(batch_size, num_speculative_tokens, context_tokens, draft_probabilities=draft_probabilities)
        return t.drafting_s, t.verification_s, t.sampling_s, t.overhead_s

    return step_time


def _prefill_time_fn(cost: CostModel) -> Callable[[int, int, bool], float]:
    """Prefill rides in the same forward pass as the step's decode tokens (chunked prefill).

    When requests are decoding, the pass already reads the weights, so a prefill adds only what it costs
    beyond one token's pass; with nothing decoding it pays in full.
    """
    single_token = cost.prefill_time(1)

    def prefill_time(num_prompt_tokens: int, num_prompts: int, shares_pass: bool) -> float:
        full = cost.prefill_time(num_prompt_tokens, num_prompts=num_prompts)
        return max(0.0, full - single_token) if shares_pass else full

    return prefill_time


class _Verifier:
    """Draft + verify for one step: synthesised logits through the rejection kernel.

    Each request's kernel seed is derived from (simulation seed, request, its step count), so a
    request's acceptance draws do not depend on what else is in the batch.
    """

    def __init__(self, document: SimulationDocument, requests: RequestTable, device: torch.device) -> None:
        spec = document.speculative
        self.device = device
        self.backend, self.rejection_sample = select_rejection_sample(document.simulation.kernel_backend, self.device)
        self.method = spec.rejection_sample_method
        self.k_max = spec.num_speculative_tokens
        self.document = document
        self.requests = requests
        self.synthetic_rates: torch.Tensor | None = None
        self.acceptance = document.acceptance
        if self.method == "synthetic":
            rates = spec.synthetic_conditional_rates() or []
            self.synthetic_rates = torch.tensor(rates, dtype=torch.float32, device=self.device)
        elif self.acceptance is None:  # the document's own rule forbids this
            raise ValueError("document.acceptance is required unless the method is synthetic")
        self._synthesizers: dict[int, tuple[LogitSynthesizer, tuple[tuple[int, int], SpeculationInputs] | None]] = {}
        self.temperature_index = torch.from_numpy(requests.temperature_index).to(self.device)
        rng = np.random.default_rng(document.seed)
        self.request_seeds = rng.integers(0, 2**62, size=len(requests), dtype=np.int64)
        self.generator = torch.Generator(device=self.device).manual_seed(document.seed)
        self.synthesis_s = 0.0  # wall time generating logits
        self.kernel_s = 0.0  # wall time in rejection sampling (synchronised on CUDA)

    def _rates_for_batch(self, batch_size: int) -> tuple[int, list[float], str]:
        """(bin index or -1 for the pooled rates, conditional rates, measured_with) at this batch size."""
        acceptance = self.acceptance
        if self.synthetic_rates is not None or acceptance is None:
            return -1, self.synthetic_rates.tolist() if self.synthetic_rates is not None else [], "greedy"
        chosen: AcceptanceRates = acceptance.rates_for_batch(batch_size)
        index = acceptance.bins.index(chosen) if acceptance.bins and chosen is not acceptance else -1
        return index, chosen.conditional(self.k_max), acceptance.measured_with

    def _synthesizer(self, batch_size: int) -> tuple[int, LogitSynthesizer]:
        """The logit synthesizer of the acceptance bin the running batch falls in, built once per bin."""
        index, rates, measured_with = self._rates_for_batch(batch_size)
        if index not in self._synthesizers:
            synthesizer = LogitSynthesizer(
                rates,
                self.requests.temperatures,
                vocab_size=self.document.workload.vocab_size,
                draft_sample_method=self.document.speculative.draft_sample_method,
                measured_with=measured_with,
                device=self.device,
                bank_rows=self.document.simulation.bank_rows,
            )
            self._synthesizers[index] = (synthesizer, None)
        return index, self._synthesizers[index][0]

    def __call__(self, request_ids: np.ndarray, steps_done: np.ndarray, num_speculative_tokens: int) -> np.ndarray:
        started = time.perf_counter()
        ids = torch.from_numpy(request_ids).to(self.device)
        key = (len(request_ids), num_speculative_tokens)
        index, synthesizer = self._synthesizer(len(request_ids))  # the bin of this step's running batch
        buffer = self._synthesizers[index][1]
        step = synthesizer.generate(
            self.temperature_index.index_select(0, ids),
            self.generator,
            num_speculative_tokens=num_speculative_tokens,
            out=buffer[1] if buffer is not None and buffer[0] == key else None,
        )
        self._synthesizers[index] = (synthesizer, (key, step))
        seeds = _kernel_seeds(self.request_seeds[request_ids], steps_done).to(self.device)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        generated = time.perf_counter()
        synthetic = self.synthetic_rates[:num_speculative_tokens] if self.synthetic_rates is not None else None
        _, num_tokens = self.rejection_sample(
            step.target_logits,
            step.draft_tokens,
            draft_logits=step.draft_logits,
            temperature=step.temperature,
            seed=seeds,
            method=self.method,
            synthetic_conditional_rates=synthetic,
        )
        emitted = num_tokens.to("cpu", torch.int64).numpy()  # synchronises
        self.synthesis_s += generated - started
        self.kernel_s += time.perf_counter() - generated
        return emitted


def _kernel_seeds(request_seeds: np.ndarray, steps_done: np.ndarray) -> torch.Tensor:
    """int64 [B]: a distinct kernel seed per (request, step), mixed so nearby steps share no stream."""
    with np.errstate(over="ignore"):
        mixed = request_seeds.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + steps_done.astype(np.uint64) * np.uint64(
            0xBF58476D1CE4E5B9
        )
        mixed ^= mixed >> np.uint64(31)
    return torch.from_numpy((mixed >> np.uint64(1)).astype(np.int64))

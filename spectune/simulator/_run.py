"""``simulate``: build the pieces a simulation document asks for, run the loop, summarise."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from spectune.config import SimulationDocument
from spectune.cost import CostModel, build_cost_model
from spectune.simulator._backend import resolve_device, select_rejection_sample
from spectune.simulator._loop import LoopInputs, LoopTrace, run_serving_loop
from spectune.simulator._metrics import SimulationResult, summarize
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
    cost = build_cost_model(
        document.hardware, document.target_model, document.effective_drafter(), document.cost_model,
        num_speculative_tokens=spec.num_speculative_tokens,
    )  # fmt: skip
    verify = _Verifier(document, requests, device)
    trace = run_serving_loop(
        inputs,
        k_for_batch=spec.num_speculative_tokens_for_batch,
        verify=verify,
        step_time=_step_time_fn(cost, draft_probabilities=spec.draft_sample_method == "probabilistic"),
        prefill_time=_prefill_time_fn(cost),
        max_steps=document.simulation.max_steps,
        on_step=progress,
        lookup_counts_prefills=document.simulation.k_lookup_counts_prefills,
    )
    baseline_trace: LoopTrace | None = None
    if document.simulation.baseline if baseline is None else baseline:
        plain = build_cost_model(document.hardware, document.target_model, None, document.cost_model)
        baseline_trace = run_serving_loop(
            inputs,
            k_for_batch=lambda batch: 0,
            verify=None,
            step_time=_step_time_fn(plain, draft_probabilities=False),
            prefill_time=_prefill_time_fn(plain),
            max_steps=document.simulation.max_steps,
        )
    return summarize(
        trace,
        baseline=baseline_trace,
        wall_time_s=time.perf_counter() - started,
        kernel_wall_time_s=verify.kernel_s,
        synthesis_wall_time_s=verify.synthesis_s,
    )


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
        k_max = spec.num_speculative_tokens
        if self.method == "synthetic":
            rates = spec.synthetic_conditional_rates() or []
            measured_with = "greedy"
            self.synthetic_rates: torch.Tensor | None = torch.tensor(rates, dtype=torch.float32, device=self.device)
        else:
            if document.acceptance is None:  # the document's own rule forbids this
                raise ValueError("document.acceptance is required unless the method is synthetic")
            batch = document.workload.concurrency or document.workload.max_num_seqs
            rates = document.acceptance.rates_for_batch(batch).conditional(k_max)
            measured_with = document.acceptance.measured_with
            self.synthetic_rates = None
        self.synthesizer = LogitSynthesizer(
            rates,
            requests.temperatures,
            vocab_size=document.workload.vocab_size,
            draft_sample_method=spec.draft_sample_method,
            measured_with=measured_with,
            device=self.device,
            bank_rows=document.simulation.bank_rows,
        )
        self.temperature_index = torch.from_numpy(requests.temperature_index).to(self.device)
        rng = np.random.default_rng(document.seed)
        self.request_seeds = rng.integers(0, 2**62, size=len(requests), dtype=np.int64)
        self.generator = torch.Generator(device=self.device).manual_seed(document.seed)
        self._buffer: tuple[tuple[int, int], SpeculationInputs] | None = None  # last step's tensors, reused
        self.synthesis_s = 0.0  # wall time generating logits
        self.kernel_s = 0.0  # wall time in rejection sampling (synchronised on CUDA)

    def __call__(self, request_ids: np.ndarray, steps_done: np.ndarray, num_speculative_tokens: int) -> np.ndarray:
        started = time.perf_counter()
        ids = torch.from_numpy(request_ids).to(self.device)
        key = (len(request_ids), num_speculative_tokens)
        step = self.synthesizer.generate(
            self.temperature_index.index_select(0, ids),
            self.generator,
            num_speculative_tokens=num_speculative_tokens,
            out=self._buffer[1] if self._buffer is not None and self._buffer[0] == key else None,
        )
        self._buffer = (key, step)
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

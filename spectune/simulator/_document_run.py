"""One simulation document made ready for an engine: its requests, cost model, KV pools, runtime
policy and logit synthesizers, and a serving loop per data-parallel replica (``DocumentRun``); and,
once the engine has run, its summary, with the baseline (the same document without speculation)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

import numpy as np
import torch

from spectune.config import AcceptanceRates, SimulationDocument, kv_cache_capacity_tokens
from spectune.cost import CostModel, SamplerWork, build_cost_model
from spectune.simulator._drive import EngineMember, NoVerifier, drive
from spectune.simulator._groups import verifies as document_verifies
from spectune.simulator._kv import BLOCK_SIZE_TOKENS, KvCacheCapacity, drafting_slots
from spectune.simulator._loop import LoopInputs, LoopTrace, serving_loop
from spectune.simulator._metrics import KvCacheReport, SimulationResult, summarize
from spectune.simulator._policy import StepPolicy
from spectune.simulator._policy_setup import drafting_depth, runtime_policy
from spectune.simulator._replicas import merge_traces, split_load
from spectune.workload import LogitSynthesizer, RequestTable, generate_requests

__all__ = ["DocumentRun", "Progress", "plain_decoding"]

Progress = Callable[[int, int], None]


class DocumentRun:
    """One document in an engine: its members (a serving loop per data-parallel replica), cost model,
    KV pools and logit synthesizers (one per acceptance bin a running batch falls in, built on first use)."""

    def __init__(self, document: SimulationDocument, device: torch.device, progress: Progress | None) -> None:
        started = time.perf_counter()
        self.document, self.device = document, device
        self.requests = requests = generate_requests(document.workload, seed=document.seed)
        self.inputs = inputs = _loop_inputs(document, requests)
        spec = document.speculative  # None: plain decoding (no drafter, K = 0 at every batch size)
        drafter = document.effective_drafter()
        max_k = self.max_k = drafting_depth(document)
        self.work = _sampler_work(document)
        cost = build_cost_model(
            document.hardware, document.target_model, drafter, document.cost_model,
            num_speculative_tokens=max_k, sampler_work=self.work,
        )  # fmt: skip
        self.replicas = replicas = document.num_replicas
        k_for_batch: Callable[[int], int]
        if spec is None:
            k_for_batch = lambda batch: 0  # noqa: E731
        elif replicas == 1:
            k_for_batch = spec.num_speculative_tokens_for_batch
        else:  # vLLM turns dynamic speculation off under data parallelism: every batch gets the maximum K
            k_for_batch = lambda batch: max_k  # noqa: E731
        self.kv_tokens = kv_tokens = kv_cache_capacity_tokens(document.hardware, document.target_model, drafter)
        self.pools: list[KvCacheCapacity] = []
        self.synthetic_rates = (
            spec.synthetic_conditional_rates()
            if spec is not None and spec.rejection_sample_method == "synthetic"
            else None
        )
        if spec is not None and self.synthetic_rates is None and document.acceptance is None:  # its rule forbids this
            raise ValueError("document.acceptance is required unless the method is synthetic")
        self._synthesizers: dict[int, LogitSynthesizer] = {}  # by acceptance bin
        self._by_batch_size: dict[int, LogitSynthesizer] = {}
        verifies = document_verifies(document)
        temperature_index = torch.from_numpy(requests.temperature_index).to(device)
        rng = np.random.default_rng(document.seed)
        request_seeds = rng.integers(0, 2**62, size=len(requests), dtype=np.int64)
        generator = torch.Generator(device=device).manual_seed(document.seed)

        def slots(k: int) -> int:
            parallel = drafter is not None and drafter.drafting == "parallel"
            return drafting_slots(spec.method if spec is not None else None, k, parallel_drafting=parallel)

        draft_probabilities = spec is not None and spec.draft_sample_method == "probabilistic"
        parts = [(None, inputs)] if replicas == 1 else split_load(inputs, replicas)
        self.part_ids: list[np.ndarray | None] = []
        self.members: list[EngineMember] = []
        step_timer = cost.step_timer(draft_probabilities=draft_probabilities)
        for index, (ids, part) in enumerate(parts):
            self.pools.append(KvCacheCapacity(kv_tokens // BLOCK_SIZE_TOKENS, len(part.output_tokens)))
            policy: StepPolicy | None = runtime_policy(
                document,
                k_for_batch,
                step_timer,
                part,
                self._conditional_rates,
                synthesizer=self._synthesizer,
                temperature_index=requests.temperature_index if ids is None else requests.temperature_index[ids],
                seed=document.seed + index,
                limits=cost.limits,
            )
            loop = serving_loop(
                part,
                k_for_batch=k_for_batch,
                verifies=verifies,
                step_time=step_timer,
                prefill_time=_prefill_time_fn(cost),
                max_steps=document.simulation.max_steps,
                on_step=progress if replicas == 1 else None,
                kv=self.pools[-1],
                lookahead_slots=slots,
                lookup_counts_prefills=document.simulation.k_lookup_counts_prefills,
                policy=policy,
            )
            self.part_ids.append(ids)
            self.members.append(EngineMember(
                loop=loop, synthesizer=self._synthesizer if verifies else None, temperature_index=temperature_index,
                request_seeds=request_seeds, generator=generator,
                concurrency=part.closed_loop_concurrency or part.max_running_requests,
                num_drafts=max_k, global_ids=ids, output_tokens=requests.output_tokens,
            ))  # fmt: skip
        self.setup_s = time.perf_counter() - started

    def _synthesizer(self, batch_size: int) -> LogitSynthesizer:
        """The logit synthesizer of the acceptance bin a running batch of ``batch_size`` falls in (asked
        every verifying step: the answer is kept per batch size)."""
        known = self._by_batch_size.get(batch_size)
        if known is None:
            known = self._by_batch_size[batch_size] = self._bin_synthesizer(batch_size)
        return known

    def _bin_synthesizer(self, batch_size: int) -> LogitSynthesizer:
        document, spec = self.document, self.document.speculative
        assert spec is not None  # only a document that verifies draws logits
        measured_with: Literal["greedy", "probabilistic"] = "greedy"
        if self.synthetic_rates is not None:
            index, rates = -1, self._conditional_rates(batch_size).tolist()
        else:
            acceptance = document.acceptance
            assert acceptance is not None
            chosen: AcceptanceRates = acceptance.rates_for_batch(batch_size)
            # by position: the chosen bin may be a copy under the source's extrapolation rule
            found = acceptance.bin_index(batch_size)
            index = -1 if found is None else found
            rates, measured_with = chosen.conditional(self.max_k), acceptance.measured_with
        if index not in self._synthesizers:
            self._synthesizers[index] = LogitSynthesizer(
                rates,
                self.requests.temperatures,
                vocab_size=document.workload.vocab_size,
                draft_sample_method=spec.draft_sample_method,
                measured_with=measured_with,
                device=self.device,
                bank_rows=document.simulation.bank_rows,
            )
        return self._synthesizers[index]

    def _conditional_rates(self, batch_size: int) -> np.ndarray:
        """Conditional acceptance per position (float64 [max K]) at ``batch_size`` running requests."""
        if self.synthetic_rates is not None:
            rates = list(self.synthetic_rates)
            rates += rates[-1:] * (self.max_k - len(rates))
            return np.asarray(rates[: self.max_k], dtype=np.float64)
        acceptance = self.document.acceptance
        assert acceptance is not None
        return np.asarray(acceptance.rates_for_batch(batch_size).conditional(self.max_k), dtype=np.float64)

    def trace(self) -> LoopTrace:
        """What the document's loops served: one replica's trace, or the replicas' merged."""
        traces = [m.trace for m in self.members]
        assert all(t is not None for t in traces)
        if self.replicas == 1:
            trace = traces[0]
        else:
            trace = merge_traces([(ids, t) for ids, t in zip(self.part_ids, traces)], len(self.inputs.output_tokens))  # type: ignore[misc]
        assert trace is not None
        return trace

    def summary(self, baseline: bool | None, wall_time_s: float) -> SimulationResult:
        document = self.document
        trace = self.trace()
        kv_report = KvCacheReport(
            capacity_tokens=self.kv_tokens,
            peak_usage=max(pool.peak_blocks_used / pool.num_blocks for pool in self.pools),
            num_preemptions=sum(pool.num_preemptions for pool in self.pools),
        )
        baseline_trace: LoopTrace | None = None
        wanted = document.simulation.baseline if baseline is None else baseline
        if wanted and document.speculative is None:
            baseline_trace = trace  # plain decoding is its own baseline
        elif wanted:  # the same deployment and requests with speculation off: the K = 0 path
            plain = DocumentRun(plain_decoding(document), self.device, None)
            drive(plain.members, NoVerifier())
            baseline_trace = plain.trace()
        return summarize(
            trace,
            baseline=baseline_trace,
            wall_time_s=wall_time_s,
            kernel_wall_time_s=sum(m.kernel_s for m in self.members),
            synthesis_wall_time_s=sum(m.synthesis_s for m in self.members),
            num_replicas=self.replicas,
            kv_cache=kv_report,
        )


def plain_decoding(document: SimulationDocument) -> SimulationDocument:
    """``document`` served without speculation (``speculative: null``): its baseline."""
    return document.model_copy(update={"speculative": None, "acceptance": None, "drafter": None})


def _sampler_work(document: SimulationDocument) -> SamplerWork:
    """What vLLM's rejection sampler does each step of ``document``: its rule, and whether all requests are greedy."""
    spec = document.speculative
    rule = spec.rejection_sample_method if spec is not None else "standard"  # plain decoding: K = 0, one column
    if spec is not None and rule == "block" and spec.method in ("ngram", "ngram_gpu", "suffix"):
        rule = "standard"  # no draft distribution: vLLM verifies with the standard rule
    if rule == "fly":  # a simulation document refuses FLy (spectune.config.simulation_refusals)
        raise ValueError("FLy verification is not simulated")
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

"""``simulate`` / ``simulate_many``: build the pieces simulation documents ask for, run their loops (in
lockstep where they can share a call), summarise."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import torch

from spectune.config import AcceptanceRates, SimulationDocument, kv_cache_capacity_tokens
from spectune.cost import CostModel, SamplerWork, build_cost_model
from spectune.kernels import DEFAULT_TILE
from spectune.simulator._backend import backend_on, on_device, resolve_backend, resolve_device
from spectune.simulator._drive import EngineMember, NoVerifier, drive
from spectune.simulator._kernel_call import slot_rows
from spectune.simulator._kv import BLOCK_SIZE_TOKENS, KvCacheCapacity, drafting_slots
from spectune.simulator._loop import LoopInputs, LoopTrace, serving_loop
from spectune.simulator._metrics import KvCacheReport, SimulationResult, summarize
from spectune.simulator._policy import StepPolicy
from spectune.simulator._policy_setup import drafting_depth, runtime_policy, runtime_verifies
from spectune.simulator._replicas import merge_traces, split_load
from spectune.simulator._verifiers import Draws, draws_for, make_verifier
from spectune.workload import LogitSynthesizer, RequestTable, generate_requests

__all__ = ["lockstep_groups", "simulate", "simulate_many"]

Progress = Callable[[int, int], None]


def simulate(
    document: SimulationDocument,
    *,
    baseline: bool | None = None,
    progress: Progress | None = None,
    draws: Draws | None = None,
) -> SimulationResult:
    """Simulate ``document``: its speculative config on its deployment and workload.

    ``baseline`` (default: ``document.simulation.baseline``) also simulates the same requests without
    speculation, for ``speedup_vs_no_spec``. ``progress(finished requests, total)`` is called per step.
    ``draws`` (see ``simulate_many``). Same document, same seed: the same numbers.
    """
    return simulate_many([document], baseline=baseline, progress=progress, draws=draws)[0]


def simulate_many(
    documents: Sequence[SimulationDocument],
    *,
    baseline: bool | None = None,
    progress: Progress | None = None,
    processes: int = 1,
    draws: Draws | None = None,
) -> list[SimulationResult]:
    """Simulate several documents, side by side where they can share a rejection-sampling call.

    Documents on one device and backend with the same vocabulary, verification rule, draft sampling
    (and synthetic rates) run in lockstep groups sized to ``simulation.lockstep_memory_gib``; each
    result equals what ``simulate`` returns for its document alone, bit for bit (wall times aside).
    ``progress`` is passed on only for a single document. ``processes``: how many processes simulate
    on this device at once (a study's local workers); the default memory budget is split between them.
    ``draws``: where a step's logit rows are drawn from, 'generator' (each simulation's generator) or
    'counter' (each request's counter-based stream); default counter on CUDA, generator elsewhere
    (``simulation.engine: ahead`` needs counter draws). The engine (``simulation.engine``) never
    changes the numbers; the draws do.
    """
    results: list[SimulationResult | None] = [None] * len(documents)
    for group in lockstep_groups(documents, processes):
        devices = {resolve_device(documents[i].simulation.device) for i in group}
        device = devices.pop()
        previous_threads = torch.get_num_threads()
        if device.type == "cpu":
            torch.set_num_threads(documents[group[0]].simulation.cpu_threads)  # restored below
        try:
            with on_device(device):
                group_results = _simulate_group(
                    [documents[i] for i in group],
                    device,
                    baseline=baseline,
                    progress=progress if len(documents) == 1 else None,
                    draws=draws,
                )
        finally:
            torch.set_num_threads(previous_threads)
        for i, result in zip(group, group_results):
            results[i] = result
    return [r for r in results if r is not None]


def lockstep_groups(documents: Sequence[SimulationDocument], processes: int = 1) -> list[list[int]]:
    """Indices of ``documents`` in the groups ``simulate_many`` runs together (document order kept)."""
    by_key: dict[tuple[object, ...], list[int]] = {}
    for index, document in enumerate(documents):
        by_key.setdefault(_lockstep_key(document), []).append(index)
    groups: list[list[int]] = []
    for key, indices in by_key.items():
        if key[0] == "plain":
            groups.extend([i] for i in indices)
            continue
        budget = _memory_budget(documents[indices[0]], processes)
        current: list[int] = []
        used = 0
        for i in indices:
            need = _member_bytes(documents[i])
            if current and used + need > budget:
                groups.append(current)
                current, used = [], 0
            current.append(i)
            used += need
        groups.append(current)
    return groups


def _verifies(document: SimulationDocument) -> bool:
    """False with speculation off, or when the schedule turns it off at every batch size the workload can reach."""
    spec = document.speculative
    if spec is None:
        return False
    if document.sglang_adaptive is not None:
        return runtime_verifies(document)
    if document.num_replicas > 1:  # every batch gets the maximum K (see _Setup)
        return spec.num_speculative_tokens > 0
    cap = _concurrency(document)
    return any(spec.num_speculative_tokens_for_batch(b) > 0 for b in range(1, cap + 1))


def _concurrency(document: SimulationDocument) -> int:
    workload = document.workload
    return min(workload.concurrency, workload.max_num_seqs) if workload.concurrency else workload.max_num_seqs


def _lockstep_key(document: SimulationDocument) -> tuple[object, ...]:
    if not _verifies(document):
        return ("plain",)
    spec = document.speculative
    assert spec is not None  # a document that verifies speculates
    device = resolve_device(document.simulation.device)
    backend = backend_on(document.simulation.kernel_backend, device)
    rates = tuple(spec.synthetic_conditional_rates() or ()) if spec.rejection_sample_method == "synthetic" else None
    return (
        str(device),
        backend,
        document.workload.vocab_size,
        spec.rejection_sample_method,
        spec.draft_sample_method,
        rates,
        document.simulation.cpu_threads,
        document.simulation.engine,
    )


def _member_bytes(document: SimulationDocument) -> int:
    """What a member holds: its logit banks (with the twin's per-row statistics on the CPU) and, on
    CUDA, its slice of the step buffers (row tables, tokens: no logits, which the kernels read in the
    banks) and of the kernels' workspace (only a document that verifies is a member)."""
    spec = document.speculative
    assert spec is not None
    device = resolve_device(document.simulation.device)
    vocab, k = document.workload.vocab_size, drafting_depth(document)
    temperatures = len(document.workload.temperature_mix[0])
    sides = 2 if spec.draft_sample_method == "probabilistic" else 1
    bank = k * temperatures * document.simulation.bank_rows * vocab * 4 * sides
    if device.type != "cuda":
        return 3 * bank  # the bank, its log-probabilities and their exponentials
    tiles = -(-vocab // DEFAULT_TILE)  # the kernels' per-tile workspace: a few words a row and tile
    return bank + slot_rows(_concurrency(document), device) * (k + 1) * (32 + 24 * tiles)


def _memory_budget(document: SimulationDocument, processes: int) -> float:
    """A group's memory: the document's ``lockstep_memory_gib`` (each process's), else a share of what the
    device has free (every process sees the same free memory when it starts, so each takes its part)."""
    if document.simulation.lockstep_memory_gib is not None:
        return document.simulation.lockstep_memory_gib * 2**30
    device = resolve_device(document.simulation.device)
    if device.type == "cuda":
        return 0.5 * torch.cuda.mem_get_info(device)[0] / processes
    return 0.25 * _available_ram() / processes


def _available_ram() -> float:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return 4 * 2**30  # a modest guess where the system does not say


def _simulate_group(
    documents: list[SimulationDocument],
    device: torch.device,
    *,
    baseline: bool | None,
    progress: Progress | None,
    draws: Draws | None,
) -> list[SimulationResult]:
    started = time.perf_counter()
    setups = [_Setup(document, device, progress) for document in documents]
    first, spec = documents[0], documents[0].speculative
    backend = resolve_backend(first.simulation.kernel_backend, device)
    engine = first.simulation.engine
    synthetic = (
        spec.synthetic_conditional_rates() if spec is not None and spec.rejection_sample_method == "synthetic" else None
    )
    engine_started = time.perf_counter()
    members = [member for setup in setups for member in setup.members]
    verifier = make_verifier(
        members,
        engine=engine,
        draws=draws_for(device, draws),
        backend=backend,
        device=device,
        method=spec.rejection_sample_method if spec is not None else "standard",  # plain: never verifies
        synthetic_rates=torch.tensor(synthetic, dtype=torch.float32, device=device) if synthetic else None,
        vocab_size=first.workload.vocab_size,
        draft_logits=spec is not None and spec.draft_sample_method == "probabilistic",
    )
    try:
        drive(members, verifier)  # fills each member's trace and wall-time shares
    finally:
        verifier.close()
    engine_s = time.perf_counter() - engine_started
    total_rows = max(sum(m.rows_verified for m in members), 1)
    results = []
    for setup in setups:
        rows = sum(m.rows_verified for m in setup.members)
        own_s = setup.setup_s + engine_s * rows / total_rows if len(setups) > 1 else time.perf_counter() - started
        results.append(setup.summary(baseline, own_s))
    return results


class _Setup:
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
        verifies = _verifies(document)
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
                document, k_for_batch, step_timer, part, self._conditional_rates, seed=document.seed + index
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
            plain = _Setup(plain_decoding(document), self.device, None)
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

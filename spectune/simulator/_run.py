"""``simulate`` / ``simulate_many``: build the pieces simulation documents ask for, run their loops (in\nlockstep where they can share a call), summarise."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from spectune.config import SimulationDocument
from spectune.cost import CostModel, build_cost_model
from spectune.simulator._backend import resolve_device, select_rejection_sample
from spectune.simulator._engine import EngineMember, run_lockstep, slot_rows
from spectune.simulator._loop import LoopInputs, LoopTrace, run_serving_loop, serving_loop
from spectune.simulator._metrics import SimulationResult, summarize
from spectune.workload import LogitSynthesizer, RequestTable, generate_requests

__all__ = ["lockstep_groups", "simulate", "simulate_many"]

Progress = Callable[[int, int], None]


def simulate(document: SimulationDocument, *, baseline: bool | None = None, progress: Progress | None = None) -> SimulationResult:
    """Simulate ``document``: its speculative config on its deployment and workload.

    ``baseline`` (default: ``document.simulation.baseline``) also simulates the same requests without
    speculation, for ``speedup_vs_no_spec``. ``progress(finished requests, total)`` is called per step.
    Same document, same seed: the same numbers.
    """
    return simulate_many([document], baseline=baseline, progress=progress)[0]


def simulate_many(
    documents: Sequence[SimulationDocument], *, baseline: bool | None = None, progress: Progress | None = None
) -> list[SimulationResult]:
    """Simulate several documents, side by side where they can share a rejection-sampling call.

    Documents on one device and backend with the same vocabulary, verification rule, draft sampling
    (and synthetic rates) run in lockstep groups sized to ``simulation.lockstep_memory_gib``; each
    result equals what ``simulate`` returns for its document alone, bit for bit (wall times aside).
    ``progress`` is passed on only for a single document.
    """
    results: list[SimulationResult | None] = [None] * len(documents)
    for group in lockstep_groups(documents):
        devices = {resolve_device(documents[i].simulation.device) for i in group}
        device = devices.pop()
        previous_threads = torch.get_num_threads()
        if device.type == "cpu":
            torch.set_num_threads(documents[group[0]].simulation.cpu_threads)  # restored below
        try:
            group_results = _simulate_group(
                [documents[i] for i in group], device, baseline=baseline, progress=progress if len(documents) == 1 else None
            )
        finally:
            torch.set_num_threads(previous_threads)
        for i, result in zip(group, group_results):
            results[i] = result
    return [r for r in results if r is not None]


def lockstep_groups(documents: Sequence[SimulationDocument]) -> list[list[int]]:
    """Indices of ``documents`` in the groups ``simulate_many`` runs together (document order kept)."""
    by_key: dict[tuple[object, ...], list[int]] = {}
    for index, document in enumerate(documents):
        by_key.setdefault(_lockstep_key(document), []).append(index)
    groups: list[list[int]] = []
    for key, indices in by_key.items():
        if key[0] == "plain":
            groups.extend([i] for i in indices)
            continue
        budget = _memory_budget(documents[indices[0]])
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
    """False when the schedule turns speculation off at every batch size the workload can reach."""
    spec = document.speculative
    cap = _concurrency(document)
    return any(spec.num_speculative_tokens_for_batch(b) > 0 for b in range(1, cap + 1))


def _concurrency(document: SimulationDocument) -> int:
    workload = document.workload
    return min(workload.concurrency, workload.max_num_seqs) if workload.concurrency else workload.max_num_seqs


def _lockstep_key(document: SimulationDocument) -> tuple[object, ...]:
    if not _verifies(document):
        return ("plain",)
    spec = document.speculative
    device = resolve_device(document.simulation.device)
    backend = document.simulation.kernel_backend
    if backend == "auto":
        backend = "triton" if device.type == "cuda" else "reference"
    rates = tuple(spec.synthetic_conditional_rates() or ()) if spec.rejection_sample_method == "synthetic" else None
    return (
        str(device), backend, document.workload.vocab_size, spec.rejection_sample_method, spec.draft_sample_method,
        rates, document.simulation.cpu_threads,
    )


def _member_bytes(document: SimulationDocument) -> int:
    """What a member holds: its logit banks (with the twin's per-row statistics on the CPU) and, on
    CUDA, its slice of the step buffers."""
    spec = document.speculative
    device = resolve_device(document.simulation.device)
    vocab, k = document.workload.vocab_size, spec.num_speculative_tokens
    temperatures = len(document.workload.temperature_mix[0])
    sides = 2 if spec.draft_sample_method == "probabilistic" else 1
    bank = k * temperatures * document.simulation.bank_rows * vocab * 4 * sides
    if device.type != "cuda":
        return 3 * bank  # the bank, its log-probabilities and their exponentials
    return bank + slot_rows(_concurrency(document), device) * (k + 1 + k * (sides - 1)) * vocab * 4


def _memory_budget(document: SimulationDocument) -> float:
    if document.simulation.lockstep_memory_gib is not None:
        return document.simulation.lockstep_memory_gib * 2**30
    device = resolve_device(document.simulation.device)
    if device.type == "cuda":
        return 0.5 * torch.cuda.mem_get_info(device)[0]
    return 0.25 * _available_ram()


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
    documents: list[SimulationDocument], device: torch.device, *, baseline: bool | None, progress: Progress | None
) -> list[SimulationResult]:
    started = time.perf_counter()
    members, setups = [], []
    for document in documents:
        member_started = time.perf_counter()
        members.append(_member(document, device, progress))
        setups.append(time.perf_counter() - member_started)
    first = documents[0]
    backend, rejection_sample = select_rejection_sample(first.simulation.kernel_backend, device)
    synthetic = first.speculative.synthetic_conditional_rates() if first.speculative.rejection_sample_method == "synthetic" else None
    engine_started = time.perf_counter()
    run_lockstep(
        members,
        device=device,
        method=first.speculative.rejection_sample_method,
        synthetic_rates=torch.tensor(synthetic, dtype=torch.float32, device=device) if synthetic else None,
        backend=backend,
        rejection_sample=rejection_sample,
    )
    engine_s = time.perf_counter() - engine_started
    total_rows = max(sum(m.rows_verified for m in members), 1)
    results = []
    for document, member, setup_s in zip(documents, members, setups):
        assert member.trace is not None
        own_s = setup_s + (engine_s * member.rows_verified / total_rows if len(members) > 1 else engine_s)
        baseline_trace = _baseline_trace(document) if (document.simulation.baseline if baseline is None else baseline) else None
        results.append(
            summarize(
                member.trace,
                baseline=baseline_trace,
                wall_time_s=own_s if len(members) > 1 else time.perf_counter() - started,
                kernel_wall_time_s=member.kernel_s,
                synthesis_wall_time_s=member.synthesis_s,
            )
        )
    return results


def _member(document: SimulationDocument, device: torch.device, progress: Progress | None) -> EngineMember:
    requests = generate_requests(document.workload, seed=document.seed)
    spec = document.speculative
    cost = build_cost_model(document.hardware, document.target_model, document.effective_drafter(), document.cost_model)
    verifies = _verifies(document)
    loop = serving_loop(
        _loop_inputs(document, requests),
        k_for_batch=spec.num_speculative_tokens_for_batch,
        verifies=verifies,
        step_time=_step_time_fn(cost, draft_probabilities=spec.draft_sample_method == "probabilistic"),
        prefill_time=_prefill_time_fn(cost),
        max_steps=document.simulation.max_steps,
        on_step=progress,
    )
    rng = np.random.default_rng(document.seed)
    return EngineMember(
        loop=loop,
        synthesizer=_synthesizer(document, requests, device) if verifies else None,
        temperature_index=torch.from_numpy(requests.temperature_index).to(device),
        request_seeds=rng.integers(0, 2**62, size=len(requests), dtype=np.int64),
        generator=torch.Generator(device=device).manual_seed(document.seed),
        concurrency=_concurrency(document),
    )


def _synthesizer(document: SimulationDocument, requests: RequestTable, device: torch.device) -> LogitSynthesizer:
    spec = document.speculative
    if spec.rejection_sample_method == "synthetic":
        rates = spec.synthetic_conditional_rates() or []
        measured_with = "greedy"
    else:
        if document.acceptance is None:  # the document's own rule forbids this
            raise ValueError("document.acceptance is required unless the method is synthetic")
        batch = document.workload.concurrency or document.workload.max_num_seqs
        rates = document.acceptance.rates_for_batch(batch).conditional(spec.num_speculative_tokens)
        measured_with = document.acceptance.measured_with
    return LogitSynthesizer(
        rates,
        requests.temperatures,
        vocab_size=document.workload.vocab_size,
        draft_sample_method=spec.draft_sample_method,
        measured_with=measured_with,
        device=device,
        bank_rows=document.simulation.bank_rows,
    )


def _baseline_trace(document: SimulationDocument) -> LoopTrace:
    requests = generate_requests(document.workload, seed=document.seed)
    plain = build_cost_model(document.hardware, document.target_model, None, document.cost_model)
    return run_serving_loop(
        _loop_inputs(document, requests),
        k_for_batch=lambda batch: 0,
        verify=None,
        step_time=_step_time_fn(plain, draft_probabilities=False),
        prefill_time=_prefill_time_fn(plain),
        max_steps=document.simulation.max_steps,
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

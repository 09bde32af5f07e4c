"""Which simulation documents an engine runs together (in lockstep): those that can share a
rejection-sampling call, in groups sized to the memory each member holds."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from spectune.config import SimulationDocument
from spectune.kernels import DEFAULT_TILE
from spectune.simulator._backend import backend_on, resolve_device
from spectune.simulator._kernel_call import slot_rows
from spectune.simulator._policy_setup import drafting_depth, runtime_verifies

__all__ = ["lockstep_groups", "verifies"]


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


def verifies(document: SimulationDocument) -> bool:
    """False with speculation off, or when the schedule turns it off at every batch size the workload can reach."""
    spec = document.speculative
    if spec is None:
        return False
    if document.sglang_adaptive is not None:
        return runtime_verifies(document)
    if document.num_replicas > 1:  # every batch gets the maximum K (see DocumentRun)
        return spec.num_speculative_tokens > 0
    cap = _concurrency(document)
    return any(spec.num_speculative_tokens_for_batch(b) > 0 for b in range(1, cap + 1))


def _concurrency(document: SimulationDocument) -> int:
    workload = document.workload
    return min(workload.concurrency, workload.max_num_seqs) if workload.concurrency else workload.max_num_seqs


def _lockstep_key(document: SimulationDocument) -> tuple[object, ...]:
    if not verifies(document):
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

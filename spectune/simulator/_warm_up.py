"""Compiling, before any simulation runs, every Triton kernel variant its engines can launch on a GPU.

Triton compiles a kernel variant the first time a process launches it (a second or two each) and keeps
it in its cache folder (``TRITON_CACHE_DIR``), where every later process of the machine finds it. On a
fresh machine, or after the kernels change, a study's workers would each compile the variants they
meet first, inside rounds that every later round waits for. ``warm_up`` compiles them all beforehand,
synchronously, with Triton's ``warmup`` (compiled, never launched), and builds their launchers, which
Triton would otherwise build at each variant's first launch; ``spectune warm-up`` runs it.

What a simulation launches on CUDA, as its engine chooses (``_run``, ``_verifiers``, ``_ahead``):

- the engine's rejection-sampling call, whose kernels compile once per verification rule, draft logits
  or not, V, K and launch plan (``spectune.kernels.plan``: R and K move it between a few buckets; R and
  K are runtime arguments, but block verification's pass B takes K as a constexpr). K is the engine's
  members' largest drafting depth. Verifying ahead (``engine: auto`` on CUDA) the engine calls at two
  fixed sizes (``ahead_call_rows``); step by step, R is the sum of its members' slots (``slot_rows``);
- the step writer, with draft rows or without, where the draws are counter-based (CUDA's);
- the base noise of the logit synthesizers (``philox_normals``), with either backend.

A document alone launches no variant ``kernel_variants`` does not list for it, and every listed one once
its work fills both call sizes (a short simulation verifying ahead may need only the small one);
documents that run together (lockstep groups, a study's rounds) launch part of the union of the lists.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from spectune.config import SimulationDocument
from spectune.kernels import LaunchPlan, RowTable, plan
from spectune.simulator._ahead import AHEAD_LANES, ahead_call_rows
from spectune.simulator._backend import backend_on, on_device
from spectune.simulator._groups import verifies
from spectune.simulator._kernel_call import KernelCall, call_inputs, slot_rows
from spectune.simulator._policy_setup import drafting_depth
from spectune.simulator._replicas import closed_share
from spectune.simulator._verifiers import Draws, draws_for

__all__ = ["EngineCall", "KernelVariants", "WarmUpReport", "kernel_variants", "member_concurrencies", "warm_up"]

# The synthesizers' bank seed: the base noise's Triton variant depends on its type (int32) alone.
_BANK_SEED = 0


@dataclass(frozen=True, order=True)
class EngineCall:
    """A rejection-sampling call as far as its compiled kernels go: they compile once per (method, draft
    logits, V, K, ``plan``); ``num_requests`` (R) is the fewest rows an engine's call takes that plan at."""

    method: str
    draft_logits: bool
    vocab: int
    num_drafts: int  # K
    num_requests: int  # R
    plan: LaunchPlan = field(compare=False)


@dataclass(frozen=True)
class KernelVariants:
    """The kernel variants simulations can launch on a device, each once."""

    calls: tuple[EngineCall, ...]
    step_writers: tuple[tuple[bool, int], ...]  # (draft rows, V) of the step writer's launches
    base_noise: tuple[tuple[int, int], ...]  # (bank rows, V) of the base noise drawn on the device


@dataclass(frozen=True)
class WarmUpReport:
    """What ``warm_up`` made ready, by kernel name: variants compiled now, and variants Triton's cache
    already held (loaded, not compiled)."""

    compiled: dict[str, int]
    cached: dict[str, int]
    seconds: float
    cache_dir: str  # Triton's cache folder


def member_concurrencies(document: SimulationDocument) -> list[int]:
    """The decode-batch bound of each engine member of ``document`` (one a data-parallel replica with load),
    as ``DocumentRun`` sets it from ``_replicas.split_load``: a closed loop's clients split by
    ``closed_share``, else ``max_num_seqs`` each."""
    workload, replicas = document.workload, document.num_replicas
    closed = workload.concurrency
    if replicas == 1:
        return [closed or workload.max_num_seqs]
    served = range(min(replicas, workload.num_requests))  # a replica past the last request gets none
    if closed is None:
        return [workload.max_num_seqs for _ in served]
    split = [closed_share(closed, replicas, replica) for replica in served]
    return [clients for clients in split if clients > 0]


def kernel_variants(
    documents: Sequence[SimulationDocument], device: torch.device, sm_count: int, *, draws: Draws | None = None
) -> KernelVariants:
    """Every kernel variant ``simulate_many(documents, draws=draws)`` can launch on ``device``, a GPU of
    ``sm_count`` SMs (on the CPU, where only the tests run the kernels, under Triton's interpreter, the
    plans are the interpreter's)."""
    counter = draws_for(device, draws) == "counter"
    ahead_sizes = [AHEAD_LANES * slot_rows(rows // AHEAD_LANES, device) for rows in ahead_call_rows(device)]
    calls: dict[tuple[str, bool, int, int, LaunchPlan], int] = {}  # -> the fewest rows taking the plan
    writers: dict[tuple[bool, int], None] = {}
    noise: dict[tuple[int, int], None] = {}
    step_members: dict[tuple[str, bool, int], list[tuple[int, int]]] = {}  # -> (K, rows) of each document

    def add(shape: tuple[str, bool, int], num_drafts: int, rows: int) -> None:
        method, draft, vocab = shape
        interpreting = device.type != "cuda"
        chosen = plan(rows, num_drafts, vocab, torch.float32, draft, method, sm_count, interpreting, row_table=True)
        key = (method, draft, vocab, num_drafts, chosen)
        calls[key] = min(calls.get(key, rows), rows)

    for document in documents:
        spec = document.speculative
        if spec is None or not verifies(document):
            continue
        vocab, draft = document.workload.vocab_size, spec.draft_sample_method == "probabilistic"
        if device.type == "cuda":
            noise[document.simulation.bank_rows, vocab] = None
        if backend_on(document.simulation.kernel_backend, device) != "triton":
            continue  # the twin: no rejection-sampling kernel, no step writer
        if counter:
            writers[draft, vocab] = None
        shape: tuple[str, bool, int] = (spec.rejection_sample_method, draft, vocab)
        num_drafts = drafting_depth(document)
        engine = document.simulation.engine
        if engine == "ahead" or (engine == "auto" and counter):
            for rows in ahead_sizes:
                add(shape, num_drafts, rows)
        else:
            rows = sum(slot_rows(concurrency, device) for concurrency in member_concurrencies(document))
            step_members.setdefault(shape, []).append((num_drafts, rows))
    for shape, members in step_members.items():
        for num_drafts in sorted({k for k, _ in members}):
            # Step by step, R is the rows of the documents an engine holds: any sum of those whose K is
            # at most the engine's (bit r of ``reachable``: some of them hold r rows together).
            reachable = 1
            for k, rows in members:
                if k <= num_drafts:
                    reachable |= reachable << rows
            for rows in range(1, reachable.bit_length()):
                if reachable >> rows & 1:
                    add(shape, num_drafts, rows)
    return KernelVariants(
        tuple(sorted(EngineCall(m, d, v, k, rows, chosen) for (m, d, v, k, chosen), rows in calls.items())),
        tuple(writers),
        tuple(noise),
    )


def warm_up(variants: KernelVariants, device: torch.device) -> WarmUpReport:
    """Compile ``variants`` for CUDA ``device`` into Triton's cache, launching nothing (synchronous)."""
    if device.type != "cuda":
        raise ValueError(f"device: the kernels are compiled for a CUDA device, got {device}")
    started = time.perf_counter()
    from spectune.kernels import philox_normals  # Triton: loaded where used

    with on_device(device), _compilations() as seen:
        for bank_rows, vocab in variants.base_noise:
            philox_normals((bank_rows, vocab), _BANK_SEED, 0, device, compile_only=True)
        for draft_rows, vocab in variants.step_writers:
            _compile_step_writer(device, draft_rows, vocab)
        for call in variants.calls:
            _compile_call(call, device)
    compiled: dict[str, int] = {}
    cached: dict[str, int] = {}
    for name, cache_hit in seen:
        counts = cached if cache_hit else compiled
        counts[name] = counts.get(name, 0) + 1
    import triton

    return WarmUpReport(compiled, cached, time.perf_counter() - started, str(triton.knobs.cache.dir))


@contextmanager
def _compilations() -> Iterator[list[tuple[str, bool]]]:
    """(kernel name, whether Triton's cache held it) of each variant Triton compiles or loads in the block."""
    import triton

    seen: list[tuple[str, bool]] = []
    previous = triton.knobs.compilation.listener

    def listener(*, src: object, metadata: dict[str, object], cache_hit: bool, **rest: object) -> None:
        seen.append((str(getattr(src, "name", None) or metadata.get("name")), cache_hit))
        if previous is not None:
            previous(src=src, metadata=metadata, cache_hit=cache_hit, **rest)

    triton.knobs.compilation.listener = listener
    try:
        yield seen
    finally:
        triton.knobs.compilation.listener = previous


def _compile_call(call: EngineCall, device: torch.device) -> None:
    """An engine's call as ``KernelVerifier`` builds it (``call_inputs``: zero-stride logits over a bank's
    row 0; rows through a table), compiled at R = ``call.num_requests``."""
    rows, num_drafts, vocab = call.num_requests, call.num_drafts, call.vocab
    bank = torch.zeros((1, vocab), dtype=torch.float32, device=device)
    rates = torch.ones(num_drafts, dtype=torch.float32, device=device) if call.method == "synthetic" else None
    inputs = call_inputs(
        bank,
        bank if call.draft_logits else None,
        torch.full((rows, num_drafts), -1, dtype=torch.int64, device=device),
        torch.zeros(rows, dtype=torch.float32, device=device),
        torch.zeros(rows, dtype=torch.int64, device=device),
        call.method,
        rates,
        vocab,
    )
    table = RowTable(
        torch.zeros((rows, num_drafts + 1), dtype=torch.int64, device=device),
        torch.zeros((rows, num_drafts), dtype=torch.int64, device=device) if call.draft_logits else None,
    )
    kernel_call = KernelCall(inputs, table, torch.zeros(rows, dtype=torch.int32), None)
    if kernel_call.plan != call.plan:  # kernel_variants was given another GPU's SM count
        raise ValueError(f"call.plan: the call plans {kernel_call.plan} on {device}, got {call.plan}")
    kernel_call.compile()


def _compile_step_writer(device: torch.device, draft_rows: bool, vocab: int) -> None:
    """The step writer as ``KernelVerifier`` launches it, over one member of 16 rows (its sizes are runtime
    arguments; 16 rows, as a CUDA call's R is a multiple of 16, start the members' fields on the same
    16-byte boundary as every call's)."""
    from spectune.kernels import MEMBER_FIELDS, ROW_FIELDS, write_step  # Triton: loaded where used

    rows, members, num_drafts = slot_rows(1, device), 1, 1
    staged = torch.zeros(len(ROW_FIELDS) * rows + len(MEMBER_FIELDS) * members, dtype=torch.int64, device=device)
    indices = torch.zeros(rows, dtype=torch.int64, device=device)
    out = (
        torch.zeros((rows, num_drafts + 1), dtype=torch.int64, device=device),
        torch.zeros((rows, num_drafts), dtype=torch.int64, device=device) if draft_rows else None,
        torch.zeros((rows, num_drafts), dtype=torch.int64, device=device),
        torch.zeros(rows, dtype=torch.float32, device=device),
        torch.zeros(rows, dtype=torch.int64, device=device),
    )
    floats = torch.zeros(1, dtype=torch.float32, device=device)
    write_step(staged, rows, indices, indices, indices, floats, indices, out, vocab, compile_only=True)

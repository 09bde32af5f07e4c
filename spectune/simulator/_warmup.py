"""Compiling the kernel variants a study's engines can launch, before they meet them.

An engine's call compiles per launch plan (``spectune.kernels._plan``: a few per shape, chosen by R)
and per shape: verification rule, draft logits or not, K (its padded row count, and Triton's own
specialisation of K = 1). On CUDA engines verify ahead in calls of two sizes
(``_ahead.ahead_call_rows``), so a shape has at most two plans there; step by step, R follows the
group's batch sizes. A study meets a part of that set, in an order set by its search and its
workers' timing, and the first process of a machine to meet a variant compiles it (one to four
kernels, about two seconds each), usually inside a round that every later round waits for.
``warm_up`` launches every variant once on a 16-row call, so Triton's cache (shared by the machine's
processes) holds them all; a study runs it in low-priority processes of their own beside the
workers (``spectune._spawn.kernel_warm_up``), off its critical path.

A decision-sized study has dozens of variants (about two hundred step by step), a few seconds of
compiling each: more than a first run's warm-up may get through before the run ends and stops it.
So each launch leaves a mark (``marks``: a file named by the launch and by what its compiled code
depends on -- the kernels' source, Triton's and CUDA's versions, the GPU), and a later warm-up skips
what is marked (a launch of a cached variant still costs a process a fraction of a second): the next
run's warm-up starts where the last one stopped. The marks live in Triton's cache folder
(``marks_dir``), so clearing that cache clears them too.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import torch

from spectune.kernels import MEMBER_FIELDS, ROW_FIELDS, RowTable, launch, sm_count, write_step
from spectune.kernels._plan import LaunchPlan, plan
from spectune.simulator._ahead import ahead_call_rows
from spectune.simulator._kernel_call import call_inputs, slot_rows
from spectune.simulator._verifiers import Engine

__all__ = ["KernelShape", "engine_plans", "engine_rows", "marks_dir", "study_shapes", "warm_up"]

KernelShape = tuple[str, bool, int]
"""(verification rule, draft logits, K) of an engine's call."""


def engine_rows(device: torch.device, max_rows: int, engine: Engine = "auto") -> list[int]:
    """The row counts R of the calls engines on ``device`` make with the kernels (``simulation.engine``):
    verifying ahead (``auto`` on CUDA), its two call sizes; step by step, every multiple of
    ``slot_rows``' quantum up to ``max_rows``."""
    if engine == "ahead" or (engine == "auto" and device.type == "cuda"):
        return list(ahead_call_rows(device))
    quantum = slot_rows(1, device)
    return list(range(quantum, max(max_rows, quantum) + 1, quantum))


def engine_plans(shape: KernelShape, vocab: int, sm_count: int, rows: Iterable[int]) -> list[LaunchPlan]:
    """Every plan an engine's call of ``shape`` takes on a GPU of ``sm_count`` SMs at the row counts ``rows``."""
    method, has_draft, num_drafts = shape
    plans: dict[LaunchPlan, None] = {}
    for count in rows:
        chosen = plan(count, num_drafts, vocab, torch.float32, has_draft, method, sm_count, False, row_table=True)
        plans.setdefault(chosen)
    return list(plans)


def warm_up(
    device: torch.device,
    vocab: int,
    shapes: Iterable[KernelShape],
    rows: Sequence[int],
    share: tuple[int, int] = (0, 1),
    keep_going: Callable[[], bool] = lambda: True,
    marks: Path | None = None,
) -> int:
    """Launch the step writer and every plan of every shape at the row counts ``rows`` (``engine_rows``)
    once (16 rows over a one-row bank), so that each variant is compiled into Triton's cache; return
    the launches made. ``share`` (i, n): only the i-th of every n launches (n processes warm up
    together); ``keep_going`` is asked before each launch; ``marks``: a folder where each finished
    launch leaves a mark and a marked one is skipped (None: launch all). CUDA only (0 elsewhere)."""
    if device.type != "cuda":
        return 0
    sms = sm_count(device)
    launches: list[tuple[str, Callable[[], None]]] = [
        (f"writer {vocab} {has_draft}", functools.partial(_write_one_step, device, vocab, has_draft))
        for has_draft in (False, True)
    ]
    # Every shape's plan for the fewest rows first, then its next plan, and so on: a study's first rounds
    # (one or a few points of a batch size, every combo and K) meet the small calls of every shape.
    plans = {shape: engine_plans(shape, vocab, sms, rows) for shape in dict.fromkeys(shapes)}
    for rank in range(max((len(p) for p in plans.values()), default=0)):
        for shape, shape_plans in plans.items():
            if rank < len(shape_plans):
                chosen = shape_plans[rank]
                launches.append(
                    (f"call {vocab} {shape} {chosen}", functools.partial(_launch_one, device, vocab, shape, chosen))
                )
    stamp = _build_stamp(device) if marks is not None else ""
    if marks is not None:
        marks.mkdir(parents=True, exist_ok=True)
    index, processes = share
    made = 0
    for key, launch_one in launches[index::processes]:
        if not keep_going():
            break
        mark = marks / hashlib.sha256(f"{stamp}|{key}".encode()).hexdigest()[:40] if marks is not None else None
        if mark is not None and mark.exists():
            continue
        launch_one()
        made += 1
        if mark is not None:
            torch.cuda.synchronize(device)  # compiled and run: marked only once it is in the cache
            mark.touch()
    torch.cuda.synchronize(device)
    return made


def marks_dir() -> Path:
    """Where a study's warm-up marks its launches: beside Triton's cache (``TRITON_CACHE_DIR``)."""
    import triton

    return Path(triton.knobs.cache.dir) / "spectune-warm-up"


@functools.cache
def _build_stamp(device: torch.device) -> str:
    """What a compiled variant depends on besides its launch: the kernels' source (``spectune.kernels``
    with the step writer), Triton's and CUDA's versions and the GPU."""
    import triton

    import spectune.kernels

    digest = hashlib.sha256()
    for path in sorted(Path(spectune.kernels.__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    gpu = f"{torch.cuda.get_device_name(device)} {torch.cuda.get_device_capability(device)}"
    return f"{triton.__version__}|{torch.version.cuda}|{gpu}|{digest.hexdigest()}"


def _launch_one(device: torch.device, vocab: int, shape: KernelShape, chosen: LaunchPlan) -> None:
    """One call as an engine makes it (``call_inputs``: zero-stride logits over a bank's row 0),
    rows through a table, placeholder drafts."""
    method, has_draft, num_drafts = shape
    rows = slot_rows(1, device)
    bank = torch.zeros((1, vocab), dtype=torch.float32, device=device)
    tokens = torch.full((rows, num_drafts), -1, dtype=torch.int64, device=device)
    temperature = torch.ones(rows, dtype=torch.float32, device=device)
    seeds = torch.zeros(rows, dtype=torch.int64, device=device)
    inputs = call_inputs(bank, bank if has_draft else None, tokens, temperature, seeds, method, None, vocab)
    table = RowTable(
        torch.zeros((rows, num_drafts + 1), dtype=torch.int64, device=device),
        torch.zeros((rows, num_drafts), dtype=torch.int64, device=device) if has_draft else None,
    )
    launch(inputs, chosen, rows=table)


def _write_one_step(device: torch.device, vocab: int, has_draft: bool) -> None:
    """The step writer over 16 rows of one member that has not verified yet (k = 0: nothing read)."""
    rows, members, num_drafts = slot_rows(1, device), 1, 1
    staged = torch.zeros(len(ROW_FIELDS) * rows + len(MEMBER_FIELDS) * members, dtype=torch.int64, device=device)
    zeros = torch.zeros(rows, dtype=torch.int64, device=device)
    out = (
        torch.empty((rows, num_drafts + 1), dtype=torch.int64, device=device),
        torch.empty((rows, num_drafts), dtype=torch.int64, device=device) if has_draft else None,
        torch.empty((rows, num_drafts), dtype=torch.int64, device=device),
        torch.empty(rows, dtype=torch.float32, device=device),
        torch.empty(rows, dtype=torch.int64, device=device),
    )
    floats = torch.zeros(1, dtype=torch.float32, device=device)
    write_step(staged, rows, zeros, zeros, zeros, floats, zeros, out, vocab)


def study_shapes(rules_and_sampling: Sequence[tuple[str, str]], ks: Iterable[int]) -> list[KernelShape]:
    """The shapes of a study's engines: each (rule, draft sampling) at each K it searches (an engine's K
    is its members' largest)."""
    ks = [k for k in ks if k > 0]
    return [(rule, sampling == "probabilistic", k) for rule, sampling in dict.fromkeys(rules_and_sampling) for k in ks]

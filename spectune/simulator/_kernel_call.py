"""The kernel call an engine makes every step: its persistent buffers, its CUDA graph, the pinned pool.

Rows: a call verifies [R, K+1] rows. The engine's K is the largest of its simulations'; a step at a
smaller k fills drafts k..K-1 with placeholders (-1: never accepted, and the token emitted at row k
comes from the plain target there, where the engine puts the bonus row), which is what verifying k
drafts does. The kernels read a step's rows where they lie in the simulations' banks, through row
tables (each row's element offset from the first bank met), so the call's logits are zero-stride
views over a bank's row 0 (``call_inputs``). Every simulation owns a fixed slice of R (on CUDA its
concurrency rounded up to a multiple of 16: ``slot_rows``), the buffers persist, and R and K never
change within a run, so the kernels compile once per engine shape and a step allocates nothing. On
CUDA the whole step (staging copy, the step writer, the kernels, the copy of the emitted counts) is
one CUDA graph, captured at the second run and replayed from then on (``KernelCall``).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable

import torch

from spectune.kernels import RowTable, StepTables, VerifyInputs, launch, plan_for, validate_inputs
from spectune.workload import LogitSynthesizer

__all__ = ["KernelCall", "call_inputs", "give_back", "host_buffer", "pooled_buffers", "slot_rows", "step_tables"]

# On CUDA a member's slice of R is its concurrency rounded up to this: the launch policy then changes
# with the grid only at such steps, so nearby batch sizes share their kernels' plan.
_ROW_QUANTUM = 16


def slot_rows(concurrency: int, device: torch.device) -> int:
    """Rows a member holds in the engine's call: its concurrency, on CUDA rounded up to a multiple of
    16 (at least 16: batch sizes 1-16 share one compiled variant; 15 placeholder rows cost far less
    than a step's launches)."""
    if device.type != "cuda":
        return concurrency
    return max(1, -(-concurrency // _ROW_QUANTUM)) * _ROW_QUANTUM


def step_tables(synthesizer: LogitSynthesizer) -> StepTables:
    """The tables the step writer draws a synthesizer's rows from."""
    return StepTables(*synthesizer.draw_tables(), synthesizer.bank_rows)


# Pinned buffers of engines that ended, for later engines of the process, never handed back to
# torch's pinned-memory cache: on an H200, after engines had freed pinned buffers their graphs copied
# from and to (torch records such a use during the capture), a later pinned allocation failed with
# "invalid argument". Reusing them also spares a pinned allocation per engine.
_pinned_free: list[torch.Tensor] = []
_pinned_lock = threading.Lock()


def host_buffer(numel: int, dtype: torch.dtype, pinned: bool) -> torch.Tensor:
    """A zeroed host buffer of ``numel`` elements: on CUDA pinned, from the pool when one there is
    large enough (a view of its start), else newly pinned with room to spare (a power of two)."""
    if not pinned:
        return torch.zeros(numel, dtype=dtype)
    with _pinned_lock:
        for i, buffer in enumerate(_pinned_free):
            if buffer.dtype == dtype and buffer.numel() >= numel:
                del _pinned_free[i]
                view = buffer[:numel]
                view.zero_()
                return view
    capacity = 1 << max(numel - 1, 0).bit_length()
    return torch.zeros(capacity, dtype=dtype, pin_memory=True)[:numel]


def give_back(*buffers: torch.Tensor) -> None:
    """Return pinned buffers from ``host_buffer`` to the pool, for the process's later engines."""
    with _pinned_lock:
        _pinned_free.extend(buffer._base if buffer._base is not None else buffer for buffer in buffers)


def pooled_buffers() -> list[int]:
    """The data pointers of the pinned buffers in the pool now (what the tests watch)."""
    with _pinned_lock:
        return [buffer.data_ptr() for buffer in _pinned_free]


def call_inputs(
    target_base: torch.Tensor,
    draft_base: torch.Tensor | None,
    tokens: torch.Tensor,
    temperature: torch.Tensor,
    seeds: torch.Tensor,
    method: str,
    rates: torch.Tensor | None,
    vocab: int,
) -> VerifyInputs:
    """The validated inputs of an engine's call of ``tokens``' shape [R, K]: its logits carry the call's
    shape over the first bank's row 0 (zero strides), and the row tables say where each row is."""
    total, num_drafts = tokens.shape
    target = target_base[0].as_strided((total, num_drafts + 1, vocab), (0, 0, 1))
    draft = draft_base[0].as_strided((total, num_drafts, vocab), (0, 0, 1)) if draft_base is not None else None
    return validate_inputs(target, tokens, draft, temperature, seeds, method, rates)


class KernelCall:
    """The engine's one kernel call over its persistent buffers, after ``writer`` (the step's writes, or
    None where they are made before ``run``) and with the copy of its emitted counts into the pinned
    ``counts``: validated and planned once; on CUDA captured in a graph at its second run (the first
    compiles) and replayed after that.

    ``inputs``: from ``call_inputs``; ``rows``: the row tables the kernels read the logits through;
    ``counts``: int32 [R] on the host, where each run leaves the emitted counts.
    """

    def __init__(
        self,
        inputs: VerifyInputs,
        rows: RowTable,
        counts: torch.Tensor,
        writer: Callable[[], None] | None,
    ) -> None:
        self.inputs, self.rows, self.counts, self.writer = inputs, rows, counts, writer
        self.plan = plan_for(inputs, row_table=True)
        self.graphs = inputs.target_logits.device.type == "cuda"
        self.runs = 0
        self.graph: torch.cuda.CUDAGraph | None = None

    @staticmethod
    def offset_of(bank: torch.Tensor | None, base: torch.Tensor | None) -> int:
        """Element offset of ``bank``'s first element from ``base``'s (any sign; one dtype)."""
        assert bank is not None and base is not None and bank.dtype == base.dtype
        difference = bank.data_ptr() - base.data_ptr()
        assert difference % bank.element_size() == 0
        return difference // bank.element_size()

    def run(self) -> None:
        """Launch the call and the copy of its counts (on CUDA asynchronous: wait on the stream)."""
        self.runs += 1
        if self.graph is not None:
            self.graph.replay()
        elif not self.graphs or self.runs == 1 or self.inputs.num_requests == 0:
            self.launch_once()
        else:
            # No cyclic garbage collection inside the capture: freeing another engine's graph there
            # (its memory pool's cudaFree) would invalidate it.
            collecting = gc.isenabled()
            gc.disable()
            try:
                self.graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
                    self.launch_once()
            finally:
                if collecting:
                    gc.enable()
            self.graph.replay()

    def release(self) -> None:
        """Drop the graph now (outside any other engine's capture) and the writer (a bound method of the
        verifier, which holds this call: no cycle left for the garbage collector)."""
        self.graph, self.writer = None, None

    def compile(self) -> None:
        """Compile the call's kernels into Triton's cache, launching none: what ``launch_once`` would
        compile at the call's first run (``spectune warm-up``; the writer is compiled apart)."""
        launch(self.inputs, self.plan, rows=self.rows, compile_only=True)

    def launch_once(self) -> None:
        """The step's writes, the kernels and the copy of the counts, launched eagerly (or captured)."""
        if self.writer is not None:
            self.writer()
        num_tokens = launch(self.inputs, self.plan, rows=self.rows)[1]
        self.counts.copy_(num_tokens, non_blocking=True)

"""``rejection_sample``: validate, plan, allocate and launch the Triton kernels.

``_plan.plan`` makes every policy choice from the sizes; ``launch`` carries a plan out. A small
grid is one launch of the small-grid kernel (``_small_grid.py``). Larger grids launch pass A
(``_verify_kernel.py``) and the decision (``_decision.py``), and with draft logits pass B and the
residual decision (``_residual_kernel.py``). No host synchronisation and no data-dependent
allocation, so a call can be captured in a CUDA graph. On the CPU the same kernels run under
Triton's interpreter, which must be switched on (``TRITON_INTERPRET=1``) before the first call
imports them. ``launch(..., compile_only=True)`` takes the same path but starts each kernel with
Triton's ``warmup`` (``start_kernel``): every variant the call needs is compiled into Triton's cache
and nothing runs (``spectune warm-up``).
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple, cast

import torch

from . import _plan
from ._arguments import Inputs, Logits, Outputs, RowTable, Sizes, VocabSizes, Workspace, allocate_workspace
from ._contract import METHODS, VerifyInputs, validate_inputs
from ._plan import LaunchPlan, tile_size_for

__all__ = [
    "RowTable",
    "interpreted",
    "launch",
    "plan_for",
    "rejection_sample",
    "sm_count",
    "start_kernel",
    "tile_size_for",
]

# int32 counters a device keeps for the small-grid kernel: four a request block of a call.
_COUNTER_INTS = 1 << 16
_sm_counts: dict[int, int] = {}
_counter_rings: dict[torch.device, torch.Tensor] = {}
_counter_offsets: dict[torch.device, int] = {}
_counter_lock = threading.Lock()


def sm_count(device: torch.device) -> int:
    """The streaming multiprocessors of a CUDA device (asked once per device)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _sm_counts:
        _sm_counts[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _sm_counts[index]


def rejection_sample(
    target_logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    draft_logits: torch.Tensor | None = None,
    *,
    temperature: torch.Tensor | None = None,
    seed: torch.Tensor | None = None,
    method: str = "standard",
    synthetic_conditional_rates: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify draft tokens against the target model with the Triton kernels.

    Args:
        target_logits: float32|bfloat16|float16 [R, K+1, V], raw logits (last dim contiguous);
            row K is the bonus row.
        draft_tokens: int32|int64 [R, K]; -1 (or any id outside [0, V)) is a placeholder: never
            accepted, nothing after it is accepted, and the token emitted there comes from the
            plain target distribution.
        draft_logits: float32|bfloat16|float16 [R, K, V] raw draft logits (last dim contiguous), or
            None for one-hot drafts.
        temperature: float32 [R]; 0 = greedy for that request. Applied to target and draft logits.
        seed: int64 [R]; a request's tokens depend only on its own inputs and seed.
        method: "standard" (accept while u < p/q, resample from max(p - q, 0)), "block" (Sun et
            al. 2024 block verification) or "synthetic" (accept draft i with a given rate).
        synthetic_conditional_rates: float32 [K], P(accept draft i | drafts < i accepted); required
            iff method == "synthetic".

    Returns:
        tokens: int64 [R, K+1], accepted drafts then one emitted token, -1 after it.
        num_tokens: int32 [R], accepted drafts + 1 (the emitted token included).

    Tensors on the CPU run under Triton's interpreter (``TRITON_INTERPRET=1`` must be set before
    the first call); tensors on a CUDA device run compiled.
    """
    inputs = validate_inputs(
        target_logits, draft_tokens, draft_logits, temperature, seed, method, synthetic_conditional_rates
    )
    return launch(inputs)


def plan_for(inputs: VerifyInputs, **overrides: object) -> LaunchPlan:
    """The plan ``launch`` follows for these inputs, with ``overrides`` for tests and benchmarks:
    LaunchPlan fields, or ``plan``'s ``tile``, ``aligned`` (False plans as if no bulk copy could
    address the logits) and ``row_table`` (plans for ``launch(..., rows=)``). Raises ``ValueError``
    where the inputs cannot run here."""
    interpreting = _check_device(inputs)
    target, draft = inputs.target_logits, inputs.draft_logits
    tile = cast("int | None", overrides.pop("tile", None))
    row_table = bool(overrides.pop("row_table", False))
    aligned = bool(overrides.pop("aligned", True)) and all(_bulk_copyable(t) for t in (target, draft) if t is not None)
    chosen = _plan.plan(
        inputs.num_requests,
        inputs.num_drafts,
        inputs.vocab_size,
        target.dtype,
        draft is not None,
        inputs.method,
        1 if interpreting else sm_count(target.device),
        interpreting,
        tile=tile,
        aligned=aligned,
        row_table=row_table,
    )
    return dataclasses.replace(chosen, **overrides)  # type: ignore[arg-type]


def launch(
    inputs: VerifyInputs,
    plan: LaunchPlan | None = None,
    rows: RowTable | None = None,
    *,
    compile_only: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the kernels on validated inputs as ``plan`` (default ``plan_for(inputs)``) says.

    ``rows``: read each logit row where the table says (the simulator's banks) instead of at
    ``inputs``' strides; the plan then uses plain loads (a bulk copy addresses a tensor, not a table).
    ``compile_only``: compile every kernel variant the call needs into Triton's cache and launch none
    (the outputs are returned unwritten); under the interpreter nothing is compiled.
    """
    if plan is None:
        plan = plan_for(inputs, row_table=rows is not None)
    else:
        _check_device(inputs)
    if rows is not None:
        _check_row_table(inputs, rows, plan)
    num_requests, num_drafts, device = inputs.num_requests, inputs.num_drafts, inputs.target_logits.device
    outputs = Outputs(
        torch.empty((num_requests, num_drafts + 1), dtype=torch.int64, device=device),
        torch.empty((num_requests,), dtype=torch.int32, device=device),
    )
    if num_requests == 0:
        return outputs
    num_tiles = -(-inputs.vocab_size // plan.tile)
    call = _Call(
        plan,
        _logits(inputs, rows),
        _kernel_inputs(inputs),
        allocate_workspace(num_requests, num_drafts, num_tiles, device),
        Sizes(num_requests, num_drafts, inputs.vocab_size, num_tiles),
        outputs,
        METHODS.index(inputs.method),
        inputs.draft_logits is not None,
        -(-num_requests // plan.block_requests),
        compile_only,
    )
    if plan.small_grid:
        _launch_small_grid(call)
    else:
        _launch_passes(call, inputs)
    return outputs


class _Call(NamedTuple):
    """What every launch of one call takes."""

    plan: LaunchPlan
    logits: Logits
    inputs: Inputs
    work: Workspace
    sizes: Sizes
    outputs: Outputs
    method: int  # METHODS index
    has_draft: bool
    num_blocks: int  # request blocks of BLOCK_R requests
    compile_only: bool = False  # start each kernel with Triton's warmup: compiled, not launched

    def start(self, kernel: Any, grid: tuple[int, ...]) -> Callable[..., object]:
        return start_kernel(kernel, grid, self.compile_only)

    def size_arguments(self) -> tuple[int, int, VocabSizes]:
        """The kernels' ``num_requests``, ``num_drafts`` and ``vocab_sizes``."""
        sizes = self.sizes
        return sizes.num_requests, sizes.num_drafts, VocabSizes(sizes.vocab, sizes.num_tiles)


def _logits(inputs: VerifyInputs, rows: RowTable | None) -> Logits:
    """The ``Logits`` group: rows at the tensors' strides, or (``rows``) through the row table."""
    from triton.language import constexpr  # (imported with the kernels, on first use)

    target, draft = inputs.target_logits, inputs.draft_logits
    if rows is None:
        strides = (
            target.stride(0),
            target.stride(1),
            draft.stride(0) if draft is not None else 0,
            draft.stride(1) if draft is not None else 0,
        )
        tables = (inputs.seed, inputs.seed)  # never read
    else:
        strides = (0, 0, 0, 0)
        tables = (rows.target, rows.draft if rows.draft is not None else rows.target)
    return Logits(target, draft if draft is not None else target, *strides, *tables, constexpr(rows is not None))


def _kernel_inputs(inputs: VerifyInputs) -> Inputs:
    rates = inputs.synthetic_conditional_rates
    temperature = inputs.temperature.contiguous()
    return Inputs(
        inputs.draft_tokens.contiguous(),
        temperature,
        inputs.seed.contiguous(),
        rates.contiguous() if rates is not None else temperature,
    )


def _launch_passes(call: _Call, inputs: VerifyInputs) -> None:
    """Pass A and the decision, and with draft logits pass B and the residual decision."""
    plan, sizes, has_draft = call.plan, call.sizes, call.has_draft
    verify_module, decision_module, _, _ = _kernel_modules()
    common = dict(TILE=plan.tile, BLOCK_R=plan.block_requests)
    padding = dict(ROWS_PAD=plan.rows_pad, TILES_PAD=plan.tiles_pad)
    target_desc, draft_desc = _descriptors(inputs.target_logits, inputs.draft_logits, plan)
    pass_a_rows = sizes.num_drafts + 1 + (sizes.num_drafts if has_draft else 0)  # draft rows: programs of their own
    capped = plan.pass_a_registers is not None and not plan.interpreting
    call.start(verify_module._verify_kernel, (call.num_blocks, pass_a_rows, -(-sizes.num_tiles // plan.pass_a_tiles)))(
        call.logits,
        target_desc,
        draft_desc,
        call.inputs,
        call.work,
        *call.size_arguments(),
        HAS_DRAFT=has_draft,
        TILES_PER_PROGRAM=plan.pass_a_tiles,
        STAGES=plan.stages,
        USE_TMA=plan.bulk_copies,
        num_warps=plan.pass_a_warps,
        num_stages=1,
        **common,
        **({"maxnreg": plan.pass_a_registers} if capped else {}),
    )
    call.start(decision_module._decide_kernel, (call.num_blocks,))(
        call.logits,
        call.inputs,
        call.work,
        *call.size_arguments(),
        call.outputs,
        METHOD=call.method,
        HAS_DRAFT=has_draft,
        num_warps=plan.decide_warps,
        **common,
        **padding,
    )
    if has_draft and sizes.num_drafts > 0:
        _launch_residuals(call, inputs.method == "block", common, padding)


def _launch_residuals(call: _Call, block: bool, common: dict[str, int], padding: dict[str, int]) -> None:
    """Pass B and the residual decision (draft logits): K slots for block verification, else one."""
    plan, sizes = call.plan, call.sizes
    residual_module = _kernel_modules()[2]
    slots = sizes.num_drafts if block else 1
    call.start(residual_module._residual_kernel, (call.num_blocks, slots, -(-sizes.num_tiles // plan.residual_tiles)))(
        call.logits,
        call.inputs,
        call.work,
        *call.size_arguments(),
        SLOTS=slots,
        ROWS_PAD=plan.rows_pad,
        TILES_PER_PROGRAM=plan.residual_tiles,
        num_warps=plan.direct_warps,
        **common,
    )
    call.start(residual_module._decide_residual_kernel, (call.num_blocks,))(
        call.logits,
        call.inputs,
        call.work,
        *call.size_arguments(),
        call.outputs,
        METHOD=call.method,
        num_warps=plan.direct_warps,
        **common,
        **padding,
    )


def _launch_small_grid(call: _Call) -> None:
    """The whole call as one launch of ``_small_grid_kernel`` (with draft logits, two around the
    barrier where it cannot be used: under the interpreter, or a grid forced past two programs an SM)."""
    plan, sizes, has_draft = call.plan, call.sizes, call.has_draft
    device = call.logits.target.device
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    counters = _counters(device, 4 * call.num_blocks)
    # The barrier needs every program resident: two 8-warp programs an SM under the register cap, and
    # a cooperative launch, which the driver refuses rather than leaving a program waiting for ever.
    barrier = plan.barrier and has_draft
    options = {} if plan.interpreting else {"maxnreg": _plan.SMALL_GRID_REGISTERS, "launch_cooperative_grid": barrier}
    module = _kernel_modules()[3]
    for stage in (1, 2) if has_draft and not barrier else (0,):
        call.start(module._small_grid_kernel, (call.num_blocks, sizes.num_drafts + 1, sizes.num_tiles))(
            call.logits,
            call.inputs,
            call.work,
            counters,
            *call.size_arguments(),
            call.outputs,
            METHOD=call.method,
            HAS_DRAFT=has_draft,
            STAGE=stage,
            TILE=plan.tile,
            BLOCK_R=plan.block_requests,
            ROWS_PAD=plan.rows_pad,
            TILES_PAD=plan.tiles_pad,
            num_warps=plan.small_grid_warps,
            num_stages=1,
            **options,
        )


def start_kernel(kernel: Any, grid: tuple[int, ...], compile_only: bool) -> Callable[..., object]:
    """``kernel[grid]``, to be called with the kernel's arguments; with ``compile_only`` Triton's
    ``kernel.warmup`` at that grid instead, which compiles the variant those arguments select into
    Triton's cache (or loads it from there) and launches nothing, and then its launcher."""
    if not compile_only:
        return kernel[grid]

    def compile_kernel(*args: Any, **kwargs: Any) -> object:
        compiled = kernel.warmup(*args, grid=grid, **kwargs)
        if compiled is not None:  # None under the interpreter, which compiles nothing
            # Triton builds a variant's C launcher (into its cache too) where the variant is first
            # launched; asking for it builds it now and launches nothing.
            compiled.run  # noqa: B018
        return compiled

    return compile_kernel


def _check_row_table(inputs: VerifyInputs, rows: RowTable, plan: LaunchPlan) -> None:
    """Raise unless ``rows`` fits the call (shapes, dtype, device; no bulk copies)."""
    num_requests, num_drafts = inputs.num_requests, inputs.num_drafts
    device = inputs.target_logits.device
    wanted = [("rows.target", rows.target, (num_requests, num_drafts + 1))]
    if inputs.draft_logits is not None:
        if rows.draft is None:
            raise ValueError("rows.draft: draft_logits were given, so draft rows are required, got None")
        wanted.append(("rows.draft", rows.draft, (num_requests, num_drafts)))
    for name, table, shape in wanted:
        if (
            table.dtype != torch.int64
            or tuple(table.shape) != shape
            or not table.is_contiguous()
            or table.device != device
        ):
            raise ValueError(
                f"{name}: must be a contiguous int64 tensor {list(shape)} on {device}, "
                f"got {table.dtype} {list(table.shape)} on {table.device}"
            )
    if plan.bulk_copies:
        raise ValueError("plan.bulk_copies: a row table is read with plain loads, got True")


def _bulk_copyable(logits: torch.Tensor) -> bool:
    """Whether a tensor-memory-access descriptor can address these logits (16-byte base and strides)."""
    element = logits.element_size()
    return logits.data_ptr() % 16 == 0 and all((stride * element) % 16 == 0 for stride in logits.stride()[:-1])


def _descriptors(target: torch.Tensor, draft: torch.Tensor | None, plan: LaunchPlan) -> tuple[object, object]:
    """Pass A's bulk-copy descriptors of the target and draft logits: [R, rows, V] tensors whose box
    is one tile of one row for ``block_requests`` requests (without bulk copies the target itself,
    which the kernel never reads then)."""
    if not plan.bulk_copies:
        return target, target
    from triton.tools.tensor_descriptor import TensorDescriptor  # Triton comes with the first call, not the package

    box = [plan.block_requests, 1, plan.tile]
    target_desc = TensorDescriptor(target, list(target.shape), list(target.stride()), box)
    if draft is None:
        return target_desc, target_desc
    return target_desc, TensorDescriptor(draft, list(draft.shape), list(draft.stride()), box)


def _kernel_modules() -> tuple[ModuleType, ModuleType, ModuleType, ModuleType]:
    """Import the kernels on first use, so TRITON_INTERPRET set after ``import spectune`` still counts."""
    from . import _decision, _residual_kernel, _small_grid, _verify_kernel

    return _verify_kernel, _decision, _residual_kernel, _small_grid


def _counters(device: torch.device, needed: int) -> torch.Tensor:
    """int32 [needed] whose ticket and arrival words are zero, from the device's counter ring.

    The small-grid kernel hands its tickets and barrier arrivals back at zero (a barrier's
    generation word moves on, which its protocol allows), so each call takes the next slice of a
    buffer zeroed once, with no memset in the call; calls running at once on several streams get
    different slices unless 16K int32 of them are in flight. The ring is made on a device's first
    call outside CUDA graph capture; a call captured before that zeroes its own counters (a memset
    in the graph).
    """
    capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
    with _counter_lock:
        ring = _counter_rings.get(device)
        if ring is None and not capturing and needed <= _COUNTER_INTS:
            ring = _counter_rings[device] = torch.zeros(_COUNTER_INTS, dtype=torch.int32, device=device)
        if ring is None or needed > _COUNTER_INTS:
            return torch.zeros(needed, dtype=torch.int32, device=device)
        offset = _counter_offsets.get(device, 0)
        if offset + needed > _COUNTER_INTS:
            offset = 0
        _counter_offsets[device] = offset + needed
        return ring[offset : offset + needed]


def interpreted() -> bool:
    """Whether this process runs the kernels under Triton's interpreter.

    Triton decides when ``@triton.jit`` runs, from ``TRITON_INTERPRET`` as the program set it before the
    kernels were first imported: once they are, their own state answers (the variable's value now may
    differ); before, the variable as Triton reads it."""
    verify_module = sys.modules.get(f"{__package__}._verify_kernel")
    if verify_module is None:
        import triton  # Triton comes with the first call, not the package

        return bool(triton.knobs.runtime.interpret)
    from triton.runtime.interpreter import InterpretedFunction  # loaded with the kernels by now

    return isinstance(verify_module._verify_kernel, InterpretedFunction)


def _check_device(inputs: VerifyInputs) -> bool:
    """Raise unless the inputs can run here; return True when the kernels run under the interpreter."""
    device = inputs.target_logits.device
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"target_logits: device must be cpu or cuda, got {device}")
    _kernel_modules()
    interpreting = interpreted()
    if device.type == "cpu" and not interpreting:
        raise ValueError(
            "target_logits: is on the CPU, which runs the Triton kernels under the interpreter, but this process "
            "loaded them compiled; set TRITON_INTERPRET=1 before it first imports them (or pass CUDA tensors)"
        )
    for name, tensor in (("target_logits", inputs.target_logits), ("draft_logits", inputs.draft_logits)):
        if tensor is not None and tensor.shape[-1] > 1 and tensor.stride(-1) != 1:
            raise ValueError(f"{name}: last dimension must be contiguous (stride 1), got stride {tensor.stride(-1)}")
    return interpreting

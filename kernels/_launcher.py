"""``rejection_sample``: validate, allocate, pick the grid and launch the Triton kernels.

A grid of at most two programs an SM (R = 1 and other small batches) is one launch of the
small-grid kernel (``_small_grid.py``). Larger grids launch pass A and the decision, and with draft
logits pass B and the residual decision. No host synchronisation and no data-dependent allocation,
so a call can be captured in a CUDA graph. The read schedule (plain loads or bulk copies, tiles
per program, warps) is chosen per call from the grid size and dtype; it never changes a token. On
the CPU the same kernels run under Triton's interpreter, which must be switched on
(``TRITON_INTERPRET=1``) before the first call imports them.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from types import ModuleType

import torch

from ._contract import DEFAULT_TILE, METHODS, VerifyInputs, validate_inputs

__all__ = ["launch", "rejection_sample", "tile_size_for"]

# Elements per interpreted block operation on the CPU: the interpreter's cost is per operation, so
# a program there handles as many requests as fit (the result does not depend on it).
_INTERPRETER_BLOCK_ELEMENTS = 16384
# The small-grid kernel (one launch; with draft logits a grid barrier, so every program resident)
# while the grid has at most this many programs per SM, where occupancy does not matter but a
# launch does. Its register cap keeps two 8-warp programs on an SM.
_FUSE_PROGRAMS_PER_SM = 2
_SMALL_GRID_REGISTERS = 128
# int32 counters a device keeps for the small-grid kernel: four a request block of a call.
_COUNTER_INTS = 1 << 16
# Pass A reads several tiles of a row per program while the grid keeps this many programs an SM,
# with _STAGES bulk copies in flight per program.
_PROGRAMS_PER_SM = 16
_STAGES = 3
# Bulk copies pay only where a program streams at least this many tiles.
_BULK_TILES_PER_PROGRAM = 16
# Up to this many tiles an SM a program reads one tile (the loop's prologue did not pay: R=64, K=3
# measured 48 µs one-hot with one tile a program, 52 with two).
_ONE_TILE_PROGRAMS_PER_SM = 128
# Pass A's register caps with plain loads (see launch).
_SIXTEEN_BIT_REGISTERS = 72
_FP32_REGISTERS = 80
# 16-bit pass A with plain loads reads up to this many tiles of a row a program in grids past
# _ONE_TILE_PROGRAMS_PER_SM (bf16 R=256, K=7, draft logits: 333 -> 320 µs; 2 or 8 measured slower).
_SIXTEEN_BIT_TILES_PER_PROGRAM = 4
_sm_counts: dict[int, int] = {}
_counter_rings: dict[torch.device, torch.Tensor] = {}
_counter_offsets: dict[torch.device, int] = {}
_counter_lock = threading.Lock()


def _sm_count(device: torch.device) -> int:
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


def tile_size_for(vocab: int) -> int:
    """The sampling tile for a vocabulary: DEFAULT_TILE, or the next power of two >= V if smaller."""
    return min(DEFAULT_TILE, _next_power_of_two(vocab))


def _next_power_of_two(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _tiles_per_program(num_rows: int, num_tiles: int, sm_count: int, interpreting: bool) -> int:
    """Tiles of one row per pass-A program: one for small grids, else as many as keep
    _PROGRAMS_PER_SM programs an SM busy. Under the interpreter two, so that the tile loop and a
    ragged last chunk are exercised.
    """
    if interpreting:
        return min(2, num_tiles)
    per_program = 1
    if num_rows * num_tiles <= _ONE_TILE_PROGRAMS_PER_SM * sm_count:
        return per_program
    while per_program * 2 <= num_tiles and num_rows * -(-num_tiles // (per_program * 2)) >= _PROGRAMS_PER_SM * sm_count:
        per_program *= 2
    return per_program


def _bulk_copyable(logits: torch.Tensor) -> bool:
    """Whether a tensor-memory-access descriptor can address these logits (16-byte base and strides)."""
    element = logits.element_size()
    return logits.data_ptr() % 16 == 0 and all((stride * element) % 16 == 0 for stride in logits.stride()[:-1])


def _descriptor(logits: torch.Tensor, block_requests: int, tile: int):
    """A [R, rows, V] descriptor whose box is one tile of one row for ``block_requests`` requests."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor(logits, list(logits.shape), list(logits.stride()), [block_requests, 1, tile])


def _padded(n: int, minimum: int) -> int:
    """Block width for n rows or tiles; compiled, a floor keeps the number of kernel variants small."""
    return max(minimum, _next_power_of_two(n))


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


@dataclass(frozen=True)
class _Workspace:
    """Scratch tensors of one call (float32 / int32 views of two allocations, contents undefined)."""

    tile_max: torch.Tensor
    tile_sum: torch.Tensor
    draft_tile_max: torch.Tensor
    draft_tile_sum: torch.Tensor
    at_draft: torch.Tensor
    excluded_sum: torch.Tensor
    draft_at_draft: torch.Tensor
    row_info: torch.Tensor
    residual_mass: torch.Tensor
    draft_first_max: torch.Tensor
    plan: torch.Tensor
    tile_token: torch.Tensor
    excluded_token: torch.Tensor
    residual_token: torch.Tensor


def _allocate(num_requests: int, num_drafts: int, num_tiles: int, device: torch.device) -> _Workspace:
    rows = num_requests * (num_drafts + 1)
    drafts = num_requests * num_drafts
    float_sizes = [rows * num_tiles, rows * num_tiles, drafts * num_tiles, drafts * num_tiles, rows, rows, drafts]
    float_sizes += [drafts * 5, drafts * num_tiles]
    int_sizes = [rows, 2 * num_requests, rows * num_tiles, rows, drafts * num_tiles]
    floats = torch.empty(sum(float_sizes) + 1, dtype=torch.float32, device=device)
    ints = torch.empty(sum(int_sizes) + 1, dtype=torch.int32, device=device)
    return _Workspace(*_split(floats, float_sizes), *_split(ints, int_sizes))


def _split(buffer: torch.Tensor, sizes: list[int]) -> list[torch.Tensor]:
    views, start = [], 0
    for size in sizes:
        views.append(buffer[start : start + max(size, 1)])
        start += size
    return views


def _check_device(inputs: VerifyInputs) -> bool:
    """Raise unless the inputs can run here; return True when running under the interpreter."""
    device = inputs.target_logits.device
    interpreting = os.environ.get("TRITON_INTERPRET") == "1"
    if device.type == "cpu" and not interpreting:
        raise ValueError(
            "target_logits: is on the CPU, which runs the Triton kernels under the interpreter; set "
            "TRITON_INTERPRET=1 before the first call (or pass CUDA tensors), got TRITON_INTERPRET unset"
        )
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"target_logits: device must be cpu or cuda, got {device}")
    verify_module = _kernel_modules()[0]
    from triton.runtime.interpreter import InterpretedFunction

    compiled_here = not isinstance(verify_module._verify_kernel, InterpretedFunction)
    if device.type == "cpu" and compiled_here:
        raise ValueError(
            "target_logits: is on the CPU, but the kernels were first loaded without TRITON_INTERPRET=1 "
            "in this process; set it before the first call"
        )
    for name, tensor in (("target_logits", inputs.target_logits), ("draft_logits", inputs.draft_logits)):
        if tensor is not None and tensor.shape[-1] > 1 and tensor.stride(-1) != 1:
            raise ValueError(f"{name}: last dimension must be contiguous (stride 1), got stride {tensor.stride(-1)}")
    return interpreting


def launch(
    inputs: VerifyInputs,
    *,
    tile_size: int | None = None,
    block_requests: int | None = None,
    fused: bool | None = None,
    barrier: bool | None = None,
    num_warps: int | None = None,
    tiles_per_program: int | None = None,
    stages: int | None = None,
    bulk_copies: bool | None = None,
    decide_warps: int | None = None,
    split_draft: bool | None = None,
    max_registers: int | None = None,
    residual_tiles: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the kernels on validated inputs.

    ``tile_size`` (a power of two; part of the sampling scheme, so the twin must use the same),
    ``block_requests`` (requests per program), ``fused`` (the small-grid kernel, one launch;
    default: when the grid has at most two programs an SM), ``barrier`` (with draft logits, the
    small-grid kernel waits at a grid barrier instead of being launched twice around it; default:
    where every program can be resident, never under the interpreter), ``num_warps`` (pass A's, or the small-grid kernel's),
    ``tiles_per_program`` (pass A's tiles of one row per program, read in turn), ``stages`` (copies
    in flight per program), ``bulk_copies`` (pass A reads through tensor-memory-access descriptors;
    default: for large fp32 grids whose logits' addresses and strides allow), ``decide_warps``
    (the first decision's), ``split_draft`` (pass A reads draft rows in programs of their own
    instead of beside their target rows), ``max_registers`` (pass A's registers per thread,
    compiled only; default: a cap with plain loads) and ``residual_tiles`` (pass B's tiles of a row
    per program) are for tests and benchmarks; none changes a token.
    """
    interpreting = _check_device(inputs)
    target = inputs.target_logits
    num_requests, num_rows, vocab = target.shape
    num_drafts = num_rows - 1
    device = target.device
    tokens = torch.empty((num_requests, num_rows), dtype=torch.int64, device=device)
    num_tokens = torch.empty((num_requests,), dtype=torch.int32, device=device)
    if num_requests == 0:
        return tokens, num_tokens
    tile = tile_size or tile_size_for(vocab)
    num_tiles = -(-vocab // tile)
    if block_requests is None:
        block_requests = 1
        if interpreting:
            block_requests = min(_next_power_of_two(num_requests), max(1, _INTERPRETER_BLOCK_ELEMENTS // tile))
    num_blocks = -(-num_requests // block_requests)
    sm_count = 1 if interpreting else _sm_count(device)
    # One launch where the grid is too small to need occupancy: there every program can be resident,
    # so with draft logits the small-grid kernel can wait at a grid barrier.
    small = not interpreting and num_blocks * num_rows * num_tiles <= _FUSE_PROGRAMS_PER_SM * sm_count
    if fused is None:
        fused = small
    draft = inputs.draft_logits
    has_draft = draft is not None
    work = _allocate(num_requests, num_drafts, num_tiles, device)
    draft_tokens = inputs.draft_tokens.contiguous()
    temperature = inputs.temperature.contiguous()
    seed = inputs.seed.contiguous()
    rates = inputs.synthetic_conditional_rates
    rates = rates.contiguous() if rates is not None else temperature
    shared = dict(
        num_requests=num_requests, num_drafts=num_drafts, vocab=vocab, num_tiles=num_tiles,
        target_stride_r=target.stride(0), target_stride_k=target.stride(1),
        draft_stride_r=draft.stride(0) if has_draft else 0, draft_stride_k=draft.stride(1) if has_draft else 0,
        TILE=tile, BLOCK_R=block_requests,
    )
    padding = dict(ROWS_PAD=_padded(num_rows, 1 if interpreting else 8),
                   TILES_PAD=_padded(num_tiles, 1 if interpreting else 32))
    method = METHODS.index(inputs.method)
    verify_module, decision_module, residual_module, small_module = _kernel_modules()
    if fused:
        _launch_small_grid(
            small_module, inputs, work, tokens, num_tokens, draft_tokens, temperature, seed, rates,
            num_blocks, num_rows, num_tiles, shared, padding, method, interpreting,
            small if barrier is None else barrier, num_warps or (8 if tile >= 4096 else 4),
        )
        return tokens, num_tokens
    loop_tiles = _tiles_per_program(num_blocks * num_rows, num_tiles, sm_count, interpreting)
    if bulk_copies is None:
        # Only where a program streams many tiles (R=256, K=7 at V=128256: one-hot 265 vs 269 µs,
        # draft logits 560 vs 572); plain loads, one tile a program, won every smaller fp32 grid
        # measured (R=64, K=7, draft logits: 157 vs 184 µs) and every 16-bit one. The interpreter
        # takes them wherever it can, so the CPU tests cover that path.
        bulk_copies = (
            target.dtype == torch.float32
            and (interpreting or loop_tiles >= _BULK_TILES_PER_PROGRAM)
            and all(_bulk_copyable(t) for t in (target, draft) if t is not None)
        )
    if tiles_per_program is None:
        if bulk_copies or interpreting:
            tiles_per_program = loop_tiles
        elif target.element_size() == 2:
            tiles_per_program = min(loop_tiles, _SIXTEEN_BIT_TILES_PER_PROGRAM)
        else:
            tiles_per_program = 1
    num_chunks = -(-num_tiles // tiles_per_program)
    if stages is None:
        stages = _STAGES if bulk_copies and tiles_per_program > 1 else 1
    # Warps per program. Pass A: 4 (with bulk copies 3 programs an SM at 168 registers, 8 warps
    # measured 13% slower one-hot; with plain loads 8 warps measured 30% slower with draft logits at
    # R=64, K=7). Pass B and the residual decision: 8 for fp32 tiles of 4096, else 4. The first
    # decision likewise, but 4 with draft logits once its programs outnumber the SMs: at 8 warps it
    # needs 186-191 registers, one program an SM, so R=256 ran in two waves (K=7: 18.7 against
    # 12.2 µs at 4 warps; at R=64, one wave, 8 warps stayed ahead by 1-2 µs a call).
    direct_warps = 8 if tile >= 4096 and target.dtype == torch.float32 else 4
    if decide_warps is None:
        decide_warps = 4 if has_draft and num_blocks > sm_count else direct_warps
    if num_warps is None:
        num_warps = 4
    target_desc = draft_desc = target  # placeholders: the kernel reads them only when bulk_copies
    if bulk_copies:
        target_desc = _descriptor(target, block_requests, tile)
        draft_desc = _descriptor(draft, block_requests, tile) if has_draft else target_desc
    if split_draft is None:
        # fp32 at R=256, K=7 with draft logits: pass A 458 µs against 512 beside the target rows (R=64,
        # K=7: 148 against 159 µs per call); bf16 likewise once its registers are capped (below).
        split_draft = True
    if max_registers is None and not (interpreting or bulk_copies) and num_warps == 4 and (
        tiles_per_program == 1 or target.element_size() == 2
    ):
        # A program holds one tile in flight (16 KB fp32, 8 KB 16-bit), so occupancy sets the read
        # rate. 16-bit, one tile a program: 87 registers give 5 programs an SM, capped at 72 (ptxas
        # spills 12 bytes) 7; bf16 R=256, K=7: one-hot 197 -> 170 µs, draft logits 369 -> 334 (cap
        # 80: 181 / 353; 64, which spills 44 bytes: 199 / 346). 16-bit, 4 tiles a program: 96-106
        # registers, capped 0-12 bytes spilled; draft logits uncapped 406 µs against 320 capped.
        # fp32: 96 -> 78 registers (no spill), 5 -> 6 programs; R=64, K=3: one-hot 48.0 -> 46.7,
        # draft 82.8 -> 81.0 µs (cap 72: 47.9 / 84.4).
        max_registers = _SIXTEEN_BIT_REGISTERS if target.element_size() == 2 else _FP32_REGISTERS
    split_draft = split_draft and has_draft and num_drafts > 0
    pass_a_rows = num_rows + (num_drafts if split_draft else 0)
    verify_module._verify_kernel[(num_blocks, pass_a_rows, num_chunks)](
        target_ptr=target, draft_logits_ptr=draft if has_draft else target,
        target_desc=target_desc, draft_desc=draft_desc, draft_tokens_ptr=draft_tokens, temperature_ptr=temperature,
        tile_max_ptr=work.tile_max, tile_sum_ptr=work.tile_sum, draft_first_max_ptr=work.draft_first_max,
        draft_tile_max_ptr=work.draft_tile_max, draft_tile_sum_ptr=work.draft_tile_sum,
        at_draft_ptr=work.at_draft, excluded_sum_ptr=work.excluded_sum, draft_at_draft_ptr=work.draft_at_draft,
        HAS_DRAFT=has_draft, TILES_PER_PROGRAM=tiles_per_program, STAGES=stages, USE_TMA=bulk_copies,
        SPLIT_DRAFT=split_draft, num_warps=num_warps, num_stages=1, **shared,
        **({"maxnreg": max_registers} if max_registers and not interpreting else {}),
    )
    decision_module._decide_kernel[(num_blocks,)](
        target_ptr=target, draft_tokens_ptr=draft_tokens, temperature_ptr=temperature, seed_ptr=seed,
        rates_ptr=rates, tile_max_ptr=work.tile_max, tile_sum_ptr=work.tile_sum, draft_first_max_ptr=work.draft_first_max,
        draft_tile_max_ptr=work.draft_tile_max, draft_tile_sum_ptr=work.draft_tile_sum,
        at_draft_ptr=work.at_draft, excluded_sum_ptr=work.excluded_sum, draft_at_draft_ptr=work.draft_at_draft,
        plan_ptr=work.plan, row_info_ptr=work.row_info, tokens_ptr=tokens, num_tokens_ptr=num_tokens,
        HAS_DRAFT=has_draft, METHOD=method, num_warps=decide_warps,
        **{k: v for k, v in shared.items() if not k.startswith("draft_stride")}, **padding,
    )
    if has_draft and num_drafts > 0:
        slots = num_drafts if inputs.method == "block" else 1
        if residual_tiles is None:
            # Block verification's grid has K slots, mostly without a planned row: past
            # _ONE_TILE_PROGRAMS_PER_SM, two tiles a program halve the programs (bf16 R=256, K=7: 351 ->
            # 342 µs; fp32 532 -> 527). Smaller grids need the programs (fp32 R=16, K=3: 37.0 -> 39.6),
            # and standard reads one row (bf16 R=64, K=7: 104 -> 108 with 2).
            many = num_blocks * slots * num_tiles > _ONE_TILE_PROGRAMS_PER_SM * sm_count
            residual_tiles = min(2, num_tiles) if interpreting or (slots > 1 and many) else 1
        residual_module._residual_kernel[(num_blocks, slots, -(-num_tiles // residual_tiles))](
            target_ptr=target, draft_logits_ptr=draft, temperature_ptr=temperature, plan_ptr=work.plan,
            row_info_ptr=work.row_info, residual_mass_ptr=work.residual_mass, SLOTS=slots,
            ROWS_PAD=padding["ROWS_PAD"], TILES_PER_PROGRAM=residual_tiles, num_warps=direct_warps, **shared,
        )
        residual_module._decide_residual_kernel[(num_blocks,)](
            target_ptr=target, draft_logits_ptr=draft, draft_tokens_ptr=draft_tokens,
            temperature_ptr=temperature, seed_ptr=seed, tile_max_ptr=work.tile_max, tile_sum_ptr=work.tile_sum,
            plan_ptr=work.plan, row_info_ptr=work.row_info, residual_mass_ptr=work.residual_mass,
            tokens_ptr=tokens, num_tokens_ptr=num_tokens, METHOD=method, num_warps=direct_warps,
            **shared, **padding,
        )
    return tokens, num_tokens


def _launch_small_grid(
    module: ModuleType, inputs: VerifyInputs, work: _Workspace, tokens: torch.Tensor, num_tokens: torch.Tensor,
    draft_tokens: torch.Tensor, temperature: torch.Tensor, seed: torch.Tensor, rates: torch.Tensor,
    num_blocks: int, num_rows: int, num_tiles: int, shared: dict, padding: dict, method: int,
    interpreting: bool, barrier: bool, num_warps: int,
) -> None:
    """The whole call as one launch of ``_small_grid_kernel`` (with draft logits, two around the
    barrier where it cannot be used: under the interpreter, or a grid forced past two programs an SM)."""
    target, draft = inputs.target_logits, inputs.draft_logits
    has_draft = draft is not None
    if barrier and interpreting:
        raise ValueError("barrier: the interpreter runs programs one at a time, so no grid barrier can open; got True")
    device = target.device
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    counters = _counters(device, 4 * num_blocks)
    # The barrier needs every program resident: two 8-warp programs an SM under the register cap, and
    # a cooperative launch, which the driver refuses rather than leaving a program waiting for ever.
    options = {} if interpreting else {"maxnreg": _SMALL_GRID_REGISTERS, "launch_cooperative_grid": has_draft and barrier}
    for stage in (0,) if barrier or not has_draft else (1, 2):
        module._small_grid_kernel[(num_blocks, num_rows, num_tiles)](
            target_ptr=target, draft_logits_ptr=draft if has_draft else target, draft_tokens_ptr=draft_tokens,
            temperature_ptr=temperature, seed_ptr=seed, rates_ptr=rates,
            tile_max_ptr=work.tile_max, tile_sum_ptr=work.tile_sum, tile_token_ptr=work.tile_token,
            draft_tile_max_ptr=work.draft_tile_max, draft_tile_sum_ptr=work.draft_tile_sum,
            at_draft_ptr=work.at_draft, excluded_sum_ptr=work.excluded_sum, excluded_token_ptr=work.excluded_token,
            draft_at_draft_ptr=work.draft_at_draft, plan_ptr=work.plan, row_info_ptr=work.row_info,
            residual_mass_ptr=work.residual_mass, residual_token_ptr=work.residual_token, counter_ptr=counters,
            tokens_ptr=tokens, num_tokens_ptr=num_tokens,
            METHOD=method, HAS_DRAFT=has_draft, STAGE=stage, num_warps=num_warps, num_stages=1,
            **shared, **padding, **options,
        )

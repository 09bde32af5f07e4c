"""How a call runs: every launch-policy choice, made from sizes alone (no tensors, no device).

``plan`` is pure, so the CPU tests cover it; ``_launcher.launch`` only carries a plan out. None of
the choices changes a token (the sampling scheme depends on the tile size only, and the tile is
fixed by V). Tests and benchmarks try other schedules with ``dataclasses.replace(plan(...), ...)``.

Each constant below is a measurement on an H200 (V = 128256 unless said); ``benchmarks/README.md``
keeps the tuning table, keyed by these names, with the numbers that chose them.

Compiled variants. Every field of ``LaunchPlan`` but ``interpreting`` is compiled in (a constexpr,
a warp count or a register cap), so each distinct plan is a distinct set of kernels. No field
equals R: R moves a plan only between a few buckets (small grid; pass A's tiles a program, 1 up
to T; bulk copies; the first decision's warps past one wave; pass B's tiles a program), so over
R = 1..512 a shape (K, V, dtype, draft logits, method) compiles at most six plans
(``tests/kernels/test_plan.py``). R and K reach the kernels as plain runtime arguments, so Triton adds
no variant of its own for them (``_arguments.VocabSizes``; ``tests/kernels/test_variants.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._contract import DEFAULT_TILE

__all__ = ["LaunchPlan", "plan", "tile_size_for"]

# The small-grid kernel (one launch; with draft logits a grid barrier, so every program resident)
# while the grid has at most this many programs an SM, where occupancy does not matter but a launch
# does. Its register cap keeps two 8-warp programs on an SM.
FUSE_PROGRAMS_PER_SM = 2
SMALL_GRID_REGISTERS = 128
# Up to this many tiles an SM a pass-A program reads one tile (a tile loop's prologue did not pay).
ONE_TILE_PROGRAMS_PER_SM = 128
# Past that, pass A reads several tiles of a row a program while the grid keeps this many programs an SM.
PROGRAMS_PER_SM = 16
# Bulk copies (TMA) pay only where a program streams at least this many tiles, this many in flight.
BULK_TILES_PER_PROGRAM = 16
BULK_STAGES = 3
# 16-bit pass A with plain loads reads at most this many tiles of a row a program.
SIXTEEN_BIT_TILES_PER_PROGRAM = 4
# Pass A's register caps with plain loads (occupancy sets the read rate of one tile in flight).
SIXTEEN_BIT_REGISTERS = 72
FP32_REGISTERS = 80
# fp32 pass A with draft logits reading its rows through a row table (the simulator's banks): the
# table's row starts spill 20 bytes under FP32_REGISTERS, none under this.
ROW_TABLE_REGISTERS = 88
# Under the interpreter: elements per block operation (its cost is per operation, so a program
# handles as many requests as fit), and at most two tiles a program, so that the tile loops and a
# ragged last chunk are exercised on the CPU.
INTERPRETER_BLOCK_ELEMENTS = 16384
INTERPRETER_TILES_PER_PROGRAM = 2


@dataclass(frozen=True)
class LaunchPlan:
    """The launch policy of one call. Fields in UPPER case are constexprs of that name."""

    tile: int  # TILE: tokens a vocabulary tile (a power of two; part of the sampling scheme)
    block_requests: int  # BLOCK_R: requests a program (1 compiled)
    rows_pad: int  # ROWS_PAD: K+1 to a power of two (at least 8 compiled: fewer variants)
    tiles_pad: int  # TILES_PAD: T to a power of two (at least 32 compiled)
    small_grid: bool  # the whole call as one launch of _small_grid_kernel
    barrier: bool  # small grid with draft logits: one cooperative launch with a grid barrier, else two
    small_grid_warps: int
    pass_a_tiles: int  # TILES_PER_PROGRAM of pass A: tiles of one row a program reads in turn
    bulk_copies: bool  # USE_TMA: pass A reads through tensor-memory-access descriptors
    stages: int  # STAGES: bulk copies in flight a program
    pass_a_warps: int
    pass_a_registers: int | None  # maxnreg of pass A (None = uncapped)
    decide_warps: int  # the first decision's
    direct_warps: int  # pass B's and the residual decision's
    residual_tiles: int  # TILES_PER_PROGRAM of pass B
    interpreting: bool  # running under TRITON_INTERPRET (no barrier, no register caps)

    def __post_init__(self) -> None:
        if self.tile < 1 or self.tile & (self.tile - 1):
            raise ValueError(f"tile: must be a power of two, got {self.tile}")
        for name in ("block_requests", "pass_a_tiles", "stages", "residual_tiles"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.barrier and self.interpreting:
            raise ValueError(
                "barrier: the interpreter runs programs one at a time, so no grid barrier can open; got True"
            )


def tile_size_for(vocab: int) -> int:
    """The sampling tile for a vocabulary: DEFAULT_TILE, or the next power of two >= V if smaller."""
    return min(DEFAULT_TILE, _next_power_of_two(vocab))


def plan(
    num_requests: int,
    num_drafts: int,
    vocab: int,
    dtype: torch.dtype,
    has_draft_logits: bool,
    method: str,
    sm_count: int,
    interpreting: bool,
    *,
    tile: int | None = None,
    aligned: bool = True,
    row_table: bool = False,
) -> LaunchPlan:
    """The launch policy for R requests of K drafts over V tokens of ``dtype`` logits.

    ``sm_count``: the device's SMs (ignored under the interpreter). ``tile``: the sampling tile
    (default ``tile_size_for(V)``). ``aligned``: whether a tensor-memory-access descriptor can
    address the logits (16-byte base and strides); bulk copies need it. ``row_table``: the rows are
    found through a row table (``_arguments.RowTable``): plain loads, as without ``aligned``.
    """
    aligned = aligned and not row_table
    tile = tile or tile_size_for(vocab)
    num_rows = num_drafts + 1
    num_tiles = -(-vocab // tile)
    sixteen_bit = dtype.itemsize == 2
    block_requests = 1
    if interpreting:
        sm_count = 1
        block_requests = min(_next_power_of_two(num_requests), max(1, INTERPRETER_BLOCK_ELEMENTS // tile))
    num_blocks = -(-max(num_requests, 1) // block_requests)
    small = not interpreting and num_blocks * num_rows * num_tiles <= FUSE_PROGRAMS_PER_SM * sm_count
    loop_tiles = _loop_tiles(num_blocks * num_rows, num_tiles, sm_count, interpreting)
    bulk = not sixteen_bit and aligned and (interpreting or loop_tiles >= BULK_TILES_PER_PROGRAM)
    if bulk or interpreting:
        pass_a_tiles = loop_tiles
    else:
        pass_a_tiles = min(loop_tiles, SIXTEEN_BIT_TILES_PER_PROGRAM) if sixteen_bit else 1
    registers = None
    if not (interpreting or bulk) and (pass_a_tiles == 1 or sixteen_bit):
        registers = SIXTEEN_BIT_REGISTERS if sixteen_bit else FP32_REGISTERS
        if row_table and has_draft_logits and not sixteen_bit:
            registers = ROW_TABLE_REGISTERS
    direct_warps = 8 if tile >= DEFAULT_TILE and not sixteen_bit else 4
    # Block verification's pass B has K slots, mostly without a planned row: in large grids two
    # tiles a program halve its programs. Standard reads one row and needs them.
    slots = num_drafts if method == "block" else 1
    many = num_blocks * slots * num_tiles > ONE_TILE_PROGRAMS_PER_SM * sm_count
    residual_tiles = min(INTERPRETER_TILES_PER_PROGRAM, num_tiles) if interpreting or (slots > 1 and many) else 1
    return LaunchPlan(
        tile=tile,
        block_requests=block_requests,
        rows_pad=_padded(num_rows, 1 if interpreting else 8),
        tiles_pad=_padded(num_tiles, 1 if interpreting else 32),
        small_grid=small,
        barrier=small,
        small_grid_warps=8 if tile >= DEFAULT_TILE else 4,
        pass_a_tiles=pass_a_tiles,
        bulk_copies=bulk,
        stages=BULK_STAGES if bulk and pass_a_tiles > 1 else 1,
        pass_a_warps=4,
        pass_a_registers=registers,
        # With draft logits the first decision needs 186-191 registers at 8 warps (one program an
        # SM): past one wave, 4 warps.
        decide_warps=4 if has_draft_logits and num_blocks > sm_count else direct_warps,
        direct_warps=direct_warps,
        residual_tiles=residual_tiles,
        interpreting=interpreting,
    )


def _loop_tiles(num_rows: int, num_tiles: int, sm_count: int, interpreting: bool) -> int:
    """Tiles of one row a pass-A program could read: one in small grids, else as many as keep
    PROGRAMS_PER_SM programs an SM busy (a power of two)."""
    if interpreting:
        return min(INTERPRETER_TILES_PER_PROGRAM, num_tiles)
    per_program = 1
    if num_rows * num_tiles <= ONE_TILE_PROGRAMS_PER_SM * sm_count:
        return per_program
    while per_program * 2 <= num_tiles and num_rows * -(-num_tiles // (per_program * 2)) >= PROGRAMS_PER_SM * sm_count:
        per_program *= 2
    return per_program


def _next_power_of_two(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _padded(n: int, minimum: int) -> int:
    """Block width for n rows or tiles; compiled, a floor keeps the number of kernel variants small."""
    return max(minimum, _next_power_of_two(n))

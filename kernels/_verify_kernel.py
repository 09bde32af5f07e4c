"""Pass A: one read of every logit into per-tile statistics (grids too large for ``_small_grid.py``).

Grid ``(cdiv(R, BLOCK_R), K+1 (+K with draft logits), cdiv(num_tiles, TILES_PER_PROGRAM))``: a
program reduces TILES_PER_PROGRAM vocabulary tiles of one row in turn, for ``BLOCK_R`` requests:
a target row or, with draft logits, a draft row (the grid's rows K+1..). It stores each
tile's statistics -- max, sum of 2**((l - max) * log2(e)/T), the draft token's logit and the
tile's mass without it, and for greedy requests where the draft's tile first reaches its max.
Tiles come through plain loads or, with USE_TMA, bulk copies into shared memory pipelined STAGES
deep across the program's tiles. The decision (``_decision.py``) is the next launch.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._arguments import Sizes
from ._sampling import draft_row_start, sanitize, target_row_start, temperature_scale


@triton.jit
def _tile_mass(logits, tile_max, scale):
    """Per-element weights 2**((l - tile max) * scale); a row of -inf has weight 0 everywhere."""
    reference = tl.where(tile_max == float("-inf"), 0.0, tile_max)
    return tl.exp2((logits - reference[:, None]) * scale[:, None])


@triton.jit(do_not_specialize=["num_requests", "num_drafts"])
def _verify_kernel(
    logits,
    target_desc,
    draft_desc,
    inputs,
    work,
    num_requests,
    num_drafts,
    vocab_sizes,
    HAS_DRAFT: tl.constexpr,
    TILE: tl.constexpr,
    BLOCK_R: tl.constexpr,
    TILES_PER_PROGRAM: tl.constexpr,
    STAGES: tl.constexpr,
    USE_TMA: tl.constexpr,
):
    """Grid rows 0..K are the target rows; with draft logits rows K+1.. are the draft rows, each
    read by programs of its own (greedy requests never read draft logits)."""
    sizes = Sizes(num_requests, num_drafts, vocab_sizes.vocab, vocab_sizes.num_tiles)
    block = tl.program_id(0)
    row = tl.program_id(1)
    chunk = tl.program_id(2)
    descriptors = (target_desc, draft_desc)
    requests = (block * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    live = requests < sizes.num_requests
    temperature = tl.load(inputs.temperature + requests, mask=live, other=0.0)
    sampled = live & (temperature > 0)
    if (row > sizes.num_drafts) & HAS_DRAFT:
        if tl.max(sampled.to(tl.int32)) > 0:
            _row_statistics(
                logits,
                descriptors,
                inputs,
                work,
                sizes,
                block,
                row - sizes.num_drafts - 1,
                chunk,
                requests,
                temperature,
                True,
                TILE,
                BLOCK_R,
                TILES_PER_PROGRAM,
                STAGES,
                USE_TMA,
            )
    else:
        _row_statistics(
            logits,
            descriptors,
            inputs,
            work,
            sizes,
            block,
            row,
            chunk,
            requests,
            temperature,
            False,
            TILE,
            BLOCK_R,
            TILES_PER_PROGRAM,
            STAGES,
            USE_TMA,
        )


@triton.jit
def _row_statistics(
    logits,
    descriptors,
    inputs,
    work,
    sizes,
    block,
    row,
    chunk,
    requests,
    temperature,
    DRAFT_ONLY: tl.constexpr,
    TILE: tl.constexpr,
    BLOCK_R: tl.constexpr,
    TILES_PER_PROGRAM: tl.constexpr,
    STAGES: tl.constexpr,
    USE_TMA: tl.constexpr,
):
    """This program's tiles of one row: target row ``row`` or, DRAFT_ONLY, draft row ``row``.
    ``descriptors``: the target's and the draft's bulk-copy descriptors (read with USE_TMA)."""
    live = requests < sizes.num_requests
    sampled = live & (temperature > 0)
    scale = temperature_scale(temperature)
    is_draft_row = row < sizes.num_drafts
    draft = tl.load(inputs.draft_tokens + requests * sizes.num_drafts + row, mask=live & is_draft_row, other=-1)
    per_row = requests * (sizes.num_drafts + 1) + row
    if DRAFT_ONLY:
        row_start = draft_row_start(logits, requests, row, sizes.num_drafts, live)
    else:
        row_start = target_row_start(logits, requests, row, sizes.num_drafts, live)
    if TILES_PER_PROGRAM == 1:
        _tile_statistics(
            logits,
            descriptors,
            work,
            sizes,
            (block, row, chunk),
            requests,
            sampled,
            scale,
            draft,
            per_row,
            row_start,
            DRAFT_ONLY,
            TILE,
            BLOCK_R,
            USE_TMA,
        )
    else:
        # The tiles of one row in turn; with bulk copies and STAGES > 1 the next tiles are copied
        # into shared memory while this one is reduced, so loads in flight hold no registers.
        first_tile = chunk * TILES_PER_PROGRAM
        last_tile = tl.minimum(first_tile + TILES_PER_PROGRAM, sizes.num_tiles)
        for tile in tl.range(first_tile, last_tile, num_stages=STAGES):
            _tile_statistics(
                logits,
                descriptors,
                work,
                sizes,
                (block, row, tile),
                requests,
                sampled,
                scale,
                draft,
                per_row,
                row_start,
                DRAFT_ONLY,
                TILE,
                BLOCK_R,
                USE_TMA,
            )


@triton.jit
def _load_tile(
    logits_ptr,
    desc,
    block,
    row,
    tile,
    mask,
    row_start,
    TILE: tl.constexpr,
    BLOCK_R: tl.constexpr,
    USE_TMA: tl.constexpr,
):
    """One tile of one row for BLOCK_R requests as float32, -inf outside the row and the batch
    (``row_start``: each request's row, element offset; bulk copies address by coordinates)."""
    if USE_TMA:  # a bulk copy into shared memory; it fills out-of-bounds elements with zeros
        values = desc.load([block * BLOCK_R, row, tile * TILE]).reshape(BLOCK_R, TILE).to(tl.float32)
        if BLOCK_R > 1:
            values = tl.where(mask, values, float("-inf"))
        elif tile * TILE + TILE > desc.shape[2]:  # only the row's last tile has elements past V
            values = tl.where(mask, values, float("-inf"))
    else:
        offsets = row_start[:, None] + (tile * TILE + tl.arange(0, TILE))[None, :]
        values = tl.load(logits_ptr + offsets, mask=mask, other=float("-inf")).to(tl.float32)
    return values


@triton.jit
def _tile_max(values):
    """Tile maxima of raw logits, sanitising the tile only where it holds NaN or +inf.

    The common case costs one max per element; ``sanitize`` (two more operations per element) runs
    only for a tile whose max came out NaN or +inf. A max that skipped a NaN is caught by the caller
    from its NaN mass (``_tile_mass_checked``).
    """
    tile_max = tl.max(values, axis=1)
    if tl.max(((tile_max != tile_max) | (tile_max == float("inf"))).to(tl.int32)) > 0:
        values = sanitize(values)
        tile_max = tl.max(values, axis=1)
    return values, tile_max


@triton.jit
def _tile_mass_checked(values, tile_max, scale):
    """Per-element weights and the tile's mass; a NaN the max skipped sanitises the tile and redoes them."""
    weights = _tile_mass(values, tile_max, scale)
    mass = tl.sum(weights, axis=1)
    if tl.max((mass != mass).to(tl.int32)) > 0:
        values = sanitize(values)
        weights = _tile_mass(values, tile_max, scale)
        mass = tl.sum(weights, axis=1)
    return values, weights, mass


@triton.jit
def _tile_statistics(
    logits,
    descriptors,
    work,
    sizes,
    where,
    requests,
    sampled,
    scale,
    draft,
    per_row,
    row_start,
    DRAFT_ONLY: tl.constexpr,
    TILE: tl.constexpr,
    BLOCK_R: tl.constexpr,
    USE_TMA: tl.constexpr,
):
    """Statistics of one tile of one row (``where``: its request block, row and tile); see the module docstring."""
    block, row, tile = where
    target_desc, draft_desc = descriptors
    live = requests < sizes.num_requests
    vocab_ids = tile * TILE + tl.arange(0, TILE)
    mask = live[:, None] & (vocab_ids < sizes.vocab)[None, :]
    in_tile = (draft >= tile * TILE) & (draft < tile * TILE + TILE) & (draft < sizes.vocab)
    if DRAFT_ONLY:
        d_logits = _load_tile(
            logits.draft, draft_desc, block, row, tile, mask & sampled[:, None], row_start, TILE, BLOCK_R, USE_TMA
        )
        _draft_tile_statistics(d_logits, work, sizes, requests, row, tile, vocab_ids, sampled, scale, draft, in_tile)
    else:
        values = _load_tile(logits.target, target_desc, block, row, tile, mask, row_start, TILE, BLOCK_R, USE_TMA)
        values, tile_max = _tile_max(values)
        stat = per_row * sizes.num_tiles + tile
        tl.store(work.tile_max + stat, tile_max, mask=live)
        greedy_here = live & ~sampled & in_tile
        if tl.max(greedy_here.to(tl.int32)) > 0:  # greedy: where does the draft's tile reach its maximum first?
            first = tl.min(tl.where(values == tile_max[:, None], vocab_ids[None, :], sizes.vocab), axis=1)
            tl.store(work.draft_first_max + per_row, first, mask=greedy_here)
        if tl.max(sampled.to(tl.int32)) > 0:
            values, _, mass = _tile_mass_checked(values, tile_max, scale)
            tl.store(work.tile_sum + stat, mass, mask=sampled)
            if tl.max((sampled & in_tile).to(tl.int32)) > 0:  # the draft token's own tile
                hit = vocab_ids[None, :] == draft[:, None]
                at_draft = tl.max(tl.where(hit, values, float("-inf")), axis=1)
                # The weights again (one tile in num_tiles): keeping them live cost registers.
                excluded = tl.sum(tl.where(hit, 0.0, _tile_mass(values, tile_max, scale)), axis=1)
                tl.store(work.at_draft + per_row, at_draft, mask=sampled & in_tile)
                tl.store(work.excluded_sum + per_row, excluded, mask=sampled & in_tile)


@triton.jit
def _draft_tile_statistics(d_logits, work, sizes, requests, row, tile, vocab_ids, sampled, scale, draft, in_tile):
    """A draft tile's max and mass (sampled requests), and the draft token's own logit in its tile."""
    d_values, d_max = _tile_max(d_logits)
    _, _, d_mass = _tile_mass_checked(d_values, d_max, scale)
    d_stat = (requests * sizes.num_drafts + row) * sizes.num_tiles + tile
    tl.store(work.draft_tile_max + d_stat, d_max, mask=sampled)
    tl.store(work.draft_tile_sum + d_stat, d_mass, mask=sampled)
    if tl.max((sampled & in_tile).to(tl.int32)) > 0:
        hit = vocab_ids[None, :] == draft[:, None]
        d_at_draft = tl.max(tl.where(hit, d_values, float("-inf")), axis=1)
        tl.store(work.draft_at_draft + requests * sizes.num_drafts + row, d_at_draft, mask=sampled & in_tile)

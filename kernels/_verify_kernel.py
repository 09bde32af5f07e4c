"""Pass A: one read of every logit into per-tile statistics (grids too large for ``_small_grid.py``).

Grid ``(cdiv(R, BLOCK_R), K+1 (+K with SPLIT_DRAFT), cdiv(num_tiles, TILES_PER_PROGRAM))``: a
program reduces TILES_PER_PROGRAM vocabulary tiles of one row in turn, for ``BLOCK_R`` requests:
a target row and, without SPLIT_DRAFT, the matching draft row beside it; with SPLIT_DRAFT the
draft rows are the grid's rows K+1.. and each program streams one row only. It stores each
tile's statistics -- max, sum of 2**((l - max) * log2(e)/T), the draft token's logit and the
tile's mass without it, and for greedy requests where the draft's tile first reaches its max.
Tiles come through plain loads or, with USE_TMA, bulk copies into shared memory pipelined STAGES
deep across the program's tiles. The decision (``_decision.py``) is the next launch.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._sampling import sanitize, temperature_scale


@triton.jit
def _tile_mass(logits, tile_max, scale):
    """Per-element weights 2**((l - tile max) * scale); a row of -inf has weight 0 everywhere."""
    reference = tl.where(tile_max == float("-inf"), 0.0, tile_max)
    return tl.exp2((logits - reference[:, None]) * scale[:, None])


@triton.jit
def _verify_kernel(
    target_ptr, draft_logits_ptr, target_desc, draft_desc, draft_tokens_ptr, temperature_ptr,
    tile_max_ptr, tile_sum_ptr, draft_first_max_ptr, draft_tile_max_ptr, draft_tile_sum_ptr,
    at_draft_ptr, excluded_sum_ptr, draft_at_draft_ptr,
    num_requests, num_drafts, vocab, num_tiles,
    target_stride_r, target_stride_k, draft_stride_r, draft_stride_k,
    HAS_DRAFT: tl.constexpr, TILE: tl.constexpr, BLOCK_R: tl.constexpr,
    TILES_PER_PROGRAM: tl.constexpr, STAGES: tl.constexpr, USE_TMA: tl.constexpr, SPLIT_DRAFT: tl.constexpr,
):
    block = tl.program_id(0)
    row = tl.program_id(1)
    chunk = tl.program_id(2)
    requests = (block * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    live = requests < num_requests
    temperature = tl.load(temperature_ptr + requests, mask=live, other=0.0)
    sampled = live & (temperature > 0)
    # With SPLIT_DRAFT the grid's rows K+1.. are the draft rows, each read by programs of its own;
    # greedy requests never read draft logits.
    if (row > num_drafts) & SPLIT_DRAFT:
        if tl.max(sampled.to(tl.int32)) > 0:
            _row_statistics(
                target_ptr, draft_logits_ptr, target_desc, draft_desc, draft_tokens_ptr, tile_max_ptr, tile_sum_ptr,
                draft_first_max_ptr, draft_tile_max_ptr, draft_tile_sum_ptr, at_draft_ptr, excluded_sum_ptr,
                draft_at_draft_ptr, block, row - num_drafts - 1, chunk, requests, live, temperature,
                num_drafts, vocab, num_tiles, target_stride_r, target_stride_k, draft_stride_r, draft_stride_k,
                False, True, TILE, BLOCK_R, TILES_PER_PROGRAM, STAGES, USE_TMA,
            )
    else:
        _row_statistics(
            target_ptr, draft_logits_ptr, target_desc, draft_desc, draft_tokens_ptr, tile_max_ptr, tile_sum_ptr,
            draft_first_max_ptr, draft_tile_max_ptr, draft_tile_sum_ptr, at_draft_ptr, excluded_sum_ptr,
            draft_at_draft_ptr, block, row, chunk, requests, live, temperature,
            num_drafts, vocab, num_tiles, target_stride_r, target_stride_k, draft_stride_r, draft_stride_k,
            HAS_DRAFT and not SPLIT_DRAFT, False, TILE, BLOCK_R, TILES_PER_PROGRAM, STAGES, USE_TMA,
        )


@triton.jit
def _row_statistics(
    target_ptr, draft_logits_ptr, target_desc, draft_desc, draft_tokens_ptr, tile_max_ptr, tile_sum_ptr,
    draft_first_max_ptr, draft_tile_max_ptr, draft_tile_sum_ptr, at_draft_ptr, excluded_sum_ptr,
    draft_at_draft_ptr, block, row, chunk, requests, live, temperature,
    num_drafts, vocab, num_tiles, target_stride_r, target_stride_k, draft_stride_r, draft_stride_k,
    HAS_DRAFT: tl.constexpr, DRAFT_ONLY: tl.constexpr, TILE: tl.constexpr, BLOCK_R: tl.constexpr,
    TILES_PER_PROGRAM: tl.constexpr, STAGES: tl.constexpr, USE_TMA: tl.constexpr,
):
    """This program's tiles of one row: target row ``row`` (with its draft row when HAS_DRAFT) or,
    DRAFT_ONLY, draft row ``row`` alone."""
    sampled = live & (temperature > 0)
    scale = temperature_scale(temperature)
    is_draft_row = row < num_drafts
    draft = tl.load(draft_tokens_ptr + requests * num_drafts + row, mask=live & is_draft_row, other=-1)
    per_row = requests * (num_drafts + 1) + row
    if TILES_PER_PROGRAM == 1:
        _tile_statistics(
            target_ptr, draft_logits_ptr, target_desc, draft_desc, tile_max_ptr, tile_sum_ptr, draft_first_max_ptr,
            draft_tile_max_ptr, draft_tile_sum_ptr, at_draft_ptr, excluded_sum_ptr, draft_at_draft_ptr,
            block, row, chunk, requests, live, sampled, scale, is_draft_row, draft, per_row,
            num_drafts, vocab, num_tiles, target_stride_r, target_stride_k, draft_stride_r, draft_stride_k,
            HAS_DRAFT, DRAFT_ONLY, TILE, BLOCK_R, USE_TMA,
        )
    else:
        # The tiles of one row in turn; with bulk copies and STAGES > 1 the next tiles are copied
        # into shared memory while this one is reduced, so loads in flight hold no registers.
        first_tile = chunk * TILES_PER_PROGRAM
        last_tile = tl.minimum(first_tile + TILES_PER_PROGRAM, num_tiles)
        for tile in tl.range(first_tile, last_tile, num_stages=STAGES):
            _tile_statistics(
                target_ptr, draft_logits_ptr, target_desc, draft_desc, tile_max_ptr, tile_sum_ptr, draft_first_max_ptr,
                draft_tile_max_ptr, draft_tile_sum_ptr, at_draft_ptr, excluded_sum_ptr, draft_at_draft_ptr,
                block, row, tile, requests, live, sampled, scale, is_draft_row, draft, per_row,
                num_drafts, vocab, num_tiles, target_stride_r, target_stride_k, draft_stride_r, draft_stride_k,
                HAS_DRAFT, DRAFT_ONLY, TILE, BLOCK_R, USE_TMA,
            )


@triton.jit
def _load_tile(logits_ptr, desc, block, row, tile, requests, mask, stride_r, stride_k,
               TILE: tl.constexpr, BLOCK_R: tl.constexpr, USE_TMA: tl.constexpr):
    """One tile of one row for BLOCK_R requests as float32, -inf outside the row and the batch."""
    if USE_TMA:  # a bulk copy into shared memory; it fills out-of-bounds elements with zeros
        values = desc.load([block * BLOCK_R, row, tile * TILE]).reshape(BLOCK_R, TILE).to(tl.float32)
        if BLOCK_R > 1:
            values = tl.where(mask, values, float("-inf"))
        elif tile * TILE + TILE > desc.shape[2]:  # only the row's last tile has elements past V
            values = tl.where(mask, values, float("-inf"))
    else:
        offsets = requests[:, None] * stride_r + row * stride_k + (tile * TILE + tl.arange(0, TILE))[None, :]
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
    target_ptr, draft_logits_ptr, target_desc, draft_desc, tile_max_ptr, tile_sum_ptr, draft_first_max_ptr,
    draft_tile_max_ptr, draft_tile_sum_ptr, at_draft_ptr, excluded_sum_ptr, draft_at_draft_ptr,
    block, row, tile, requests, live, sampled, scale, is_draft_row, draft, per_row,
    num_drafts, vocab, num_tiles, target_stride_r, target_stride_k, draft_stride_r, draft_stride_k,
    HAS_DRAFT: tl.constexpr, DRAFT_ONLY: tl.constexpr, TILE: tl.constexpr, BLOCK_R: tl.constexpr,
    USE_TMA: tl.constexpr,
):
    """Statistics of one tile of one row (and of its draft row): see the module docstring."""
    vocab_ids = tile * TILE + tl.arange(0, TILE)
    mask = live[:, None] & (vocab_ids < vocab)[None, :]
    in_tile = (draft >= tile * TILE) & (draft < tile * TILE + TILE) & (draft < vocab)
    if DRAFT_ONLY:
        d_logits = _load_tile(draft_logits_ptr, draft_desc, block, row, tile, requests, mask & sampled[:, None],
                              draft_stride_r, draft_stride_k, TILE, BLOCK_R, USE_TMA)
        _draft_tile_statistics(d_logits, draft_tile_max_ptr, draft_tile_sum_ptr, draft_at_draft_ptr, requests, row,
                               tile, vocab_ids, sampled, scale, draft, in_tile, num_drafts, num_tiles)
    else:
        logits = _load_tile(target_ptr, target_desc, block, row, tile, requests, mask,
                            target_stride_r, target_stride_k, TILE, BLOCK_R, USE_TMA)
        if HAS_DRAFT:  # issued before the target's reductions, so both are in flight together
            d_mask = mask & (sampled & is_draft_row)[:, None]
            d_logits = _load_tile(draft_logits_ptr, draft_desc, block, row, tile, requests, d_mask,
                                  draft_stride_r, draft_stride_k, TILE, BLOCK_R, USE_TMA)
        logits, tile_max = _tile_max(logits)
        stat = per_row * num_tiles + tile
        tl.store(tile_max_ptr + stat, tile_max, mask=live)
        greedy_here = live & ~sampled & in_tile
        if tl.max(greedy_here.to(tl.int32)) > 0:  # greedy: where does the draft's tile reach its maximum first?
            first = tl.min(tl.where(logits == tile_max[:, None], vocab_ids[None, :], vocab), axis=1)
            tl.store(draft_first_max_ptr + per_row, first, mask=greedy_here)
        if tl.max(sampled.to(tl.int32)) > 0:
            logits, _, mass = _tile_mass_checked(logits, tile_max, scale)
            tl.store(tile_sum_ptr + stat, mass, mask=sampled)
            if tl.max((sampled & in_tile).to(tl.int32)) > 0:  # the draft token's own tile
                hit = vocab_ids[None, :] == draft[:, None]
                at_draft = tl.max(tl.where(hit, logits, float("-inf")), axis=1)
                # The weights again (one tile in num_tiles): keeping them live cost registers.
                excluded = tl.sum(tl.where(hit, 0.0, _tile_mass(logits, tile_max, scale)), axis=1)
                tl.store(at_draft_ptr + per_row, at_draft, mask=sampled & in_tile)
                tl.store(excluded_sum_ptr + per_row, excluded, mask=sampled & in_tile)
            if HAS_DRAFT:
                if is_draft_row:
                    _draft_tile_statistics(d_logits, draft_tile_max_ptr, draft_tile_sum_ptr, draft_at_draft_ptr, requests,
                                           row, tile, vocab_ids, sampled, scale, draft, in_tile, num_drafts, num_tiles)


@triton.jit
def _draft_tile_statistics(d_logits, draft_tile_max_ptr, draft_tile_sum_ptr, draft_at_draft_ptr, requests, row,
                           tile, vocab_ids, sampled, scale, draft, in_tile, num_drafts, num_tiles):
    """A draft tile's max and mass (sampled requests), and the draft token's own logit in its tile."""
    d_values, d_max = _tile_max(d_logits)
    _, _, d_mass = _tile_mass_checked(d_values, d_max, scale)
    d_stat = (requests * num_drafts + row) * num_tiles + tile
    tl.store(draft_tile_max_ptr + d_stat, d_max, mask=sampled)
    tl.store(draft_tile_sum_ptr + d_stat, d_mass, mask=sampled)
    if tl.max((sampled & in_tile).to(tl.int32)) > 0:
        hit = vocab_ids[None, :] == draft[:, None]
        d_at_draft = tl.max(tl.where(hit, d_values, float("-inf")), axis=1)
        tl.store(draft_at_draft_ptr + requests * num_drafts + row, d_at_draft, mask=sampled & in_tile)

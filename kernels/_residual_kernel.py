"""Pass B: the draft-logit residual max(s * p - q, 0), for the requests pass A deferred.

Only requests with draft logits that rejected a valid draft get here (standard and synthetic: the
one rejected row; block verification: rows lo..n-1 when the top step did not pass, lo being the
last row whose prefix ratio is 1). Grid ``(cdiv(R, BLOCK_R), SLOTS, cdiv(num_tiles,
TILES_PER_PROGRAM))``, SLOTS = 1 (or K for block verification): a program re-reads TILES_PER_PROGRAM
tiles of every SLOTS-th planned row of its requests (target and draft), normalised by pass A's
global statistics, and stores each tile's residual mass
(a pure streaming reduction: no sampling here). The decision (``_decide_residual``, a separate
launch) takes block verification's thresholds
h_i = Z_i / (Z_i + 1 - p_i), tau, a tile by residual mass, and re-reads that one tile (target and
draft) to draw the token inside it. Programs of requests without a plan exit at once.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import _contract as contract
from ._arguments import Sizes
from ._decision import TargetRows, _emit_from_target, _load_row_info, _planned_tiles, _row_normalisers
from ._sampling import (
    RACE_CHUNK,
    better_key,
    draft_row_start,
    inverse_cdf,
    log2_weights,
    race_keys,
    residual_weights,
    row_draws,
    target_row_start,
    temperature_scale,
    write_tokens,
)


@triton.jit(do_not_specialize=["num_requests", "num_drafts"])
def _residual_kernel(
    logits,
    inputs,
    work,
    num_requests,
    num_drafts,
    vocab_sizes,
    TILE: tl.constexpr,
    BLOCK_R: tl.constexpr,
    ROWS_PAD: tl.constexpr,
    SLOTS: tl.constexpr,
    TILES_PER_PROGRAM: tl.constexpr,
):
    sizes = Sizes(num_requests, num_drafts, vocab_sizes.vocab, vocab_sizes.num_tiles)
    block = tl.program_id(0)
    slot = tl.program_id(1)  # rows lo + slot, lo + slot + SLOTS, ... (block verification plans several)
    chunk = tl.program_id(2)  # tiles chunk * TILES_PER_PROGRAM.. of each of those rows
    requests = (block * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    live = requests < sizes.num_requests
    lo = tl.load(work.plan + requests * 2, mask=live, other=-1)
    hi = tl.load(work.plan + requests * 2 + 1, mask=live, other=-1)
    deferred = live & (lo >= 0)
    if tl.max(deferred.to(tl.int32)) == 0:
        return
    temperature = tl.load(inputs.temperature + requests, mask=deferred, other=1.0)
    scale = temperature_scale(temperature)
    first_row = tl.min(tl.where(deferred, lo, ROWS_PAD)) + slot
    last_row = tl.max(tl.where(deferred, hi, -1))
    first_tile = chunk * TILES_PER_PROGRAM
    last_tile = tl.minimum(first_tile + TILES_PER_PROGRAM, sizes.num_tiles)
    for row in range(first_row, last_row + 1, SLOTS):
        active = deferred & (row >= lo) & (row <= hi)
        rows = tl.full((BLOCK_R,), 0, tl.int32) + row
        for tile in range(first_tile, last_tile):
            weights = _residual_weights(
                logits, work, sizes, requests, active, rows, tile + rows * 0, 0, scale, TILE, TILE
            )
            out = (requests * sizes.num_drafts + row) * sizes.num_tiles + tile
            tl.store(work.residual_mass + out, tl.sum(weights, axis=1), mask=active)


@triton.jit
def _residual_weights(
    logits, work, sizes, requests, active, rows, tiles, start, scale, TILE: tl.constexpr, WIDTH: tl.constexpr
):
    """Residual weights max(s p - q, 0) [B, WIDTH] of tokens start.. of tile ``tiles`` of row ``rows``
    (int32 [B] each).

    p and q are normalised by pass A's global statistics (``row_info``). Pass B sums them per tile;
    the decision recomputes the chosen tile with this same function to draw the token inside it.
    """
    target_ref, target_log_mass, draft_ref, draft_log_mass, prefix = _load_row_info(
        work.row_info,
        requests,
        rows,
        sizes.num_drafts,
        active,
    )
    vocab_ids = tiles[:, None] * TILE + start + tl.arange(0, WIDTH)[None, :]
    mask = active[:, None] & (vocab_ids < sizes.vocab)
    t_offsets = target_row_start(logits, requests, rows, sizes.num_drafts, active)[:, None] + vocab_ids
    d_offsets = draft_row_start(logits, requests, rows, sizes.num_drafts, active)[:, None] + vocab_ids
    values = tl.load(logits.target + t_offsets, mask=mask, other=float("-inf"))
    d_values = tl.load(logits.draft + d_offsets, mask=mask, other=float("-inf"))
    return residual_weights(
        values, d_values, mask, target_ref, target_log_mass, draft_ref, draft_log_mass, prefix, scale
    )


@triton.jit(do_not_specialize=["num_requests", "num_drafts"])
def _decide_residual_kernel(
    logits,
    inputs,
    work,
    num_requests,
    num_drafts,
    vocab_sizes,
    outputs,
    METHOD: tl.constexpr,
    TILE: tl.constexpr,
    BLOCK_R: tl.constexpr,
    ROWS_PAD: tl.constexpr,
    TILES_PAD: tl.constexpr,
):
    """The residual decision as its own launch (grid: request blocks)."""
    sizes = Sizes(num_requests, num_drafts, vocab_sizes.vocab, vocab_sizes.num_tiles)
    block = tl.program_id(0)
    requests = (block * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    lo = tl.load(work.plan + requests * 2, mask=requests < sizes.num_requests, other=-1)
    if tl.max((lo >= 0).to(tl.int32)) > 0:
        _decide_residual(block, logits, inputs, work, sizes, outputs, METHOD, TILE, BLOCK_R, ROWS_PAD, TILES_PAD)


@triton.jit
def _decide_residual(
    block,
    logits,
    inputs,
    work,
    sizes,
    outputs,
    METHOD: tl.constexpr,
    TILE: tl.constexpr,
    BLOCK_R: tl.constexpr,
    ROWS_PAD: tl.constexpr,
    TILES_PAD: tl.constexpr,
):
    """tau (block: the largest planned row whose uniform is below h) and the residual token there."""
    requests = (block * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    live = requests < sizes.num_requests
    lo = tl.load(work.plan + requests * 2, mask=live, other=-1)
    hi = tl.load(work.plan + requests * 2 + 1, mask=live, other=-1)
    deferred = live & (lo >= 0)
    rows = tl.arange(0, ROWS_PAD)
    tiles = tl.arange(0, TILES_PAD)
    planned, index3, mask3 = _planned_tiles(
        requests, deferred, lo, hi, sizes.num_drafts, sizes.num_tiles, ROWS_PAD, TILES_PAD
    )
    tile_mass = tl.load(work.residual_mass + index3, mask=mask3, other=0.0, cache_modifier=".cg")
    seed = tl.load(inputs.seed + requests, mask=deferred, other=0)
    seeds2 = tl.broadcast_to(seed[:, None], (BLOCK_R, ROWS_PAD))
    rows2 = tl.broadcast_to(rows[None, :], (BLOCK_R, ROWS_PAD))
    tau = lo
    if METHOD == contract.METHOD_BLOCK:
        accept_u, _, _, _ = row_draws(seeds2, rows2, contract.PURPOSE_VERIFY)
        prefix = tl.load(
            work.row_info + (requests[:, None] * sizes.num_drafts + rows[None, :]) * 5 + 4, mask=planned, other=1.0
        )
        mass = tl.sum(tile_mass, axis=2)
        denominator = mass + 1.0 - prefix
        threshold = tl.where(denominator > 0, mass / tl.where(denominator > 0, denominator, 1.0), 1.0)
        passes = planned & (rows[None, :] > lo[:, None]) & (accept_u < threshold)
        tau = tl.max(tl.where(passes, rows[None, :], lo[:, None]), axis=1)
    at_tau = rows[None, :] == tau[:, None]
    choice_u, _, _, _ = row_draws(seeds2, rows2, contract.PURPOSE_RESIDUAL)
    weights = tl.sum(tl.where(at_tau[:, :, None], tile_mass, 0.0), axis=1)
    chosen = inverse_cdf(weights, tl.sum(tl.where(at_tau, choice_u, 0.0), axis=1), tiles)
    # Round-trip tau and the tile through memory, as ``_decide`` does (without it block
    # verification's decision had a 12 KB stack frame per thread).
    tl.store(work.plan + requests * 2, tau, mask=deferred)
    tl.store(work.plan + requests * 2 + 1, chosen, mask=deferred)
    tl.debug_barrier()
    tau = tl.load(work.plan + requests * 2, mask=deferred, other=0)
    chosen = tl.load(work.plan + requests * 2 + 1, mask=deferred, other=-1)
    tl.debug_barrier()
    at_tau = rows[None, :] == tau[:, None]
    # Re-read the chosen tile of row tau (target and draft) and draw the token inside it.
    temperature = tl.load(inputs.temperature + requests, mask=deferred, other=1.0)
    scale = temperature_scale(temperature)
    has_tile = deferred & (chosen >= 0)
    key_lo, key_hi = row_draws(seed, tau, contract.PURPOSE_RESIDUAL)[
        2:
    ]  # afresh for row tau, as _emit_from_target does
    CHUNK: tl.constexpr = RACE_CHUNK if RACE_CHUNK < TILE else TILE
    best_key = tl.full((BLOCK_R,), float("-inf"), tl.float32)
    best = tl.zeros((BLOCK_R,), tl.int32)
    for start in tl.range(0, TILE, CHUNK):  # the race in chunks, as sample_in_tile runs it
        chunk_weights = _residual_weights(
            logits, work, sizes, requests, has_tile, tau, tl.maximum(chosen, 0), start, scale, TILE, CHUNK
        )
        vocab_ids = tl.maximum(chosen, 0)[:, None] * TILE + start + tl.arange(0, CHUNK)[None, :]
        best_key, best = better_key(
            race_keys(log2_weights(chunk_weights), vocab_ids, key_lo, key_hi), start, best_key, best
        )
    token = (chosen * TILE + best).to(tl.int64)
    drafts = tl.load(
        inputs.draft_tokens + requests[:, None] * sizes.num_drafts + rows[None, :],
        mask=deferred[:, None] & (rows[None, :] < sizes.num_drafts),
        other=-1,
    )
    no_mass = deferred & (chosen < 0)
    if tl.max(no_mass.to(tl.int32)) > 0:  # p and q agree to rounding: fall back to the plain target
        num_rows = sizes.num_drafts + 1
        row_index = requests[:, None] * num_rows + rows[None, :]
        t_index3 = row_index[:, :, None] * sizes.num_tiles + tiles[None, None, :]
        t_mask3 = no_mass[:, None, None] & (rows[None, :, None] < num_rows) & (tiles[None, None, :] < sizes.num_tiles)
        tile_max = tl.load(work.tile_max + t_index3, mask=t_mask3, other=float("-inf"), cache_modifier=".cg")
        tile_sum = tl.load(work.tile_sum + t_index3, mask=t_mask3, other=0.0, cache_modifier=".cg")
        reference, mass, tile_weight = _row_normalisers(tile_max, tile_sum, scale)
        _, tile_u, _, _ = row_draws(seeds2, rows2, contract.PURPOSE_VERIFY)
        plain = _emit_from_target(
            logits,
            requests,
            seed,
            tau,
            at_tau,
            tau,
            drafts,
            TargetRows(tile_max, reference, mass, tile_weight),
            tile_u,
            reference,
            scale,
            no_mass,
            sizes,
            True,
            TILE,
            TILES_PAD,
        )
        token = tl.where(no_mass, plain, token)
    write_tokens(outputs.tokens, outputs.num_tokens, requests, drafts, tau, token, deferred, sizes.num_drafts, ROWS_PAD)

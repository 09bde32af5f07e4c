"""The whole call in one launch, for grids of at most two programs an SM (R = 1 and other small batches).

Grid ``(cdiv(R, BLOCK_R), K+1, num_tiles)``: one program per vocabulary tile of one target row and,
with draft logits, of its draft row. The tile stays in registers for the whole call, so no logit is
read twice. A program stores its tile's statistics and, for sampled requests, the token the tile
would emit if it were chosen: the winner of the in-tile race under the row's own key, and in the
draft token's tile the winner without the draft token (a rejected one-hot draft's
residual). With draft logits the programs of a request block then meet at a barrier (a cooperative
launch keeps them all resident); after it each derives acceptance from the statistics and, for the
rows a rejection needs, its own tile's residual max(s p - q, 0): the tile's residual mass and its
draw. The last program of the block to take a ticket decides: acceptance, for every row at once a
tile by mass, and the token that tile drew. The scheme, uniforms and race keys are those of the
separate launches (``_verify_kernel``, ``_decision``, ``_residual_kernel``), so are the tokens.

Counters (ticket, barrier arrivals, barrier generation; four int32 a request block) come from a
buffer the launcher keeps: each call hands its ticket and arrival counts back at zero, so no memset
precedes the launch. STAGE 1 and 2 split the kernel at the barrier into two launches (statistics;
then the residuals and the decision, the tile read again): the interpreter runs programs one after
another, where a barrier would never open.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import _contract as contract
from ._arguments import Sizes
from ._decision import _acceptance, _load_row_info, _log2_mass, _planned_tiles, _store_row_info
from ._sampling import (
    detached,
    draft_row_start,
    inverse_cdf,
    log2_weights,
    race_keys,
    race_keys_from_noise,
    race_noise,
    race_winner,
    residual_weights,
    row_draws,
    sanitize,
    target_row_start,
    temperature_scale,
    write_tokens,
)
from ._verify_kernel import _draft_tile_statistics, _tile_mass_checked, _tile_max


@triton.jit(do_not_specialize=["num_requests", "num_drafts"])
def _small_grid_kernel(
    logits,
    inputs,
    work,
    counter_ptr,
    num_requests,
    num_drafts,
    vocab_sizes,
    outputs,
    METHOD: tl.constexpr,
    HAS_DRAFT: tl.constexpr,
    TILE: tl.constexpr,
    BLOCK_R: tl.constexpr,
    ROWS_PAD: tl.constexpr,
    TILES_PAD: tl.constexpr,
    STAGE: tl.constexpr,
):
    """STAGE 0: the whole call. With draft logits under the interpreter, STAGE 1 runs up to the
    barrier (statistics) and STAGE 2 after it (the tile read again; residuals and the decision)."""
    sizes = Sizes(num_requests, num_drafts, vocab_sizes.vocab, vocab_sizes.num_tiles)
    block = tl.program_id(0)
    row = tl.program_id(1)
    tile = tl.program_id(2)
    parties = tl.num_programs(1) * tl.num_programs(2)
    counters = counter_ptr + block * 4  # ticket, barrier arrivals, barrier generation
    requests = (block * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    live = requests < sizes.num_requests
    temperature = tl.load(inputs.temperature + requests, mask=live, other=0.0)
    sampled = live & (temperature > 0)
    scale = temperature_scale(temperature)
    seed = tl.load(inputs.seed + requests, mask=live, other=0)
    row_ids = tl.full((BLOCK_R,), 0, tl.int32) + row
    draft = tl.load(
        inputs.draft_tokens + requests * sizes.num_drafts + row, mask=live & (row < sizes.num_drafts), other=-1
    )
    vocab_ids = tile * TILE + tl.arange(0, TILE)
    mask = live[:, None] & (vocab_ids < sizes.vocab)[None, :]
    offsets = target_row_start(logits, requests, row, sizes.num_drafts, live)[:, None] + vocab_ids[None, :]
    values = tl.load(logits.target + offsets, mask=mask, other=float("-inf")).to(tl.float32)
    d_values = values
    if HAS_DRAFT:  # greedy requests and the bonus row read no draft logits
        d_mask = mask & (sampled & (row < sizes.num_drafts))[:, None]
        d_offsets = draft_row_start(logits, requests, row, sizes.num_drafts, live & (row < sizes.num_drafts))[:, None]
        d_offsets += vocab_ids[None, :]
        d_values = tl.load(logits.draft + d_offsets, mask=d_mask, other=float("-inf")).to(tl.float32)
    if STAGE != 2:
        # With fp32 draft logits the race's noise, which needs no logits, is made while both tiles'
        # loads are in flight; one-hot and 16-bit logits measured slower that way.
        EARLY_NOISE: tl.constexpr = HAS_DRAFT and logits.target.dtype.element_ty == tl.float32
        noise = tl.zeros((BLOCK_R, TILE), tl.float32)
        if EARLY_NOISE:
            if tl.max(sampled.to(tl.int32)) > 0:
                noise = _tile_noise(seed, row_ids, vocab_ids, values)
                # + (noise - noise), exactly 0 (the noise is finite): ptxas otherwise starts the
                # tile's reductions first and stalls on the load before any noise is made.
                values = values + (noise - noise)
        _tile_draws(
            values,
            d_values,
            noise,
            work,
            sizes,
            requests,
            live,
            sampled,
            scale,
            seed,
            row,
            tile,
            draft,
            HAS_DRAFT,
            EARLY_NOISE,
            TILE,
        )
    if HAS_DRAFT:
        if STAGE == 0:
            tl.debug_barrier()
            _barrier(counters + 1, counters + 2, parties)
        if STAGE != 1:
            decision = _acceptance(
                requests,
                live,
                sampled,
                scale,
                seed,
                inputs,
                work,
                sizes,
                METHOD,
                True,
                TILE,
                BLOCK_R,
                ROWS_PAD,
                TILES_PAD,
                True,
            )
            # fp32 tiles read the plan and the row normalisers back from memory, 16-bit ones take
            # them from registers (each measured the faster at R = 1).
            READ_BACK: tl.constexpr = logits.target.dtype.element_ty == tl.float32
            _tile_residual(
                values,
                d_values,
                decision,
                work,
                sizes,
                requests,
                live,
                scale,
                seed,
                row_ids,
                row,
                tile,
                mask,
                READ_BACK,
                TILE,
                ROWS_PAD,
            )
    if STAGE != 1:  # the last program of the request block to take a ticket decides
        tl.debug_barrier()
        if tl.atomic_add(counters, 1, sem="acq_rel") == parties - 1:
            if not HAS_DRAFT:  # (with draft logits every program derived acceptance after the barrier)
                decision = _acceptance(
                    requests,
                    live,
                    sampled,
                    scale,
                    seed,
                    inputs,
                    work,
                    sizes,
                    METHOD,
                    False,
                    TILE,
                    BLOCK_R,
                    ROWS_PAD,
                    TILES_PAD,
                    True,
                )
            _decide_small(
                requests,
                live,
                sampled,
                scale,
                seed,
                decision,
                work,
                sizes,
                outputs,
                METHOD,
                HAS_DRAFT,
                TILE,
                BLOCK_R,
                ROWS_PAD,
                TILES_PAD,
            )
            tl.atomic_xchg(counters, 0, sem="relaxed")


@triton.jit
def _barrier(arrivals_ptr, generation_ptr, parties):
    """Return once ``parties`` programs have called this; leaves the arrival count at zero.

    The generation is read before arriving, and only the last arrival moves it on, after zeroing
    the count for the next call: a sense-reversing barrier that needs no reset between calls. Every
    program must be resident (the launcher makes the launch cooperative).
    """
    generation = tl.atomic_add(generation_ptr, 0, sem="acquire")
    if tl.atomic_add(arrivals_ptr, 1, sem="acq_rel") == parties - 1:
        tl.atomic_xchg(arrivals_ptr, 0, sem="relaxed")
        tl.atomic_add(generation_ptr, 1, sem="release")
    else:
        current = generation
        while current == generation:
            current = tl.atomic_add(generation_ptr, 0, sem="acquire")


@triton.jit
def _tile_draws(
    values,
    d_values,
    noise,
    work,
    sizes,
    requests,
    live,
    sampled,
    scale,
    seed,
    row,
    tile,
    draft,
    HAS_DRAFT: tl.constexpr,
    EARLY_NOISE: tl.constexpr,
    TILE: tl.constexpr,
):
    """This tile's statistics, as pass A stores them, and the token it draws for each request.

    tile_token: greedy requests the first index of the tile's max; sampled ones the race winner
    under row ``row``'s key. In the draft token's tile also the draft's logit and, for one-hot
    drafts, the mass and the winner without it (excluded_*).
    """
    row_ids = tl.full((requests.shape[0],), 0, tl.int32) + row
    vocab_ids = tile * TILE + tl.arange(0, TILE)
    mask = live[:, None] & (vocab_ids < sizes.vocab)[None, :]
    per_row = requests * (sizes.num_drafts + 1) + row
    stat = per_row * sizes.num_tiles + tile
    in_tile = (draft >= tile * TILE) & (draft < tile * TILE + TILE) & (draft < sizes.vocab)
    values, tile_max = _tile_max(values)
    tl.store(work.tile_max + stat, tile_max, mask=live)
    greedy = live & ~sampled
    if tl.max(greedy.to(tl.int32)) > 0:  # as first_max_in_tile finds it on a re-read
        first = tl.min(
            tl.where(mask & (sanitize(values) == tile_max[:, None]), vocab_ids[None, :], sizes.vocab), axis=1
        )
        tl.store(work.tile_token + stat, first, mask=greedy)
    if tl.max(sampled.to(tl.int32)) > 0:
        values, weights, mass = _tile_mass_checked(values, tile_max, scale)
        tl.store(work.tile_sum + stat, mass, mask=sampled)
        if not EARLY_NOISE:
            noise = _tile_noise(seed, row_ids, vocab_ids, values)
        reference = tl.where(tile_max == float("-inf"), 0.0, tile_max)
        log_weights = (values - reference[:, None]) * scale[:, None]  # as sample_in_tile weighs a re-read
        keys = race_keys_from_noise(log_weights, noise)
        tl.store(work.tile_token + stat, tile * TILE + race_winner(keys), mask=sampled)
        drawn_here = sampled & in_tile
        if tl.max(drawn_here.to(tl.int32)) > 0:  # the draft token's own tile
            hit = vocab_ids[None, :] == draft[:, None]
            tl.store(work.at_draft + per_row, tl.max(tl.where(hit, values, float("-inf")), axis=1), mask=drawn_here)
            if not HAS_DRAFT:  # a rejected one-hot draft's residual: the tile without it
                inner = race_winner(tl.where(hit, float("-inf"), keys))
                tl.store(work.excluded_sum + per_row, tl.sum(tl.where(hit, 0.0, weights), axis=1), mask=drawn_here)
                tl.store(work.excluded_token + per_row, tile * TILE + inner, mask=drawn_here)
        if HAS_DRAFT:
            if row < sizes.num_drafts:
                _draft_tile_statistics(
                    d_values, work, sizes, requests, row, tile, vocab_ids, sampled, scale, draft, in_tile
                )


@triton.jit
def _tile_noise(seed, row_ids, vocab_ids, values):
    """The plain target's race noise over this tile (shaped as ``values`` [B, TILE]), under row_ids' key."""
    _, _, key_lo, key_hi = row_draws(seed, row_ids, contract.PURPOSE_VERIFY)
    return race_noise(tl.broadcast_to(vocab_ids[None, :], values.shape), key_lo, key_hi)


@triton.jit
def _tile_residual(
    values,
    d_values,
    decision,
    work,
    sizes,
    requests,
    live,
    scale,
    seed,
    row_ids,
    row,
    tile,
    mask,
    READ_BACK: tl.constexpr,
    TILE: tl.constexpr,
    ROWS_PAD: tl.constexpr,
):
    """This tile's residual max(s p - q, 0) at row ``row`` where a request's plan holds the row: its
    mass and its draw. The plan and the row's normalisers come from ``decision`` (``_acceptance``'s,
    [B] and [B, ROWS]) either read back from memory (READ_BACK, for fp32 tiles: ``plan``,
    ``row_info``) or rebuilt from scalars (``detached``, 16-bit). Taken straight from the
    statistics' layout, they would spread it to the tile, which the compiler replicated (17 KB of
    stack a thread)."""
    verdict = decision.verdict
    if READ_BACK:  # every program of the block stores the same plan and normalisers
        tl.store(work.plan + requests * 2, verdict.plan_lo, mask=live)
        tl.store(work.plan + requests * 2 + 1, verdict.plan_hi, mask=live)
        _store_row_info(
            work.row_info,
            requests,
            tl.arange(0, ROWS_PAD),
            verdict.deferred,
            sizes.num_drafts,
            decision.target,
            decision.draft,
            verdict.prefix,
        )
        tl.debug_barrier()
        lo = tl.load(work.plan + requests * 2, mask=live, other=-1)
        hi = tl.load(work.plan + requests * 2 + 1, mask=live, other=-1)
    else:
        lo = detached(verdict.plan_lo)
        hi = detached(verdict.plan_hi)
    needs = live & (lo >= 0) & (lo <= row) & (row <= hi)
    if tl.max(needs.to(tl.int32)) > 0:
        if READ_BACK:
            target_ref, target_log_mass, draft_ref, draft_log_mass, row_prefix = _load_row_info(
                work.row_info,
                requests,
                row,
                sizes.num_drafts,
                needs,
            )
        else:
            at_row = tl.arange(0, ROWS_PAD)[None, :] == row
            target_ref = detached(tl.sum(tl.where(at_row, decision.target.reference, 0.0), axis=1))
            target_log_mass = detached(tl.sum(tl.where(at_row, _log2_mass(decision.target.mass), 0.0), axis=1))
            draft_ref = detached(tl.sum(tl.where(at_row, decision.draft.reference, 0.0), axis=1))
            draft_log_mass = detached(tl.sum(tl.where(at_row, _log2_mass(decision.draft.mass), 0.0), axis=1))
            row_prefix = detached(tl.sum(tl.where(at_row, verdict.prefix, 0.0), axis=1))
        active = mask & needs[:, None]  # other requests' logits stay out of the exponentials
        values = tl.where(active, values, float("-inf"))
        d_values = tl.where(active, d_values, float("-inf"))
        weights = residual_weights(
            values,
            d_values,
            active,
            target_ref,
            target_log_mass,
            draft_ref,
            draft_log_mass,
            row_prefix,
            scale,
        )
        out = (requests * sizes.num_drafts + row) * sizes.num_tiles + tile
        tl.store(work.residual_mass + out, tl.sum(weights, axis=1), mask=needs)
        _, _, key_lo, key_hi = row_draws(seed, row_ids, contract.PURPOSE_RESIDUAL)
        vocab_ids = tl.broadcast_to((tile * TILE + tl.arange(0, TILE))[None, :], weights.shape)
        inner = race_winner(race_keys(log2_weights(weights), vocab_ids, key_lo, key_hi))
        tl.store(work.residual_token + out, tile * TILE + inner, mask=needs)


@triton.jit
def _choose_tiles(weights, uniform, BLOCK_R: tl.constexpr, ROWS_PAD: tl.constexpr, TILES_PAD: tl.constexpr):
    """For every row at once, a tile by inverse CDF: weights [B, ROWS, TILES], uniform [B, ROWS] -> int32 [B, ROWS]."""
    flat = inverse_cdf(
        tl.reshape(weights, (BLOCK_R * ROWS_PAD, TILES_PAD)),
        tl.reshape(uniform, (BLOCK_R * ROWS_PAD,)),
        tl.arange(0, TILES_PAD),
    )
    return tl.reshape(flat, (BLOCK_R, ROWS_PAD))


@triton.jit
def _decide_small(
    requests,
    live,
    sampled,
    scale,
    seed,
    decision,
    work,
    sizes,
    outputs,
    METHOD: tl.constexpr,
    HAS_DRAFT: tl.constexpr,
    TILE: tl.constexpr,
    BLOCK_R: tl.constexpr,
    ROWS_PAD: tl.constexpr,
    TILES_PAD: tl.constexpr,
):
    """The emitted token at tau from the tiles' own draws, and the tokens written out.

    Each row's target draw is worked out for every row at once (a tile by mass, then that tile's
    draw), so no value waits for tau: for one-hot drafts a valid row's draft token is taken out
    (its tile's mass and draw without it), unless nothing is left, as ``_emit_from_target`` does.
    Deferred requests (draft logits) take tau and the token from the residual masses and draws.
    """
    rows = tl.arange(0, ROWS_PAD)
    tiles = tl.arange(0, TILES_PAD)
    verdict = decision.verdict
    tau = verdict.tau  # (defined before row_tokens: the order of values the branch below yields)
    tile_tokens = decision.draws.tile_tokens
    if HAS_DRAFT:  # the draws and the residuals, loaded before any reduction (see _acceptance)
        num_rows = sizes.num_drafts + 1
        index3 = (requests[:, None] * num_rows + rows[None, :])[:, :, None] * sizes.num_tiles + tiles[None, None, :]
        mask3 = (live[:, None] & (rows[None, :] < num_rows))[:, :, None] & (tiles[None, None, :] < sizes.num_tiles)
        tile_tokens = tl.load(work.tile_token + index3, mask=mask3, other=0, cache_modifier=".cg")
        _, index3, mask3 = _planned_tiles(
            requests,
            verdict.deferred,
            verdict.plan_lo,
            verdict.plan_hi,
            sizes.num_drafts,
            sizes.num_tiles,
            ROWS_PAD,
            TILES_PAD,
        )
        residual_mass = tl.load(work.residual_mass + index3, mask=mask3, other=0.0, cache_modifier=".cg")
        residual_tokens = tl.load(work.residual_token + index3, mask=mask3, other=0, cache_modifier=".cg")
    weights = decision.target.tile_weight
    own = tl.full((BLOCK_R, ROWS_PAD), -1, tl.int32)
    if not HAS_DRAFT:  # a rejected one-hot draft: the target without the draft token
        exclude = sampled[:, None] & (rows[None, :] < decision.num_valid[:, None])
        own = tl.where(exclude, decision.drafts // TILE, -1).to(tl.int32)
        own3 = tiles[None, None, :] == own[:, :, None]
        own_max = tl.max(tl.where(own3, decision.target.tile_max, float("-inf")), axis=2)
        own_weight = tl.where(
            own_max == float("-inf"),
            0.0,
            decision.draws.excluded_sums * tl.exp2((own_max - decision.target.reference) * scale[:, None]),
        )
        without = tl.where(own3, own_weight[:, :, None], weights)
        use_residual = exclude & (tl.sum(without, axis=2) > 0)
        weights = tl.where(use_residual[:, :, None], without, weights)
        own = tl.where(use_residual, own, -1)
    chosen = _choose_tiles(weights, decision.draws.tile_u, BLOCK_R, ROWS_PAD, TILES_PAD)
    row_tokens = tl.sum(tl.where(tiles[None, None, :] == chosen[:, :, None], tile_tokens, 0), axis=2)
    row_tokens = tl.where(chosen == own, decision.draws.excluded_tokens, row_tokens)
    row_tokens = tl.where(chosen >= 0, row_tokens, 0).to(tl.int64)
    if HAS_DRAFT:
        if tl.max(verdict.deferred.to(tl.int32)) > 0:
            residual_tau, residual_row_tokens = _residual_choice(
                verdict,
                seed,
                row_tokens,
                residual_mass,
                residual_tokens,
                METHOD,
                BLOCK_R,
                ROWS_PAD,
                TILES_PAD,
            )
            tau = tl.where(verdict.deferred, residual_tau, tau)
            row_tokens = tl.where(verdict.deferred[:, None], residual_row_tokens, row_tokens)
    at_tau = rows[None, :] == tau[:, None]
    emitted = tl.sum(tl.where(at_tau, tl.where(sampled[:, None], row_tokens, decision.greedy.argmax), 0), axis=1)
    write_tokens(
        outputs.tokens, outputs.num_tokens, requests, decision.drafts, tau, emitted, live, sizes.num_drafts, ROWS_PAD
    )


@triton.jit
def _residual_choice(
    verdict,
    seed,
    target_tokens,
    tile_mass,
    tile_tokens,
    METHOD: tl.constexpr,
    BLOCK_R: tl.constexpr,
    ROWS_PAD: tl.constexpr,
    TILES_PAD: tl.constexpr,
):
    """tau of a deferred request (block: the largest planned row whose uniform is below h) and, per
    row, the residual token there (a tile by residual mass, then its draw); a residual without mass
    falls back to the plain target's token (``target_tokens`` [B, ROWS])."""
    rows = tl.arange(0, ROWS_PAD)
    tiles = tl.arange(0, TILES_PAD)
    plan_lo = verdict.plan_lo
    planned = (
        verdict.deferred[:, None] & (rows[None, :] >= plan_lo[:, None]) & (rows[None, :] <= verdict.plan_hi[:, None])
    )
    seeds2 = tl.broadcast_to(seed[:, None], (BLOCK_R, ROWS_PAD))
    rows2 = tl.broadcast_to(rows[None, :], (BLOCK_R, ROWS_PAD))
    tau = plan_lo
    if METHOD == contract.METHOD_BLOCK:
        accept_u, _, _, _ = row_draws(seeds2, rows2, contract.PURPOSE_VERIFY)
        mass = tl.sum(tile_mass, axis=2)
        denominator = mass + 1.0 - verdict.prefix
        threshold = tl.where(denominator > 0, mass / tl.where(denominator > 0, denominator, 1.0), 1.0)
        passes = planned & (rows[None, :] > plan_lo[:, None]) & (accept_u < threshold)
        tau = tl.max(tl.where(passes, rows[None, :], plan_lo[:, None]), axis=1)
    choice_u, _, _, _ = row_draws(seeds2, rows2, contract.PURPOSE_RESIDUAL)
    chosen = _choose_tiles(tile_mass, choice_u, BLOCK_R, ROWS_PAD, TILES_PAD)
    tokens = tl.sum(tl.where(tiles[None, None, :] == chosen[:, :, None], tile_tokens, 0), axis=2).to(tl.int64)
    return tau, tl.where(chosen >= 0, tokens, target_tokens)

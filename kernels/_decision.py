"""The decision: acceptance and the emitted token per request, from pass A's tile statistics.

``_acceptance`` combines the statistics into per-row softmax normalisers and decides acceptance
(greedy, standard, block, synthetic); the small-grid kernel (``_small_grid.py``) shares it.
``_decide`` (its own launch, ``_decide_kernel``, one program per request block) then draws the
emitted token by choosing a tile by mass and re-reading only that tile. Draft-logit residuals
max(p - q, 0) need global normalisers, so those requests are handed to pass B
(``_residual_kernel.py``) with a plan.

Kernel arguments are ``_arguments``' named tuples; METHOD is one of ``_contract``'s METHOD_* codes.
Values over a request block are [B] (B = BLOCK_R), over its rows [B, ROWS] (ROWS = ROWS_PAD), over
their tiles [B, ROWS, TILES] (TILES = TILES_PAD).
"""

from __future__ import annotations

from typing import NamedTuple

import triton
import triton.language as tl

from . import _contract as contract
from ._arguments import Sizes
from ._sampling import (
    LOG_RATIO_CLAMP,
    first_max_in_tile,
    inverse_cdf,
    row_draws,
    sample_in_tile,
    target_row_start,
    temperature_scale,
    write_tokens,
    zero_after,
)


class TargetRows(NamedTuple):
    """The target rows' softmax normalisers, from pass A's tile statistics."""

    tile_max: tl.tensor  # float32 [B, ROWS, TILES], -inf where unwritten
    reference: tl.tensor  # float32 [B, ROWS]: the row max (0 for a row without a finite logit)
    mass: tl.tensor  # float32 [B, ROWS]: sum_v 2**((l_v - reference) * scale)
    tile_weight: tl.tensor  # float32 [B, ROWS, TILES]: each tile's part of the mass


class DraftRows(NamedTuple):
    """The draft rows' normalisers (zeros without draft logits)."""

    reference: tl.tensor  # float32 [B, ROWS]
    mass: tl.tensor  # float32 [B, ROWS]


class Greedy(NamedTuple):
    """Each row's argmax: the first index of the row maximum, in the first tile that reaches it."""

    first_tile: tl.tensor  # int32 [B, ROWS]
    row_max: tl.tensor  # float32 [B, ROWS]
    argmax: tl.tensor  # int64 [B, ROWS] from the tiles' stored argmaxes (small grid), else zeros


class Draws(NamedTuple):
    """What a row's emitted token is drawn from besides the normalisers."""

    tile_u: tl.tensor  # float32 [B, ROWS]: the uniform that chooses the target tile
    excluded_sums: tl.tensor  # float32 [B, ROWS]: one-hot drafts, the draft's tile mass without it
    tile_tokens: tl.tensor  # int32 [B, ROWS, TILES]: small grid, each tile's own draw (greedy: argmax)
    excluded_tokens: tl.tensor  # int32 [B, ROWS]: small grid, the draft's tile's draw without it


class Verdict(NamedTuple):
    """Acceptance: tau and, for draft-logit residuals, pass B's plan."""

    tau: tl.tensor  # int32 [B]: accepted drafts (the emitted token's row)
    deferred: tl.tensor  # bool [B]: sampled requests whose draft-logit residual pass B computes
    plan_lo: tl.tensor  # int32 [B]: the first row pass B needs (-1 = none)
    plan_hi: tl.tensor  # int32 [B]: the last
    prefix: tl.tensor  # float32 [B, ROWS]: block verification's prefix ratios, else 1


class Acceptance(NamedTuple):
    drafts: tl.tensor  # int64 [B, ROWS]: the draft tokens (-1 past K)
    num_valid: tl.tensor  # int32 [B]: drafts before the first placeholder
    target: TargetRows
    draft: DraftRows
    greedy: Greedy
    draws: Draws
    verdict: Verdict


@triton.jit(do_not_specialize=["num_requests", "num_drafts"])
def _decide_kernel(
    logits,
    inputs,
    work,
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
):
    """The decision as its own launch (grid: request blocks), after ``_verify_kernel``."""
    sizes = Sizes(num_requests, num_drafts, vocab_sizes.vocab, vocab_sizes.num_tiles)
    _decide(
        tl.program_id(0), logits, inputs, work, sizes, outputs, METHOD, HAS_DRAFT, TILE, BLOCK_R, ROWS_PAD, TILES_PAD
    )


@triton.jit
def _row_normalisers(tile_max, tile_sum, scale):
    """Combine tile statistics [B, ROWS, TILES] (maxima, -inf where unwritten; sums, 0 where unwritten)
    into the row reference max [B, ROWS] (0 for rows without a finite logit), the row mass
    sum_v 2**((l_v - ref) * scale) [B, ROWS] and the per-tile weights [B, ROWS, TILES]."""
    row_max = tl.max(tile_max, axis=2)
    reference = tl.where(row_max == float("-inf"), 0.0, row_max)
    exponent = (tile_max - reference[:, :, None]) * scale[:, None, None]
    tile_weight = tl.where(tile_max == float("-inf"), 0.0, tile_sum * tl.exp2(exponent))
    return reference, tl.sum(tile_weight, axis=2), tile_weight


@triton.jit
def _prob_at(at, mask, reference, mass, scale):
    """softmax probability of the draft token at each row from its logit ``at``: 2**((at - ref) * scale) / mass."""
    at = tl.where(mask, at, float("-inf"))  # rows outside ``mask`` may hold any bits
    prob = tl.exp2((at - reference) * scale[:, None]) / tl.where(mass > 0, mass, 1.0)
    return tl.where(mask & (mass > 0), prob, 0.0)


@triton.jit
def _acceptance(
    requests,
    live,
    sampled,
    scale,
    seed,
    inputs,
    work,
    sizes,
    METHOD: tl.constexpr,
    HAS_DRAFT: tl.constexpr,
    TILE: tl.constexpr,
    BLOCK_R: tl.constexpr,
    ROWS_PAD: tl.constexpr,
    TILES_PAD: tl.constexpr,
    TILE_TOKENS: tl.constexpr,
):
    """Per-row normalisers from pass A's tile statistics, acceptance, tau and the pass-B plan
    (an ``Acceptance``).

    Greedy acceptance needs each row's argmax: with TILE_TOKENS (the small-grid kernel) pass A
    stored every tile's first argmax (greedy) or race winner (sampled) in tile_token, and the
    argmax is read from there; otherwise pass A stored where the draft's own tile first reaches its
    max (draft_first_max) and ``greedy.argmax`` is zeros (the caller re-reads the argmax tile of
    row tau).
    """
    rows = tl.arange(0, ROWS_PAD)
    num_drafts = sizes.num_drafts
    row_index, index3, mask3, draft_row = _row_indices(requests, live, sizes, ROWS_PAD, TILES_PAD)
    sampled_draft = draft_row & sampled[:, None]
    # Every load first, masked by what is known before any of them returns: a reduction (a
    # bar.sync) between two loads keeps the second from being issued early (``compile_check.py
    # --resources`` counts the waves of loads after the small grid's ticket).
    # Rows whose draft turns out invalid read values nothing uses (``valid`` masks them below).
    drafts = tl.load(inputs.draft_tokens + requests[:, None] * num_drafts + rows[None, :], mask=draft_row, other=-1)
    tile_max = tl.load(work.tile_max + index3, mask=mask3, other=float("-inf"), cache_modifier=".cg")
    tile_sum = tl.load(work.tile_sum + index3, mask=mask3 & sampled[:, None, None], other=0.0, cache_modifier=".cg")
    tile_tokens, excluded_tokens, draft_first, at, excluded_sums = _load_draft_token_statistics(
        work,
        row_index,
        index3,
        mask3,
        draft_row,
        sampled,
        sampled_draft,
        HAS_DRAFT,
        BLOCK_R,
        ROWS_PAD,
        TILES_PAD,
        TILE_TOKENS,
    )
    if HAS_DRAFT:
        d_tile_max, d_tile_sum, d_at = _load_draft_statistics(work, requests, sampled_draft, sizes, ROWS_PAD, TILES_PAD)
    if METHOD == contract.METHOD_SYNTHETIC:
        rates = tl.load(inputs.rates + rows, mask=rows < num_drafts, other=0.0)
    # ptxas still issues a load late if its value is needed late: tie the row loads into the first
    # reduction's input (exactly zero), so that all are issued before it stalls on the statistics.
    late = zero_after(at)
    if HAS_DRAFT:
        late += zero_after(d_at)
    else:
        late += zero_after(excluded_sums) + zero_after(excluded_tokens)
    tile_max = tile_max + late[:, :, None]

    valid = draft_row & (drafts >= 0) & (drafts < sizes.vocab)
    excluded_sums = tl.where(valid & sampled[:, None], excluded_sums, 0.0)
    num_valid = tl.min(tl.where(valid, ROWS_PAD, rows[None, :]), axis=1)
    reference, mass, tile_weight = _row_normalisers(tile_max, tile_sum, scale)
    greedy, greedy_accepted = _greedy_acceptance(
        tile_max, tile_tokens, draft_first, drafts, valid, TILE, BLOCK_R, ROWS_PAD, TILES_PAD, TILE_TOKENS
    )

    prob = _prob_at(at, valid & sampled[:, None], reference, mass, scale)
    ratio = prob
    d_reference = tl.zeros((BLOCK_R, ROWS_PAD), dtype=tl.float32)
    d_mass = tl.zeros((BLOCK_R, ROWS_PAD), dtype=tl.float32)
    if HAS_DRAFT:
        d_reference, d_mass, _ = _row_normalisers(d_tile_max, d_tile_sum, scale)
        d_prob = _prob_at(d_at, valid & sampled[:, None], d_reference, d_mass, scale)
        ratio = tl.where(d_prob > 0, prob / tl.where(d_prob > 0, d_prob, 1.0), tl.where(prob > 0, float("inf"), 0.0))

    seeds2 = tl.broadcast_to(seed[:, None], (BLOCK_R, ROWS_PAD))
    rows2 = tl.broadcast_to(rows[None, :], (BLOCK_R, ROWS_PAD))
    accept_u, tile_u, key_lo, key_hi = row_draws(seeds2, rows2, contract.PURPOSE_VERIFY)
    if METHOD == contract.METHOD_SYNTHETIC:
        accepted = valid & (accept_u < rates[None, :])
    else:
        accepted = tl.where(sampled[:, None], valid & (accept_u < ratio), greedy_accepted)
    if METHOD != contract.METHOD_BLOCK or HAS_DRAFT:  # (block verification with one-hot drafts takes tau below)
        tau = tl.min(tl.where(accepted, ROWS_PAD, rows[None, :]), axis=1)
    else:
        tau = tl.zeros((BLOCK_R,), tl.int32)
    verdict = Verdict(
        tau,
        requests < 0,
        tl.full((BLOCK_R,), -1, tl.int32),
        tl.full((BLOCK_R,), -1, tl.int32),
        tl.full((BLOCK_R, ROWS_PAD), 1.0, tl.float32),
    )
    if METHOD == contract.METHOD_BLOCK:
        if HAS_DRAFT:
            verdict = _block_verdict_draft_logits(ratio, accept_u, num_valid, sampled, tau, ROWS_PAD)
        else:
            verdict = _block_verdict_one_hot(prob, accept_u, num_valid, sampled, greedy_accepted, verdict, ROWS_PAD)
    elif HAS_DRAFT:
        deferred = sampled & (tau < num_valid)
        plan_lo = tl.where(deferred, tau, -1)
        verdict = Verdict(tau, deferred, plan_lo, plan_lo, verdict.prefix)
    return Acceptance(
        drafts,
        num_valid,
        TargetRows(tile_max, reference, mass, tile_weight),
        DraftRows(d_reference, d_mass),
        greedy,
        Draws(tile_u, excluded_sums, tile_tokens, excluded_tokens),
        verdict,
    )


@triton.jit
def _row_indices(requests, live, sizes, ROWS_PAD: tl.constexpr, TILES_PAD: tl.constexpr):
    """Where a request block's rows sit in the per-row buffers ([B, ROWS]) and their tiles in the
    per-tile ones (index and mask [B, ROWS, TILES]), and which rows are draft rows ([B, ROWS])."""
    rows = tl.arange(0, ROWS_PAD)
    tiles = tl.arange(0, TILES_PAD)
    num_rows = sizes.num_drafts + 1
    row_index = requests[:, None] * num_rows + rows[None, :]
    row_live = live[:, None] & (rows[None, :] < num_rows)
    index3 = row_index[:, :, None] * sizes.num_tiles + tiles[None, None, :]
    mask3 = row_live[:, :, None] & (tiles[None, None, :] < sizes.num_tiles)
    draft_row = live[:, None] & (rows[None, :] < sizes.num_drafts)
    return row_index, index3, mask3, draft_row


@triton.jit
def _load_draft_token_statistics(
    work,
    row_index,
    index3,
    mask3,
    draft_row,
    sampled,
    sampled_draft,
    HAS_DRAFT: tl.constexpr,
    BLOCK_R: tl.constexpr,
    ROWS_PAD: tl.constexpr,
    TILES_PAD: tl.constexpr,
    TILE_TOKENS: tl.constexpr,
):
    """What pass A stored about each row's draft token: with TILE_TOKENS the tiles' draws
    (``tile_tokens``) and the one-hot residual's winners (``excluded_tokens``), else where the
    draft's tile first reaches its max (``draft_first``); the draft's target logit (``at``) and
    its tile's mass without it (``excluded_sums``, one-hot drafts)."""
    tile_tokens = tl.zeros((BLOCK_R, ROWS_PAD, TILES_PAD), dtype=tl.int32)
    excluded_tokens = tl.zeros((BLOCK_R, ROWS_PAD), dtype=tl.int32)
    draft_first = tl.full((BLOCK_R, ROWS_PAD), -1, tl.int32)
    if TILE_TOKENS:
        # With draft logits this runs before the residuals, and the decider reloads the sampled
        # rows' draws after its ticket: only greedy rows' are needed now (fewer registers live).
        token_mask = mask3 & ~sampled[:, None, None] if HAS_DRAFT else mask3
        tile_tokens = tl.load(work.tile_token + index3, mask=token_mask, other=0, cache_modifier=".cg")
        if not HAS_DRAFT:
            excluded_tokens = tl.load(
                work.excluded_token + row_index, mask=sampled_draft, other=0, cache_modifier=".cg"
            )
    else:
        draft_first = tl.load(
            work.draft_first_max + row_index, mask=draft_row & ~sampled[:, None], other=-1, cache_modifier=".cg"
        )
    at = tl.load(work.at_draft + row_index, mask=sampled_draft, other=float("-inf"), cache_modifier=".cg")
    excluded_sums = tl.zeros((BLOCK_R, ROWS_PAD), dtype=tl.float32)
    if not HAS_DRAFT:  # every row's mass without its draft token, loaded now rather than after tau is known
        excluded_sums = tl.load(work.excluded_sum + row_index, mask=sampled_draft, other=0.0, cache_modifier=".cg")
    return tile_tokens, excluded_tokens, draft_first, at, excluded_sums


@triton.jit
def _load_draft_statistics(work, requests, sampled_draft, sizes, ROWS_PAD: tl.constexpr, TILES_PAD: tl.constexpr):
    """The draft rows' tile maxima and sums [B, ROWS, TILES] and the draft token's draft logit [B, ROWS]."""
    rows = tl.arange(0, ROWS_PAD)
    tiles = tl.arange(0, TILES_PAD)
    d_index3 = (requests[:, None, None] * sizes.num_drafts + rows[None, :, None]) * sizes.num_tiles + tiles[
        None, None, :
    ]
    d_mask3 = sampled_draft[:, :, None] & (tiles[None, None, :] < sizes.num_tiles)
    d_tile_max = tl.load(work.draft_tile_max + d_index3, mask=d_mask3, other=float("-inf"), cache_modifier=".cg")
    d_tile_sum = tl.load(work.draft_tile_sum + d_index3, mask=d_mask3, other=0.0, cache_modifier=".cg")
    d_at = tl.load(
        work.draft_at_draft + requests[:, None] * sizes.num_drafts + rows[None, :],
        mask=sampled_draft,
        other=float("-inf"),
        cache_modifier=".cg",
    )
    return d_tile_max, d_tile_sum, d_at


@triton.jit
def _greedy_acceptance(
    tile_max,
    tile_tokens,
    draft_first,
    drafts,
    valid,
    TILE: tl.constexpr,
    BLOCK_R: tl.constexpr,
    ROWS_PAD: tl.constexpr,
    TILES_PAD: tl.constexpr,
    TILE_TOKENS: tl.constexpr,
):
    """Each row's argmax (a ``Greedy``) and whether a valid draft equals it ([B, ROWS])."""
    tiles = tl.arange(0, TILES_PAD)
    row_max = tl.max(tile_max, axis=2)
    first_tile = tl.min(tl.where(tile_max == row_max[:, :, None], tiles[None, None, :], TILES_PAD), axis=2)
    argmax = tl.zeros((BLOCK_R, ROWS_PAD), dtype=tl.int64)
    if TILE_TOKENS:
        at_first = tiles[None, None, :] == first_tile[:, :, None]
        argmax = tl.sum(tl.where(at_first, tile_tokens, 0), axis=2).to(tl.int64)
        accepted = valid & (drafts == argmax)
    else:
        accepted = valid & ((drafts // TILE) == first_tile) & (draft_first == drafts)
    return Greedy(first_tile, row_max, argmax), accepted


@triton.jit
def _block_verdict_draft_logits(ratio, accept_u, num_valid, sampled, tau, ROWS_PAD: tl.constexpr):
    """Block verification with draft logits: prefix ratios s_k = min(s_(k-1) r_(k-1), 1), s_0 = 1,
    over the valid rows; a request whose top step fails is deferred to pass B over rows lo..n-1."""
    rows = tl.arange(0, ROWS_PAD)
    earlier = rows[None, :, None] > rows[None, None, :]  # [1, k, j]: j < k
    at_end = rows[None, :] == num_valid[:, None]
    log_ratio = tl.log2(tl.where(ratio > 0, ratio, 1.0))
    log_ratio = tl.where(ratio > 0, tl.minimum(log_ratio, LOG_RATIO_CLAMP), -LOG_RATIO_CLAMP)
    log_step = tl.where(rows[None, :] < num_valid[:, None], log_ratio, 0.0)
    # Sums and running maxima over at most ROWS_PAD rows, as [B, ROWS, ROWS] masked reductions.
    exclusive = tl.sum(tl.where(earlier, log_step[:, None, :], 0.0), axis=2)
    not_later = rows[None, :, None] >= rows[None, None, :]
    log_prefix = exclusive - tl.max(tl.where(not_later, exclusive[:, None, :], float("-inf")), axis=2)
    prefix = tl.exp2(log_prefix)
    prefix_at_end = tl.sum(tl.where(at_end, prefix, 0.0), axis=1)
    u_at_end = tl.sum(tl.where(at_end, accept_u, 0.0), axis=1)
    top_passes = (num_valid >= 1) & (u_at_end < prefix_at_end)
    deferred = sampled & (num_valid >= 1) & ~top_passes
    lo = tl.max(tl.where((rows[None, :] < num_valid[:, None]) & (log_prefix == 0.0), rows[None, :], 0), axis=1)
    plan_lo = tl.where(deferred, lo, -1)
    plan_hi = tl.where(deferred, num_valid - 1, -1)
    tau = tl.where(sampled, tl.where(top_passes, num_valid, 0), tau)
    return Verdict(tau, deferred, plan_lo, plan_hi, prefix)


@triton.jit
def _block_verdict_one_hot(prob, accept_u, num_valid, sampled, greedy_accepted, verdict, ROWS_PAD: tl.constexpr):
    """Block verification with one-hot drafts: q(x) = 1, so every ratio is p(x) <= 1 and s_k is the
    product of the earlier rows' probabilities: one masked product, no logarithms and no running
    maximum. Greedy requests ride on the same product: their step is 1 for an accepted draft and 0
    from the first rejection on, so s_k > 0 exactly while every earlier draft was accepted."""
    rows = tl.arange(0, ROWS_PAD)
    earlier = rows[None, :, None] > rows[None, None, :]  # [1, k, j]: j < k
    at_end = rows[None, :] == num_valid[:, None]
    step = tl.where(rows[None, :] < num_valid[:, None], tl.minimum(prob, 1.0), 1.0)
    step = tl.where(sampled[:, None], step, greedy_accepted.to(tl.float32))
    prefix = tl.reduce(tl.where(earlier, step[:, None, :], 1.0), 2, _product)
    # Row k passes when u_k < h_k = Z / (Z + 1 - s_k), Z = s_k (1 - p_k), the residual's mass
    # (u_k < s_k at the top row): compared as u (Z + 1 - s_k) < Z, without a division.
    residual = prefix * (1.0 - prob)
    denominator = residual + 1.0 - prefix
    below = tl.where(denominator > 0, accept_u * denominator < residual, True)
    below = tl.where(at_end, accept_u < prefix, below)
    passes = (rows[None, :] >= 1) & (rows[None, :] <= num_valid[:, None]) & below
    passes = tl.where(sampled[:, None], passes, prefix > 0)  # 0 past row n: its step is 0
    tau = tl.max(tl.where(passes, rows[None, :], 0), axis=1)
    return Verdict(tau, verdict.deferred, verdict.plan_lo, verdict.plan_hi, prefix)


@triton.jit
def _product(a, b):
    return a * b


@triton.jit
def _decide(
    block,
    logits,
    inputs,
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
    """Acceptance and the emitted token for one block of requests (vectorised over rows and tiles)."""
    requests = (block * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    live = requests < sizes.num_requests
    rows = tl.arange(0, ROWS_PAD)
    temperature = tl.load(inputs.temperature + requests, mask=live, other=0.0)
    sampled = live & (temperature > 0)
    scale = temperature_scale(temperature)
    seed = tl.load(inputs.seed + requests, mask=live, other=0)
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
        HAS_DRAFT,
        TILE,
        BLOCK_R,
        ROWS_PAD,
        TILES_PAD,
        False,
    )
    verdict = decision.verdict
    target = decision.target

    # Round-trip tau through memory: a fresh value keeps the compiler from giving the tile re-read
    # below a replicated layout (a stack frame per thread, or a slower decision: see the tuning
    # table in benchmarks/README.md).
    tl.store(work.plan + requests * 2, verdict.tau, mask=live)
    tl.debug_barrier()
    tau = tl.load(work.plan + requests * 2, mask=live, other=0)
    tl.debug_barrier()
    at_tau = rows[None, :] == tau[:, None]
    row_offset = target_row_start(logits, requests, tau, sizes.num_drafts, live)
    emitted = tl.zeros((BLOCK_R,), dtype=tl.int64)
    greedy = live & ~sampled
    if tl.max(greedy.to(tl.int32)) > 0:
        tile_tau = tl.sum(tl.where(at_tau, decision.greedy.first_tile, 0), axis=1)
        greedy_token = first_max_in_tile(
            logits.target,
            row_offset,
            tile_tau,
            tl.sum(tl.where(at_tau, decision.greedy.row_max, 0.0), axis=1),
            greedy,
            sizes.vocab,
            TILE,
        )
        emitted = tl.where(greedy, greedy_token, emitted)
    drawn = sampled & ~verdict.deferred
    if tl.max(drawn.to(tl.int32)) > 0:
        sampled_token = _emit_from_target(
            logits,
            requests,
            seed,
            tau,
            at_tau,
            decision.num_valid,
            decision.drafts,
            target,
            decision.draws.tile_u,
            decision.draws.excluded_sums,
            scale,
            drawn,
            sizes,
            HAS_DRAFT,
            TILE,
            TILES_PAD,
        )
        emitted = tl.where(drawn, sampled_token, emitted)
    write_tokens(
        outputs.tokens,
        outputs.num_tokens,
        requests,
        decision.drafts,
        tau,
        emitted,
        live & ~verdict.deferred,
        sizes.num_drafts,
        ROWS_PAD,
    )
    if HAS_DRAFT:
        tl.store(work.plan + requests * 2, verdict.plan_lo, mask=live)
        tl.store(work.plan + requests * 2 + 1, verdict.plan_hi, mask=live)
        if tl.max(verdict.deferred.to(tl.int32)) > 0:
            _store_row_info(
                work.row_info,
                requests,
                rows,
                verdict.deferred,
                sizes.num_drafts,
                target,
                decision.draft,
                verdict.prefix,
            )


@triton.jit
def _store_row_info(row_info_ptr, requests, rows, deferred, num_drafts, target, draft, prefix):
    """For pass B: per draft row, the target and draft (reference max, log2 mass) and the prefix ratio."""
    base = (requests[:, None] * num_drafts + rows[None, :]) * 5
    mask = deferred[:, None] & (rows[None, :] < num_drafts)
    tl.store(row_info_ptr + base, target.reference, mask=mask)
    tl.store(row_info_ptr + base + 1, _log2_mass(target.mass), mask=mask)
    tl.store(row_info_ptr + base + 2, draft.reference, mask=mask)
    tl.store(row_info_ptr + base + 3, _log2_mass(draft.mass), mask=mask)
    tl.store(row_info_ptr + base + 4, prefix, mask=mask)


@triton.jit
def _load_row_info(row_info_ptr, requests, rows, num_drafts, mask):
    """What ``_store_row_info`` stored for draft row ``rows`` (int32 [B]): target reference and log2
    mass, draft reference and log2 mass, prefix ratio ([B] each; 0 outside ``mask``)."""
    info = row_info_ptr + (requests * num_drafts + rows) * 5
    return (
        tl.load(info, mask=mask, other=0.0),
        tl.load(info + 1, mask=mask, other=0.0),
        tl.load(info + 2, mask=mask, other=0.0),
        tl.load(info + 3, mask=mask, other=0.0),
        tl.load(info + 4, mask=mask, other=0.0),
    )


@triton.jit
def _planned_tiles(
    requests, deferred, plan_lo, plan_hi, num_drafts, num_tiles, ROWS_PAD: tl.constexpr, TILES_PAD: tl.constexpr
):
    """Pass B's plan for requests [B]: the planned rows [B, ROWS] (plan_lo..plan_hi of deferred
    requests), and the index and mask [B, ROWS, TILES] of their tiles in the residual buffers."""
    rows = tl.arange(0, ROWS_PAD)
    tiles = tl.arange(0, TILES_PAD)
    planned = deferred[:, None] & (rows[None, :] >= plan_lo[:, None]) & (rows[None, :] <= plan_hi[:, None])
    index3 = ((requests[:, None] * num_drafts + rows[None, :]) * num_tiles)[:, :, None] + tiles[None, None, :]
    mask3 = planned[:, :, None] & (tiles[None, None, :] < num_tiles)
    return planned, index3, mask3


@triton.jit
def _log2_mass(mass):
    """log2 of a row mass (0 for a row without mass), as pass B's normalisers take it."""
    return tl.log2(tl.where(mass > 0, mass, 1.0))


@triton.jit
def _emit_from_target(
    logits,
    requests,
    seed,
    tau,
    at_tau,
    num_valid,
    drafts,
    target,
    tile_u,
    excluded_sums,
    scale,
    active,
    sizes,
    HAS_DRAFT: tl.constexpr,
    TILE: tl.constexpr,
    TILES_PAD: tl.constexpr,
):
    """Token at row tau from the plain target (``target``: its ``TargetRows``), or (one-hot drafts,
    tau < n) the target without x_tau.

    A residual without mass falls back to the plain target; a row without mass gives token 0. The
    race key is drawn for row tau from the seed (int64 [B]) rather than selected out of the
    [B, ROWS] draws, as tau itself comes back from memory: values in the statistics' layout are
    what the tau round trip keeps away from the tile.
    """
    tiles = tl.arange(0, TILES_PAD)
    at_tau3 = at_tau[:, :, None]
    weights = tl.sum(tl.where(at_tau3, target.tile_weight, 0.0), axis=1)  # [B, TILES]
    maxima = tl.max(tl.where(at_tau3, target.tile_max, float("-inf")), axis=1)
    ref_tau = tl.sum(tl.where(at_tau, target.reference, 0.0), axis=1)
    tile_u_tau = tl.sum(tl.where(at_tau, tile_u, 0.0), axis=1)
    _, _, key_lo_tau, key_hi_tau = row_draws(seed, tau, contract.PURPOSE_VERIFY)
    excluded = tl.full(tau.shape, -1, tl.int64)
    if not HAS_DRAFT:
        draft_tau = tl.sum(tl.where(at_tau, drafts, 0), axis=1)
        exclude = active & (tau < num_valid)
        excluded_sum = tl.where(exclude, tl.sum(tl.where(at_tau, excluded_sums, 0.0), axis=1), 0.0)
        draft_tile = (draft_tau // TILE).to(tl.int32)
        own = tiles[None, :] == draft_tile[:, None]
        own_max = tl.max(tl.where(own, maxima, float("-inf")), axis=1)
        own_weight = excluded_sum * tl.exp2((own_max - ref_tau) * scale)
        without = tl.where(own, tl.where(own_max == float("-inf"), 0.0, own_weight)[:, None], weights)
        use_residual = exclude & (tl.sum(without, axis=1) > 0)
        weights = tl.where(use_residual[:, None], without, weights)
        excluded = tl.where(use_residual, draft_tau, -1)
    chosen = inverse_cdf(weights, tile_u_tau, tiles)
    chosen_max = tl.max(tl.where(tiles[None, :] == chosen[:, None], maxima, float("-inf")), axis=1)
    row_offset = target_row_start(logits, requests, tau, sizes.num_drafts, active)
    token = sample_in_tile(
        logits.target,
        row_offset,
        chosen,
        chosen_max,
        scale,
        excluded,
        key_lo_tau,
        key_hi_tau,
        active & (chosen >= 0),
        sizes.vocab,
        TILE,
    )
    return tl.where(chosen >= 0, token, 0)

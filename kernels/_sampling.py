"""Triton device helpers shared by the verification kernels: random streams and the two-level sampler.

All are ``@triton.jit`` functions, inlined into their callers. Tensors are blocks of ``BLOCK_R``
requests (one request per program on a GPU; many under the CPU interpreter, where the cost is per
interpreted operation).
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)
# +inf logits become this (they then hold all the mass), and 1 / T is capped at MAX_INV_TEMPERATURE,
# so (l - max) * log2(e) / T stays finite for any sane logits (no inf - inf, no 0 * inf).
HUGE_LOGIT: tl.constexpr = tl.constexpr(1.0e30)
MAX_INV_TEMPERATURE: tl.constexpr = tl.constexpr(1.0e6)
# Fixed point of the sampler's prefix sums: weights scaled to [0, 1] are counted in units of 2**-40
# (a tile of 4096 such weights sums below 2**52, far inside int64).
FIXED_ONE: tl.constexpr = tl.constexpr(1099511627776.0)
# |log2 a| clamp for block verification's prefix ratios (saturates long before; avoids inf - inf).
LOG_RATIO_CLAMP: tl.constexpr = tl.constexpr(1.0e4)


@triton.jit
def uniform_from_word(word):
    """uint32 -> float32 in [0, 1), bit-identical to ``tl.rand`` (and to the twin's Philox)."""
    x = word.to(tl.int32, bitcast=True)
    x = tl.where(x < 0, ~x, x)  # ~x == -x - 1 without the int32 overflow at -2**31
    return x.to(tl.float32) * 4.6566127342e-10


@triton.jit
def row_uniforms(seed, row, PURPOSE: tl.constexpr):
    """Three float32 uniforms from Philox counter (0, row, PURPOSE, 0) under key ``seed``.

    seed: int64 block; row: int32 block of the same shape (position within the request).
    """
    zero = (row * 0).to(tl.uint32)
    w0, w1, w2, w3 = tl.philox(seed, zero, row.to(tl.uint32), zero + PURPOSE, zero)
    return uniform_from_word(w0), uniform_from_word(w1), uniform_from_word(w2)


@triton.jit
def temperature_scale(temperature):
    """log2(e) * min(1 / T, MAX_INV_TEMPERATURE) for sampled requests, 1 for greedy ones."""
    sampled = temperature > 0
    inverse = tl.minimum(1.0 / tl.where(sampled, temperature, 1.0), MAX_INV_TEMPERATURE)
    return tl.where(sampled, LOG2E * inverse, 1.0)


@triton.jit
def sanitize(logits):
    """float32 logits with NaN -> -inf and +inf -> HUGE_LOGIT (so max/argmax/exp stay defined)."""
    logits = tl.where(logits == logits, logits, float("-inf"))
    return tl.minimum(logits, HUGE_LOGIT)


@triton.jit
def residual_weights(logits, d_logits, mask, target_ref, target_log_mass, draft_ref, draft_log_mass, prefix, scale):
    """max(s p - q, 0) [B, N] for raw target and draft logits [B, N] (any float dtype).

    p = 2**((l - target_ref) * scale - target_log_mass) and likewise q: the rows' softmax under
    their global (reference max, log2 mass); s = prefix (block verification's prefix ratio, else
    1); all per-request [B]. Zero outside ``mask``.
    """
    logits = sanitize(logits.to(tl.float32))
    d_logits = sanitize(d_logits.to(tl.float32))
    target_p = tl.exp2((logits - target_ref[:, None]) * scale[:, None] - target_log_mass[:, None])
    draft_q = tl.exp2((d_logits - draft_ref[:, None]) * scale[:, None] - draft_log_mass[:, None])
    return tl.where(mask, tl.maximum(prefix[:, None] * target_p - draft_q, 0.0), 0.0)


@triton.jit
def inverse_cdf(weights, uniform, positions):
    """Index i with probability weights[:, i] / sum, by inverse CDF; -1 where a row has no mass.

    weights: float32 [B, N] >= 0; uniform: float32 [B] in [0, 1); positions: int32 [N] = arange(N).
    The weights are scaled by their row maximum and rounded down to multiples of 2**-40 (int64),
    so the prefix sums are exact: the index depends on the weights and the uniform only, never on
    the order in which a layout adds them (batch invariance across launch shapes). The index is
    the first whose prefix sum exceeds floor(u * total), which never lands on a zero weight; a
    weight below 2**-40 of the row's largest is never drawn (at most N * 2**-40 of the mass).
    """
    top = tl.max(weights, axis=1)
    inverse_top = 1.0 / tl.where(top > 0, top, 1.0)
    fixed = (weights * inverse_top[:, None] * FIXED_ONE).to(tl.int64)
    cumulative = tl.cumsum(fixed, axis=1)
    total = tl.sum(fixed, axis=1)
    threshold = (uniform.to(tl.float64) * total.to(tl.float64)).to(tl.int64)
    count = tl.sum((cumulative <= threshold[:, None]).to(tl.int32), axis=1)
    last_positive = tl.max(tl.where(fixed > 0, positions[None, :], -1), axis=1)
    return tl.where(total > 0, tl.minimum(count, last_positive), -1)


@triton.jit
def sample_in_tile(
    logits_ptr, row_offset, tile, tile_max, scale, excluded, uniform, active, vocab, TILE: tl.constexpr
):
    """Re-read one vocabulary tile per request and draw a token from softmax(l * scale) inside it.

    row_offset: int64 [B] element offset of the request's logit row; tile: int32 [B] (-1 = none);
    tile_max: float32 [B], the tile's max logit (any reference works: weights are tile-local);
    scale: float32 [B] = log2(e) / T; excluded: int64 [B] token given zero weight (-1 = none);
    uniform: float32 [B]; active: bool [B]. Returns int64 [B] token ids (0 where none).
    """
    positions = tl.arange(0, TILE)
    vocab_ids = tile[:, None] * TILE + positions[None, :]
    mask = active[:, None] & (tile[:, None] >= 0) & (vocab_ids < vocab)
    logits = tl.load(logits_ptr + row_offset[:, None] + vocab_ids, mask=mask, other=float("-inf"))
    logits = sanitize(logits.to(tl.float32))
    reference = tl.where(tile_max == float("-inf"), 0.0, tile_max)
    weights = tl.exp2((logits - reference[:, None]) * scale[:, None])
    weights = tl.where(mask & (vocab_ids != excluded[:, None]), weights, 0.0)
    inner = inverse_cdf(weights, uniform, positions)
    token = tl.where(inner >= 0, tile * TILE + inner, 0)
    return token.to(tl.int64)


@triton.jit
def first_max_in_tile(logits_ptr, row_offset, tile, tile_max, active, vocab, TILE: tl.constexpr):
    """Re-read one tile per request: the first index whose logit equals the tile's maximum.

    row_offset: int64 [B]; tile: int32 [B]; tile_max: float32 [B]; active: bool [B].
    Returns int64 [B] token ids (0 where inactive; a row of -inf gives its first index).
    """
    vocab_ids = tile[:, None] * TILE + tl.arange(0, TILE)[None, :]
    mask = active[:, None] & (vocab_ids < vocab)
    logits = tl.load(logits_ptr + row_offset[:, None] + vocab_ids, mask=mask, other=float("-inf"))
    logits = sanitize(logits.to(tl.float32))
    first = tl.min(tl.where(mask & (logits == tile_max[:, None]), vocab_ids, vocab), axis=1)
    return tl.where(first < vocab, first, 0).to(tl.int64)


@triton.jit
def write_tokens(tokens_ptr, num_tokens_ptr, requests, drafts, tau, emitted, write, num_drafts, ROWS_PAD: tl.constexpr):
    """tokens[r] = drafts[r, :tau], emitted, -1...; num_tokens[r] = tau + 1 -- for requests with ``write``.

    requests: int64 [B]; drafts: int64 [B, ROWS_PAD] (row k = draft k); tau: int32 [B];
    emitted: int64 [B]; write: bool [B].
    """
    rows = tl.arange(0, ROWS_PAD)
    values = tl.where(rows[None, :] < tau[:, None], drafts, -1)
    values = tl.where(rows[None, :] == tau[:, None], emitted[:, None], values)
    mask = write[:, None] & (rows[None, :] <= num_drafts)
    tl.store(tokens_ptr + requests[:, None] * (num_drafts + 1) + rows[None, :], values, mask=mask)
    tl.store(num_tokens_ptr + requests, tau + 1, mask=write)

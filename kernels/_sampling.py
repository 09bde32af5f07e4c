"""Triton device helpers shared by the verification kernels: random streams and the two-level sampler.

The sampler draws a vocabulary tile by inverse CDF over the tiles' masses (one uniform), then a
token inside the tile by an exponential race: the token whose log2 weight minus log2 E is largest,
E ~ Exp(1) from a keyed hash of the token id (the same E wherever the tile is read, so the draw
depends on the weights and the key only: batch invariance across launch shapes). The race needs no
prefix sums, so a program holding the tile in registers draws in it at the cost of a few
operations an element and one reduction.

All are ``@triton.jit`` functions, inlined into their callers. Tensors are blocks of ``BLOCK_R``
requests (one request per program on a GPU; many under the CPU interpreter, where the cost is per
interpreted operation).
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from ._contract import DEFAULT_TILE

LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)
# +inf logits become this (they then hold all the mass), and 1 / T is capped at MAX_INV_TEMPERATURE,
# so (l - max) * log2(e) / T stays finite for any sane logits (no inf - inf, no 0 * inf).
HUGE_LOGIT: tl.constexpr = tl.constexpr(1.0e30)
MAX_INV_TEMPERATURE: tl.constexpr = tl.constexpr(1.0e6)
# Fixed point of the sampler's prefix sums: weights scaled to [0, 1] are counted in units of 2**-40
# (a tile of 4096 such weights sums below 2**52, far inside int64).
FIXED_ONE: tl.constexpr = tl.constexpr(1099511627776.0)
LN2: tl.constexpr = tl.constexpr(0.6931471805599453)
# Below this v, -ln(1 - v) comes from its series (1 - v would round away the small v).
SERIES_BELOW: tl.constexpr = tl.constexpr(0.015625)
# Tokens a re-read tile's race takes at a time (see sample_in_tile): the default tile in one.
RACE_CHUNK: tl.constexpr = tl.constexpr(DEFAULT_TILE)
# |log2 a| clamp for block verification's prefix ratios (saturates long before; avoids inf - inf).
LOG_RATIO_CLAMP: tl.constexpr = tl.constexpr(1.0e4)


@triton.jit
def uniform_from_word(word):
    """uint32 -> float32 in [0, 1), bit-identical to ``tl.rand`` (and to the twin's Philox)."""
    x = word.to(tl.int32, bitcast=True)
    x = tl.where(x < 0, ~x, x)  # ~x == -x - 1 without the int32 overflow at -2**31
    return x.to(tl.float32) * 4.6566127342e-10


@triton.jit
def row_draws(seed, row, PURPOSE: tl.constexpr):
    """Philox counter (0, row, PURPOSE, 0) under key ``seed``: two float32 uniforms (words 0, 1)
    and the in-tile race's hash key (words 2, 3, uint32).

    seed: int64 block; row: int32 block of the same shape (position within the request).
    """
    zero = (row * 0).to(tl.uint32)
    w0, w1, w2, w3 = tl.philox(seed, zero, row.to(tl.uint32), zero + PURPOSE, zero)
    return uniform_from_word(w0), uniform_from_word(w1), w2, w3


@triton.constexpr_function
def _interpreted():
    """Whether Triton loaded this module's kernels for its interpreter: it decides when ``@triton.jit``
    runs, from ``TRITON_INTERPRET`` as the program set it before importing the kernels. Compiled, this is a
    constant folded at compile time (the interpreter-only branches below generate no code)."""
    return isinstance(uniform_from_word, InterpretedFunction)


@triton.jit
def _fast_log2(x):
    """log2 by the special-function unit (lg2.approx, ~2**-22 absolute error): ``tl.log2`` is
    libdevice's exact log2f, about twenty instructions an element. ``.ftz``: without it ptxas
    wraps each one in a subnormal fix-up (a compare, a scale, an add: three instructions), and
    the race's inputs are never subnormal (1 - v >= 6e-8, E >= 1e-10), so the result is the same.
    The interpreter runs no inline assembly: there, ``tl.log2``."""
    if _interpreted():
        result = tl.log2(x)
    else:
        result = tl.inline_asm_elementwise(
            "lg2.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1
        )
    return result


@triton.jit
def zero_after(x):
    """0.0 [shape of x] that ptxas cannot compute before x is loaded: min(x - x, 0) is 0 for
    every float (NaN - NaN and inf - inf give NaN, and min returns its other operand). Added to
    a value needed early, it makes ptxas issue x's load before that value's uses stall. The
    interpreter's numpy warns on inf - inf: there, plain zeros."""
    if _interpreted():
        result = tl.zeros(x.shape, tl.float32)
    else:
        x = x.to(tl.float32)
        result = tl.minimum(x - x, 0.0)
    return result


@triton.jit
def _wrap32(x):
    """uint64 -> its low 32 bits as uint32 (arithmetic modulo 2**32, written so that the
    interpreter's overflow checks, which do not allow uint32 to wrap, see no overflow)."""
    return (x & 0xFFFFFFFF).to(tl.uint32)


@triton.jit
def _fmix32(x):
    """MurmurHash3's 32-bit finaliser (uint32 -> uint32, a bijection with full avalanche)."""
    x ^= x >> 16
    x = _wrap32(x.to(tl.uint64) * 0x85EBCA6B)
    x ^= x >> 13
    x = _wrap32(x.to(tl.uint64) * 0xC2B2AE35)
    x ^= x >> 16
    return x


@triton.jit
def race_noise(vocab_ids, key_lo, key_hi):
    """log2 E [B, N], E ~ Exp(1) independently per token: vocab_ids int32 [B, N], keys uint32 [B].

    E = -ln(1 - v), v = (h + 0.5) 2**-32 for a 32-bit hash h of (token, key): full relative precision
    near E = 0, where the likely winners are (a series there, as 1 - v would round v away).
    """
    x = _wrap32(vocab_ids.to(tl.uint64) * 0x9E3779B9 + key_lo.to(tl.uint64)[:, None])
    x = _fmix32(_fmix32(x) ^ key_hi[:, None])
    # (x + 0.5) 2**-32 as one fused multiply-add, bit for bit: the scale is a power of two.
    v = tl.minimum(x.to(tl.float32) * 2.3283064365386963e-10 + 1.1641532182693481e-10, 0.99999994)
    series = v * (1.0 + v * (0.5 + v * 0.33333334))
    exponential = tl.where(v < SERIES_BELOW, series, -_fast_log2(1.0 - v) * LN2)
    return _fast_log2(exponential)


@triton.jit
def log2_weights(weights):
    """log2 of weights >= 0, -inf where a weight is 0 (the race's input for linear weights)."""
    return tl.where(weights > 0, tl.log2(tl.where(weights > 0, weights, 1.0)), float("-inf"))


@triton.jit
def race_keys(log_weights, vocab_ids, key_lo, key_hi):
    """The exponential race's keys log2 w - log2 E [B, N]; the largest key's token is drawn with
    probability w / sum w.

    log_weights: float32 [B, N], -inf for tokens that must not be drawn (any per-request offset:
    only differences matter); vocab_ids: int32 [B, N], the tokens' ids (they key the noise).
    Tokens of weight 0 keep the key -inf; callers draw only in tiles with mass.
    """
    return race_keys_from_noise(log_weights, race_noise(vocab_ids, key_lo, key_hi))


@triton.jit
def race_keys_from_noise(log_weights, noise):
    """``race_keys`` from noise [B, N] that ``race_noise`` made earlier: it needs no logits, so a
    program holding a tile computes it while the tile's load is in flight."""
    return tl.where(log_weights == float("-inf"), float("-inf"), log_weights - noise)


@triton.jit
def race_winner(keys):
    """int32 [B]: index along axis 1 of the largest race key (the first on a tie)."""
    return tl.argmax(keys, axis=1, tie_break_left=True)


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
    logits_ptr, row_offset, tile, tile_max, scale, excluded, key_lo, key_hi, active, vocab, TILE: tl.constexpr
):
    """Re-read one vocabulary tile per request and draw a token from softmax(l * scale) inside it.

    row_offset: int64 [B] element offset of the request's logit row; tile: int32 [B] (-1 = none);
    tile_max: float32 [B], the tile's max logit (any reference works: weights are tile-local);
    scale: float32 [B] = log2(e) / T; excluded: int64 [B] token given zero weight (-1 = none);
    key_lo, key_hi: uint32 [B], the race's key; active: bool [B]. Returns int64 [B] token ids.
    The race runs over the tile in chunks of RACE_CHUNK (the winner of a whole tile in registers,
    bit for bit; a larger ``tile_size`` takes several). The default tile is one chunk: with the
    noise laid out by the load (``detached``) it needs 48-119 registers, and it measured faster
    than smaller chunks (the tuning table in benchmarks/README.md, ``RACE_CHUNK``).
    """
    CHUNK: tl.constexpr = RACE_CHUNK if RACE_CHUNK < TILE else TILE
    row_offset = detached(row_offset)
    tile = detached(tile)
    scale = detached(scale)
    excluded = detached(excluded)
    key_lo = detached(key_lo)
    key_hi = detached(key_hi)
    active = detached(active.to(tl.int32)) != 0
    reference = detached(tl.where(tile_max == float("-inf"), 0.0, tile_max))
    best_key = tl.full(tile.shape, float("-inf"), tl.float32)
    best = tl.zeros(tile.shape, tl.int32)
    for start in tl.range(0, TILE, CHUNK):
        positions = start + tl.arange(0, CHUNK)
        vocab_ids = tile[:, None] * TILE + positions[None, :]
        mask = active[:, None] & (tile[:, None] >= 0) & (vocab_ids < vocab)
        logits = tl.load(logits_ptr + row_offset[:, None] + vocab_ids, mask=mask, other=float("-inf"))
        logits = sanitize(logits.to(tl.float32))
        log_weights = tl.where(
            mask & (vocab_ids != excluded[:, None]), (logits - reference[:, None]) * scale[:, None], float("-inf")
        )
        best_key, best = better_key(race_keys(log_weights, vocab_ids, key_lo, key_hi), start, best_key, best)
    return tl.where(tile >= 0, tile * TILE + best, 0).to(tl.int64)


@triton.jit
def detached(x):
    """x [B] as the same values rebuilt from a scalar where B == 1 (one request a program, as
    compiled), so a tile's arithmetic built from it is laid out by the tile's load. A value derived
    from the [B, ROWS, TILES] statistics otherwise pulls the race's noise into a layout of theirs,
    replicated across warps (compiled for sm_90: the hash computed 4-8 times a token at R=256 and a
    shared-memory conversion after it). Under the interpreter (B > 1) x itself."""
    if x.shape[0] == 1:
        x = tl.full(x.shape, 0, x.dtype) + tl.max(x, axis=0)
    return x


@triton.jit
def better_key(keys, start, best_key, best):
    """Fold a chunk's race keys [B, N] (positions start..start+N) into the running (best key, index)
    [B]; an earlier chunk keeps a tie, as one argmax over the whole tile would."""
    chunk_key, chunk_index = tl.max(keys, axis=1, return_indices=True, return_indices_tie_break_left=True)
    better = chunk_key > best_key
    return tl.where(better, chunk_key, best_key), tl.where(better, start + chunk_index, best)


@triton.jit
def target_row_start(logits, requests, rows, num_drafts, mask):
    """int64 [B]: the element offset in ``logits.target`` of each request's target row ``rows`` (int32
    scalar or [B]): from the strides, or with a row table (``logits.row_table``, the simulator's banks)
    read from it (entry request * (K+1) + row; 0 where ``mask`` is off)."""
    if logits.row_table:
        start = tl.load(logits.target_rows + requests * (num_drafts + 1) + rows, mask=mask, other=0)
    else:
        start = requests * logits.target_stride_r + rows.to(tl.int64) * logits.target_stride_k
    return start


@triton.jit
def draft_row_start(logits, requests, rows, num_drafts, mask):
    """int64 [B]: the same for draft row ``rows`` in ``logits.draft`` (table entry request * K + row)."""
    if logits.row_table:
        start = tl.load(logits.draft_rows + requests * num_drafts + rows, mask=mask, other=0)
    else:
        start = requests * logits.draft_stride_r + rows.to(tl.int64) * logits.draft_stride_k
    return start


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

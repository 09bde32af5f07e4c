"""The twin over a ``RowBank`` on the CPU: ``rejection_sample_banked``'s fast path (same tokens) and
``count_emitted_banked``'s (the same counts, no token sampled).

The generic twin (``reference._verify``) runs ~150 torch operations a call, each a few microseconds
of dispatch whatever its size, and races every token of every emitted row through three
logarithms. Here the small [R, K+1] arithmetic runs in numpy and only the transcendental steps
(exp, log2) stay in torch, on the same values: torch's CPU logarithms and exponentials take one
vector path for every element whatever its position or the tensor's size (``noise_from_hash``), and
numpy's +, -, *, / and running sums round as torch's do, so the bits are the same.

The race (``pruned_race``): the winner of ``argmax_v log2 w_v - log2 E_v`` is found from upper
bounds on each key that cost no logarithm -- ``log2 w`` from float32(w)'s bits, ``-log2 E`` from a
65,536-entry table on the top 16 bits of the token's hash (E rises with the hash) -- and exact keys
only for the tokens whose bound reaches the best one's exact key. The winner is among them (its key
is at least the best one's), ties included, so the token is the one the full race picks.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch

from ._contract import PURPOSE_RESIDUAL, PURPOSE_VERIFY
from ._philox import philox4x32_rows, uint32_to_uniform_numpy
from ._reference_rows import RowBank, _residual_sums, noise_from_hash, race_hash

__all__ = ["pruned_race", "race_bounds", "verify_banked"]

_LOG_RATIO_CLAMP = 1.0e4  # as reference._LOG_RATIO_CLAMP
_GOLDEN = np.uint32(0x9E3779B9)
_BUCKET_SHIFT = 16  # a hash's bucket: its top 16 bits
_INT32_MIN = int(np.iinfo(np.int32).min)
_BIT_TRICK_ERROR = 0.0860714  # max of log2(1 + m) - m on [0, 1]: float32 bits as an integer under-read log2
_MARGIN = 1.0e-3  # log2 units to spare: float32 rounding of the weight, the series' switch


def verify_banked(
    bank: RowBank,
    rows: np.ndarray,
    drafts: np.ndarray,
    temperature: np.ndarray,
    seed: np.ndarray,
    method: str,
    rates: np.ndarray | None,
    *,
    emit: bool = True,
) -> tuple[np.ndarray | None, np.ndarray]:
    """``rejection_sample_banked`` on host arrays (rows int64 [R, K+1], drafts int64 [R, K],
    temperature float32 [R], seed int64 [R], rates float32 [K] or None); the bank's vocabulary fits one
    tile. Returns tokens int64 [R, K+1] and num_tokens int32 [R]. ``emit=False``: num_tokens only (tokens
    None) -- how many tokens a request emits never depends on which token it samples, so neither the
    emitted row's probabilities nor the race are computed."""
    host = bank.host
    if host is None:
        raise ValueError(f"the fast twin needs a bank on the CPU, got one on {bank.target.argmax.device}")
    num_requests, num_rows = rows.shape
    num_drafts = num_rows - 1
    vocab = host.vocab
    request = np.arange(num_requests)
    valid = (drafts >= 0) & (drafts < vocab)
    safe_drafts = np.minimum(np.maximum(drafts, 0), vocab - 1)
    # (ufunc methods: numpy's np.cumprod, np.clip and .sum wrappers cost microseconds of Python a call)
    num_valid = np.add.reduce(np.logical_and.accumulate(valid, axis=1), axis=1)
    greedy = temperature == 0
    has_draft = bank.draft is not None
    words = _row_words(seed, num_rows, 2 if emit and bank.draft is not None else 1)
    accept_uniform = uint32_to_uniform_numpy(words[PURPOSE_VERIFY][0])

    draft_rows = rows[:, :num_drafts]
    if host.target_log_probs is None:
        target_log_prob = np.zeros(drafts.shape)
        log_ratio = target_log_prob.copy()
    else:
        target_log_prob = host.target_log_probs[draft_rows, safe_drafts].astype(np.float64)
        log_ratio = target_log_prob
        if host.draft_log_probs is not None:
            log_ratio = log_ratio - host.draft_log_probs[draft_rows, safe_drafts].astype(np.float64)
    # NaN -> -clamp, +-inf -> +-clamp (torch.nan_to_num then clamp; np.nan_to_num costs ~0.1 ms a call)
    log_ratio = np.where(np.isnan(log_ratio), -_LOG_RATIO_CLAMP, log_ratio)
    log_ratio = np.minimum(np.maximum(log_ratio, -_LOG_RATIO_CLAMP), _LOG_RATIO_CLAMP)

    argmax = host.argmax[rows]
    if method == "synthetic":
        assert rates is not None
        accepted = valid & (accept_uniform[:, :num_drafts] < rates)
    else:
        accepted = valid & (accept_uniform[:, :num_drafts].astype(np.float64) < _exp(log_ratio))
        accepted = np.where(greedy[:, None], valid & (drafts == argmax[:, :-1]), accepted)
    num_accepted = np.add.reduce(np.logical_and.accumulate(accepted, axis=1), axis=1)
    if greedy.all():
        return _assemble(drafts, num_accepted, argmax[request, num_accepted] if emit else None)

    residual_scale = np.ones(num_requests)
    if method == "block":
        tau, residual_scale = _block_decision(bank, rows, log_ratio, num_valid, accept_uniform, target_log_prob)
        num_accepted = np.where(greedy, num_accepted, tau)
    if not emit:
        return _assemble(drafts, num_accepted, None)
    greedy_tokens = argmax[request, num_accepted]
    emitted = _emit(bank, rows, words, num_accepted, num_valid, safe_drafts, residual_scale, has_draft)
    return _assemble(drafts, num_accepted, np.where(greedy, greedy_tokens, emitted))


def _exp(values: np.ndarray) -> np.ndarray:
    return torch.from_numpy(values).exp().numpy()


def _row_words(seed: np.ndarray, num_rows: int, num_purposes: int) -> list[list[np.ndarray]]:
    """words[purpose][w]: uint64 [R, num_rows] of Philox counter (0, row, purpose, 0) (``row_draws``)."""
    words = philox4x32_rows(seed, num_rows, num_purposes)
    return [[w[:, p] for w in words] for p in range(num_purposes)]


def _block_decision(
    bank: RowBank,
    rows: np.ndarray,
    log_ratio: np.ndarray,
    num_valid: np.ndarray,
    accept_uniform: np.ndarray,
    target_log_prob: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``reference._block_decision``: tau int64 [R] and the prefix ratio at tau float64 [R]."""
    num_requests, num_drafts = log_ratio.shape
    positions = np.arange(num_drafts + 1)
    in_block = positions[None, :num_drafts] < num_valid[:, None]
    step_log = np.zeros((num_requests, num_drafts + 1))
    step_log[:, :num_drafts] = np.where(in_block, log_ratio, 0.0)
    exclusive = np.cumsum(step_log, axis=1) - step_log
    prefix = _exp(exclusive - np.maximum.accumulate(exclusive, axis=1))
    if bank.draft is None:
        residual_mass = prefix[:, :num_drafts] * (1.0 - _exp(target_log_prob))
    else:
        residual_mass = _residual_masses(bank, rows[:, :num_drafts], prefix[:, :num_drafts])
    residual_mass = np.concatenate([residual_mass, np.zeros((num_requests, 1))], axis=1)
    denominator = residual_mass + 1.0 - prefix
    # (no overflow: residual masses are at most 1)
    threshold = np.divide(
        residual_mass, np.maximum(denominator, 1e-300), out=np.ones_like(residual_mass), where=denominator > 0
    )
    threshold = np.where(positions[None, :] == num_valid[:, None], prefix, threshold)
    passes = (positions[None, :] >= 1) & (positions[None, :] <= num_valid[:, None])
    passes &= accept_uniform.astype(np.float64) < threshold
    tau = np.maximum.reduce(np.where(passes, positions[None, :], 0), axis=1)
    return tau, prefix[np.arange(num_requests), tau]


def _residual_masses(bank: RowBank, rows: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``BankStats.residual_masses``: the bank's sums at scale 1, torch's own sums elsewhere."""
    host = bank.host
    assert host is not None and host.unit_residual is not None
    masses = host.unit_residual[rows]
    partial = np.nonzero(scale != 1.0)
    if len(partial[0]):
        assert bank.target.exp_log_probs is not None and bank.draft is not None and bank.draft.exp_log_probs is not None
        bank_rows = torch.from_numpy(rows[partial])
        target = torch.index_select(bank.target.exp_log_probs, 0, bank_rows)
        draft = torch.index_select(bank.draft.exp_log_probs, 0, bank_rows)
        masses[partial] = _residual_sums(target, draft, torch.from_numpy(scale[partial])).numpy()
    return masses


def _emit(
    bank: RowBank,
    rows: np.ndarray,
    words: list[list[np.ndarray]],
    tau: np.ndarray,
    num_valid: np.ndarray,
    safe_drafts: np.ndarray,
    residual_scale: np.ndarray,
    has_draft: bool,
) -> np.ndarray:
    """``reference._emit`` for one tile: int64 [R], the token emitted at row tau of each request."""
    host = bank.host
    assert host is not None
    num_requests = tau.shape[0]
    request = np.arange(num_requests)
    verify = words[PURPOSE_VERIFY]
    key_lo, key_hi = verify[2][request, tau], verify[3][request, tau]
    residual_case = tau < num_valid
    assert host.target_probs is not None
    probs = np.take(host.target_probs, rows[request, tau], axis=0)  # float32; the weights are float64
    draft_rows = np.minimum(tau, max(safe_drafts.shape[1] - 1, 0))
    if not has_draft:
        weights = probs.astype(np.float64)
        if safe_drafts.shape[1] > 0:
            rejected = safe_drafts[request, draft_rows]
            weights[request[residual_case], rejected[residual_case]] = 0.0
    else:
        assert host.draft_probs is not None
        draft_probs = np.take(host.draft_probs, rows[request, draft_rows], axis=0)
        weights = np.multiply(probs, residual_scale[:, None])
        np.subtract(weights, draft_probs, out=weights)
        np.maximum(weights, 0.0, out=weights)
        plain = ~residual_case
        if plain.any():
            weights[plain] = probs[plain]
        residual = words[PURPOSE_RESIDUAL]
        key_lo = np.where(residual_case, residual[2][request, tau], key_lo)
        key_hi = np.where(residual_case, residual[3][request, tau], key_hi)
    token, has_mass = pruned_race(weights, key_lo.astype(np.uint32), key_hi.astype(np.uint32))
    if has_mass.all():
        return token
    # A residual without mass falls back to the plain target, with the plain target's draws.
    plain_lo, plain_hi = verify[2][request, tau].astype(np.uint32), verify[3][request, tau].astype(np.uint32)
    fallback, fallback_mass = pruned_race(probs.astype(np.float64), plain_lo, plain_hi)
    return np.where(has_mass, token, np.where(fallback_mass, fallback, 0))


@lru_cache(maxsize=8)
def _golden_tokens(vocab: int) -> np.ndarray:
    return (np.arange(vocab, dtype=np.uint32) * _GOLDEN)[None, :]


@lru_cache(maxsize=1)
def race_bounds() -> np.ndarray:
    """int32 [65536]: for a hash's top 16 bits, an upper bound on ``-log2 E`` of every hash in that
    bucket plus the float32 bit trick's error, in units of 2**-23 (see ``pruned_race``)."""
    starts = np.arange(2**16, dtype=np.uint64) << np.uint64(_BUCKET_SHIFT)
    ends = starts + np.uint64(2**_BUCKET_SHIFT - 1)
    # The exponential rises with the hash (both of its formulas), so -log2 E falls: a bucket's largest
    # value is at its start (the end too, to be safe against rounding).
    at_start = -noise_from_hash(starts.astype(np.uint32)).double().numpy()
    at_end = -noise_from_hash(ends.astype(np.uint32)).double().numpy()
    bound = np.maximum(at_start, at_end) + _BIT_TRICK_ERROR + _MARGIN
    return np.ceil(bound * 2.0**23).astype(np.int32)


def pruned_race(weights: np.ndarray, key_lo: np.ndarray, key_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``two_level_sample`` over one tile (token v = column v): tokens int64 [R] and has_mass bool [R].

    weights: float64 [R, V] in [0, 1]; key_lo, key_hi: uint32 [R].

    A token's key log2 w - log2 E is at most ``upper``: float32(w)'s bits read as an integer are
    (log2 w + 127) * 2**23 less at most 0.0861 * 2**23 (the bit trick), and ``race_bounds`` adds the
    largest -log2 E of the hash's bucket. The token with the largest upper bound wins outright when its
    exact key beats every other upper bound (most rows); in the other rows every token whose upper
    bound reaches that key gets its exact key too.
    """
    num_requests, vocab = weights.shape
    request = np.arange(num_requests)
    hashed = race_hash(_golden_tokens(vocab), key_lo, key_hi)
    upper = weights.astype(np.float32).view(np.int32)
    upper += race_bounds()[hashed >> np.uint32(_BUCKET_SHIFT)]  # no overflow: w <= 1, bound < 34 * 2**23
    best = upper.argmax(axis=1)
    best_key = _keys(weights[request, best], hashed[request, best])
    best_upper = upper[request, best]
    upper[request, best] = _INT32_MIN
    runner_up = upper.max(axis=1).astype(np.float64) * 2.0**-23 - 127.0
    token, key = best, best_key
    open_rows = np.flatnonzero(~(best_key > runner_up))
    if len(open_rows):
        upper[open_rows, best[open_rows]] = best_upper[open_rows]
        reach = upper[open_rows].astype(np.float64) * 2.0**-23 - 127.0 >= best_key[open_rows, None]
        candidate_row, candidate_token = np.nonzero(reach)  # row by row, tokens ascending; the best is one
        keys = _keys(
            weights[open_rows[candidate_row], candidate_token], hashed[open_rows[candidate_row], candidate_token]
        )
        starts = np.searchsorted(candidate_row, np.arange(len(open_rows)))
        row_best = np.maximum.reduceat(keys, starts)
        first = np.minimum.reduceat(np.where(keys == row_best[candidate_row], np.arange(len(keys)), len(keys)), starts)
        token, key = best.copy(), best_key.copy()
        token[open_rows], key[open_rows] = candidate_token[first], row_best  # the first of the best keys
    has_mass = key > -math.inf  # a row with a positive weight has a finite key
    return np.where(has_mass, token, 0), has_mass


def _keys(weights: np.ndarray, hashed: np.ndarray) -> np.ndarray:
    """float64: the race's exact keys (``two_level_sample``'s) of these weights and hashes."""
    log_weight = torch.from_numpy(weights).log2().numpy()
    return np.where(weights > 0, log_weight, -math.inf) - noise_from_hash(hashed).double().numpy()


def _assemble(
    drafts: np.ndarray, num_accepted: np.ndarray, emitted: np.ndarray | None
) -> tuple[np.ndarray | None, np.ndarray]:
    """tokens int64 [R, K+1] (accepted drafts, the emitted token, then -1; None without ``emitted``) and
    num_tokens int32 [R]."""
    num_tokens = (num_accepted + 1).astype(np.int32)
    if emitted is None:
        return None, num_tokens
    num_requests, num_drafts = drafts.shape
    tokens = np.full((num_requests, num_drafts + 1), -1, dtype=np.int64)
    positions = np.arange(num_drafts + 1)[None, :]
    tokens[:, :num_drafts] = np.where(positions[:, :num_drafts] < num_accepted[:, None], drafts, -1)
    tokens[np.arange(num_requests), num_accepted] = emitted
    return tokens, num_tokens

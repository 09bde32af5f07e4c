"""The twin's building blocks: per-row softmax statistics, reusable buffers and the two-level sampler.

The sampler is the kernels' (``_sampling.py``): a tile by inverse CDF over the tile masses, then a
token in it by an exponential race whose noise is the kernels' keyed hash (the same bits; the
logarithms on a GPU are the special-function unit's, within an ulp or two of these).

Everything here is vectorised over requests and positions. Large temporaries live in per-thread
buffers reused across calls: allocating several MB afresh each call lets glibc give the memory
back to the OS and fault it in again, which measured 2-3x slower on the simulator's shapes.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import torch

from ._philox import philox4x32, uint32_to_uniform

__all__ = ["BankStats", "RowBank", "RowStats", "race_noise", "row_draws", "sanitized", "scratch", "two_level_sample"]

HUGE_LOGIT = 1.0e30  # what +inf logits become (as in the kernels)
_GOLDEN = np.uint32(0x9E3779B9)
_FMIX_A = np.uint32(0x85EBCA6B)
_FMIX_B = np.uint32(0xC2B2AE35)
_SHIFT13 = np.uint32(13)
_SHIFT16 = np.uint32(16)
_SERIES_BELOW = 0.015625  # the kernels' switch from -ln(1 - v)'s series to the logarithm
MAX_INV_TEMPERATURE = 1.0e6  # 1 / T is capped here, as in the kernels

_buffers = threading.local()


def scratch(
    name: str, shape: tuple[int, ...] | torch.Size, device: torch.device, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """A work buffer of this thread, reused across calls (contents undefined)."""
    by_name = getattr(_buffers, "by_name", None)
    if by_name is None:
        by_name = _buffers.by_name = {}
    numel = math.prod(shape)
    key = (name, device, dtype)
    buffer = by_name.get(key)
    if buffer is None or buffer.numel() < numel:
        buffer = by_name[key] = torch.empty(numel, dtype=dtype, device=device)
    return buffer[:numel].view(tuple(shape))


def sanitized(logits: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 logits (a buffer copy for bf16/fp16) with NaN -> -inf and +inf -> 1e30, and row maxima."""
    values = logits
    if logits.dtype != torch.float32:
        values = scratch(f"{name}_float32", logits.shape, logits.device).copy_(logits)
    row_max = values.amax(dim=-1)  # NaN and +inf propagate: only such rows need the slow path
    if bool((torch.isnan(row_max) | (row_max > HUGE_LOGIT)).any()):
        values = torch.nan_to_num(values, nan=-math.inf, neginf=-math.inf).clamp_(max=HUGE_LOGIT)
        row_max = values.amax(dim=-1)
    return values, row_max


def row_draws(seed: torch.Tensor, num_rows: int, num_purposes: int) -> list[list[torch.Tensor]]:
    """draws[purpose]: [uniform0, uniform1, key_lo, key_hi], each [R, num_rows], from Philox counter
    (0, row, purpose, 0): float32 uniforms (words 0, 1) and the race's key (words 2, 3, uint32 in int64)."""
    rows = torch.arange(num_rows, dtype=torch.int64, device=seed.device)[None, None, :]
    purposes = torch.arange(num_purposes, dtype=torch.int64, device=seed.device)[None, :, None]
    zero = torch.zeros((), dtype=torch.int64, device=seed.device)
    words = philox4x32(seed[:, None, None], zero, rows, purposes, zero)
    return [
        [uint32_to_uniform(words[0][:, p]), uint32_to_uniform(words[1][:, p]), words[2][:, p], words[3][:, p]]
        for p in range(num_purposes)
    ]


def _fmix32(x: np.ndarray, work: np.ndarray | None = None) -> np.ndarray:
    """MurmurHash3's finaliser on uint32 words, in place (``work``: a scratch array of x's shape)."""
    work = np.empty_like(x) if work is None else work
    x ^= np.right_shift(x, _SHIFT16, out=work)
    x *= _FMIX_A  # uint32 products wrap modulo 2**32, as the kernels' do
    x ^= np.right_shift(x, _SHIFT13, out=work)
    x *= _FMIX_B
    x ^= np.right_shift(x, _SHIFT16, out=work)
    return x


def race_noise(token_ids: torch.Tensor, key_lo: torch.Tensor, key_hi: torch.Tensor) -> torch.Tensor:
    """float32 [R, N]: log2 E, E ~ Exp(1) per token, as the kernels' ``race_noise`` computes it.

    token_ids: int64 [R, N]; key_lo, key_hi: int64 [R] holding uint32. The hash runs in numpy uint32
    (a quarter of int64 torch's time on the CPU); the float steps stay in torch, whose logarithm
    the twin's tokens are pinned to.
    """
    tokens = token_ids.detach().to("cpu").numpy().astype(np.uint32)
    lo = key_lo.detach().to("cpu").numpy().astype(np.uint32)
    hi = key_hi.detach().to("cpu").numpy().astype(np.uint32)
    return noise_from_hash(race_hash(tokens * _GOLDEN, lo, hi)).to(token_ids.device)


def race_hash(golden_tokens: np.ndarray, key_lo: np.ndarray, key_hi: np.ndarray) -> np.ndarray:
    """uint32 [R, N]: the race's per-token hash; golden_tokens uint32 [R or 1, N] is token * 0x9E3779B9,
    key_lo and key_hi uint32 [R]."""
    x = golden_tokens + key_lo[:, None]
    work = np.empty_like(x)
    _fmix32(x, work)
    x ^= key_hi[:, None]
    return _fmix32(x, work)


def noise_from_hash(hashed: np.ndarray) -> torch.Tensor:
    """float32 torch tensor of ``hashed``'s shape: log2 of the exponential a uint32 hash stands for.

    Element-wise only, so any subset of hashes gives the same bits as the whole: the logarithms are
    torch's (its CPU logarithms take the same vector path whatever an element's position), the
    float32 arithmetic around them numpy's (correctly rounded, as torch's is, at a fraction of the
    per-call cost on small arrays)."""
    v = np.minimum(
        (hashed.astype(np.float32) + np.float32(0.5)) * np.float32(2.3283064365386963e-10), np.float32(0.99999994)
    )
    series = v * (np.float32(1.0) + v * (np.float32(0.5) + v * np.float32(0.33333334)))
    log_branch = -torch.log2(torch.from_numpy(np.float32(1.0) - v)).numpy() * np.float32(math.log(2.0))
    return torch.log2(torch.from_numpy(np.where(v < np.float32(_SERIES_BELOW), series, log_branch)))


class RowStats:
    """log softmax(l / T) of every row, computed once.

    logits: float32 [R, N, V] (sanitised); log_probs: float32 [R, N, V] in a reused buffer, NaN
    where a row has no finite logit; None when every request is greedy.
    """

    def __init__(
        self,
        logits: torch.Tensor,
        row_max: torch.Tensor,
        temperature: torch.Tensor,
        greedy: torch.Tensor,
        name: str | None,
    ) -> None:
        """``name`` prefixes the reused buffers; None allocates the results afresh (to keep them)."""
        self.logits = logits
        self.greedy = greedy
        self.log_probs: torch.Tensor | None = None
        if bool(greedy.all()):
            return
        inverse = (1.0 / temperature).clamp(max=MAX_INV_TEMPERATURE)
        inv_temp = torch.where(greedy, 1.0, inverse)[:, None, None]
        scaled = scratch(f"{name}_scaled", logits.shape, logits.device) if name else torch.empty_like(logits)
        if bool((row_max[..., None].abs() * inv_temp > 1e30).any()):  # l / T would overflow: shift first
            torch.sub(logits, torch.where(row_max == -math.inf, 0.0, row_max)[..., None], out=scaled).mul_(inv_temp)
        else:
            torch.mul(logits, inv_temp, out=scaled)
        log_probs = scratch(f"{name}_log_probs", logits.shape, logits.device) if name else torch.empty_like(logits)
        self.log_probs = torch.log_softmax(scaled, dim=-1, out=log_probs)

    def log_prob_at(self, tokens: torch.Tensor) -> torch.Tensor:
        """float64 [R, K]: log probability of tokens[r, k] under row k (0 if every request is greedy)."""
        if self.log_probs is None:
            return torch.zeros(tokens.shape, dtype=torch.float64, device=tokens.device)
        return self.log_probs[:, : tokens.shape[1]].gather(-1, tokens[..., None])[..., 0].double()

    def row_probs(self, rows: torch.Tensor, name: str) -> torch.Tensor:
        """float32 [R, V] (a reused buffer): softmax of row rows[r] of each request, 0 where NaN."""
        assert self.log_probs is not None
        num_requests, num_rows, vocab = self.log_probs.shape
        flat_rows = torch.arange(num_requests, device=rows.device) * num_rows + rows
        out = scratch(name, (num_requests, vocab), rows.device)
        torch.index_select(self.log_probs.view(-1, vocab), 0, flat_rows, out=out)
        return torch.nan_to_num_(out.exp_(), nan=0.0)

    def residual_masses(self, draft: RowStats, scale: torch.Tensor) -> torch.Tensor:
        """float64 [R, K]: sum_v max(scale * P_k(v) - Q_k(v), 0) for every draft row k (float32 terms)."""
        assert self.log_probs is not None and draft.log_probs is not None
        shape = draft.log_probs.shape
        residual = scratch("target_scaled", shape, scale.device)  # free once the log-softmax is done
        torch.exp(self.log_probs[:, : shape[1]], out=residual)
        return _residual_sums(
            residual, torch.exp(draft.log_probs, out=scratch("draft_scaled", shape, scale.device)), scale
        )

    def argmax_rows(self) -> torch.Tensor:
        """int64 [R, N]: first index of the row maximum, for greedy requests (0 elsewhere)."""
        result = torch.zeros(self.logits.shape[:2], dtype=torch.int64, device=self.logits.device)
        if bool(self.greedy.any()):
            chosen = self.greedy.nonzero()[:, 0]
            result[chosen] = self.logits[chosen].argmax(dim=-1)
        return result


def _residual_sums(target_probs: torch.Tensor, draft_probs: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """float64 [...]: sum_v max(scale * P(v) - Q(v), 0), NaN sums as 0. ``target_probs`` is overwritten."""
    target_probs.mul_(scale.float()[..., None]).sub_(draft_probs)
    return torch.nan_to_num(target_probs.clamp_(min=0.0).sum(dim=-1).double(), nan=0.0)


class RowBank:
    """What the twin needs of a fixed bank of logit rows, computed once per row instead of every step.

    The simulator's logits are rows of a calibrated bank, drawn again and again. Per row this keeps
    the twin's own log-softmax at the row's temperature, its exponential, its argmax and, with an
    aligned draft bank (draft row i pairs with target row i), the residual mass at scale 1 -- the
    same operations on the same float32 values as ``RowStats`` per step, so the same bits wherever
    the CPU's vector loops split a row the same way (every V a multiple of 32; the simulator's
    vocabularies are). ``stats(rows)`` then serves a step by gathers.

    target_logits: float32 [N, V]; draft_logits: float32 [N, V] or None; temperature: float32 [N],
    the temperature every request drawing that row has (0 = greedy).
    """

    def __init__(
        self, target_logits: torch.Tensor, draft_logits: torch.Tensor | None, temperature: torch.Tensor
    ) -> None:
        self.greedy = temperature == 0
        self.target = _BankSide(target_logits, temperature, self.greedy)
        self.draft = _BankSide(draft_logits, temperature, self.greedy) if draft_logits is not None else None
        self.unit_residual: torch.Tensor | None = None
        if self.draft is not None and self.target.exp_log_probs is not None and self.draft.exp_log_probs is not None:
            ones = torch.ones(target_logits.shape[0], device=target_logits.device)
            self.unit_residual = _residual_sums(self.target.exp_log_probs.clone(), self.draft.exp_log_probs, ones)
        self.host = _HostBank(self) if target_logits.device.type == "cpu" else None

    def stats(self, rows: torch.Tensor, greedy: torch.Tensor) -> tuple[BankStats, BankStats | None]:
        """Target and draft statistics of a step whose request r reads bank row rows[r, k] at position k
        (rows int64 [R, K+1]; the draft side uses its first K columns)."""
        target = BankStats(self, self.target, rows, greedy)
        draft = BankStats(self, self.draft, rows[:, :-1], greedy) if self.draft is not None else None
        return target, draft


class _HostBank:
    """A CPU bank's statistics as numpy arrays (views where they need no change) for the fast path:
    log-probabilities (None when every row is greedy), probabilities with NaN as 0, argmax, residual
    masses at scale 1."""

    def __init__(self, bank: RowBank) -> None:
        self.vocab = bank.target.vocab
        self.argmax = bank.target.argmax.numpy()
        self.target_log_probs = _host(bank.target.log_probs)
        self.target_probs = _host(bank.target.exp_log_probs, nan_to_zero=True)
        draft = bank.draft
        self.draft_log_probs = _host(draft.log_probs) if draft is not None else None
        self.draft_probs = _host(draft.exp_log_probs, nan_to_zero=True) if draft is not None else None
        self.unit_residual = _host(bank.unit_residual)


def _host(values: torch.Tensor | None, nan_to_zero: bool = False) -> np.ndarray | None:
    if values is None:
        return None
    array = values.numpy()
    return np.nan_to_num(array, nan=0.0) if nan_to_zero and np.isnan(array).any() else array


class _BankSide:
    """One bank's per-row statistics (see ``RowBank``)."""

    def __init__(self, logits: torch.Tensor, temperature: torch.Tensor, greedy: torch.Tensor) -> None:
        self.vocab = logits.shape[-1]
        values, row_max = sanitized(logits, "bank")
        stats = RowStats(values[:, None], row_max[:, None], temperature, greedy, None)
        self.argmax = values.argmax(dim=-1)
        self.log_probs = stats.log_probs[:, 0] if stats.log_probs is not None else None
        self.exp_log_probs = torch.exp(self.log_probs) if self.log_probs is not None else None


class BankStats:
    """``RowStats``'s interface for one step's rows of a ``RowBank``: gathers, not a log-softmax."""

    def __init__(self, bank: RowBank, side: _BankSide | None, rows: torch.Tensor, greedy: torch.Tensor) -> None:
        assert side is not None
        self.bank, self.side, self.rows, self.greedy = bank, side, rows, greedy
        self.log_probs = side.log_probs  # None when every bank row is greedy

    def log_prob_at(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.side.log_probs is None:
            return torch.zeros(tokens.shape, dtype=torch.float64, device=tokens.device)
        flat = self.rows[:, : tokens.shape[1]] * self.side.vocab + tokens
        return self.side.log_probs.view(-1).take(flat).double()

    def row_probs(self, rows: torch.Tensor, name: str) -> torch.Tensor:
        assert self.side.exp_log_probs is not None
        bank_rows = self.rows.gather(1, rows[:, None])[:, 0]
        out = scratch(name, (rows.shape[0], self.side.vocab), rows.device)
        torch.index_select(self.side.exp_log_probs, 0, bank_rows, out=out)
        return torch.nan_to_num_(out, nan=0.0)

    def residual_masses(self, draft: BankStats, scale: torch.Tensor) -> torch.Tensor:
        """As ``RowStats.residual_masses``; rows at scale 1 (the first always) read the bank's sums."""
        unit = self.bank.unit_residual
        assert unit is not None and self.side.exp_log_probs is not None and draft.side.exp_log_probs is not None
        rows = self.rows[:, : scale.shape[1]]
        masses = unit[rows]
        partial = (scale != 1.0).nonzero()
        if len(partial):
            bank_rows = rows[partial[:, 0], partial[:, 1]]
            target = torch.index_select(self.side.exp_log_probs, 0, bank_rows)
            draft_probs = torch.index_select(draft.side.exp_log_probs, 0, bank_rows)
            masses[partial[:, 0], partial[:, 1]] = _residual_sums(
                target, draft_probs, scale[partial[:, 0], partial[:, 1]]
            )
        return masses

    def argmax_rows(self) -> torch.Tensor:
        return self.side.argmax[self.rows]


def two_level_sample(
    weights: torch.Tensor, tile_uniform: torch.Tensor, key_lo: torch.Tensor, key_hi: torch.Tensor, tile_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Index v with probability weights[r, v] / sum: a tile by its mass, then a token inside it by
    the kernels' exponential race.

    weights: float64 [R, V] >= 0 (not modified). tile_uniform: float32 [R] in [0, 1); key_lo,
    key_hi: int64 [R] (uint32), the race's key. Returns tokens int64 [R] and has_mass bool [R]
    (False where all weights are 0; token then 0).
    """
    num_requests, vocab = weights.shape
    num_tiles = -(-vocab // tile_size)
    if num_tiles == 1:
        chosen_tile = torch.where(weights.sum(dim=-1) > 0, 0, -1)
        chosen = weights
    else:
        padded = scratch("padded_weights", (num_requests, num_tiles * tile_size), weights.device, torch.float64)
        padded[:, :vocab] = weights
        padded[:, vocab:] = 0.0
        tiles = padded.view(num_requests * num_tiles, tile_size)
        chosen_tile = _inverse_cdf(tiles.sum(dim=-1).view(num_requests, num_tiles), tile_uniform)
        flat = torch.arange(num_requests, device=weights.device) * num_tiles + chosen_tile.clamp(min=0)
        chosen = scratch("chosen_tile", (num_requests, tile_size), weights.device, torch.float64)
        torch.index_select(tiles, 0, flat, out=chosen)
    positions = torch.arange(chosen.shape[1], device=weights.device)[None, :]
    token_ids = chosen_tile.clamp(min=0)[:, None] * tile_size + positions
    keys = torch.where(chosen > 0, torch.log2(chosen), -math.inf) - race_noise(token_ids, key_lo, key_hi).double()
    has_mass = chosen_tile >= 0
    return torch.where(has_mass, token_ids.gather(1, keys.argmax(dim=1, keepdim=True))[:, 0], 0), has_mass


def _inverse_cdf(weights: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """int64 [R]: the number of prefix sums <= u * total, at most the last positive index; -1 if no mass.

    weights: float64 [R, N] >= 0; uniform: float32 [R]. The kernels' rule, with binary searches
    on the (non-decreasing) prefix sums instead of comparisons against every element.
    """
    cumulative = torch.cumsum(weights, dim=1, out=scratch("cumulative", weights.shape, weights.device, torch.float64))
    total = cumulative[:, -1:].contiguous()
    count = torch.searchsorted(cumulative, uniform.double()[:, None] * total, right=True)[:, 0]
    last_positive = torch.searchsorted(cumulative, total, right=False)[:, 0]  # first prefix reaching the total
    return torch.where(total[:, 0] > 0, torch.minimum(count, last_positive), -1)

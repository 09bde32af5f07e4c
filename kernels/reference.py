"""``rejection_sample`` in plain PyTorch: the twin of the Triton kernels and the simulator's CPU backend.

Same contract, same semantics and the same random streams as ``spectune.kernels.rejection_sample``
(see ``_contract.py``), vectorised over requests and positions. Greedy and synthetic acceptance
therefore match the kernels exactly; sampled tokens use the same two-level inverse-CDF scheme and
the same uniforms, so they match too except where float rounding puts a uniform on the other side
of a boundary. Probabilities at the decision points (ratios, prefix ratios, residual masses,
cumulative sums) are float64; the per-row softmax normalisers are float32 sums of exponentials.

Sampling scheme (the kernels' too): the vocabulary is cut into tiles of ``DEFAULT_TILE`` tokens; a
tile is chosen by inverse CDF over the tile masses with one uniform, then a token inside it by
inverse CDF with another. Zero-weight tokens and tiles are never chosen.
"""

from __future__ import annotations

import math

import torch

from ._contract import DEFAULT_TILE, PURPOSE_RESIDUAL, PURPOSE_VERIFY, VerifyInputs, validate_inputs
from ._philox import philox4x32, uint32_to_uniform

__all__ = ["rejection_sample", "rejection_sample_from_inputs"]

_FLOAT32_MAX = torch.finfo(torch.float32).max
_LOG_RATIO_CLAMP = 1.0e4  # |log a| beyond this saturates the prefix ratio anyway; avoids inf - inf


def rejection_sample(
    target_logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    draft_logits: torch.Tensor | None = None,
    *,
    temperature: torch.Tensor | None = None,
    seed: torch.Tensor | None = None,
    method: str = "standard",
    synthetic_conditional_rates: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify draft tokens against the target model (PyTorch twin of the Triton kernels).

    Args:
        target_logits: float32|bfloat16|float16 [R, K+1, V], raw logits; row K is the bonus row.
        draft_tokens: int32|int64 [R, K]; -1 (or any id outside [0, V)) is a placeholder.
        draft_logits: float32|bfloat16|float16 [R, K, V] raw draft logits, or None for one-hot drafts.
        temperature: float32 [R]; 0 = greedy for that request. Applied to target and draft logits.
        seed: int64 [R]; the request's random stream.
        method: "standard" | "block" | "synthetic".
        synthetic_conditional_rates: float32 [K], P(accept draft i | drafts < i accepted); required
            iff method == "synthetic".

    Returns:
        tokens: int64 [R, K+1], accepted drafts then one emitted token, -1 after it.
        num_tokens: int32 [R], accepted drafts + 1 (the emitted token included).
    """
    inputs = validate_inputs(
        target_logits, draft_tokens, draft_logits, temperature, seed, method, synthetic_conditional_rates
    )
    return rejection_sample_from_inputs(inputs, tile_size=DEFAULT_TILE)


def rejection_sample_from_inputs(inputs: VerifyInputs, *, tile_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The twin on already validated inputs; ``tile_size`` must equal the kernels' to match them."""
    num_requests, num_rows, vocab = inputs.target_logits.shape
    num_drafts = num_rows - 1
    device = inputs.target_logits.device
    if num_requests == 0:
        return (
            torch.empty((0, num_rows), dtype=torch.int64, device=device),
            torch.empty((0,), dtype=torch.int32, device=device),
        )
    target = _sanitized(inputs.target_logits)
    drafts = inputs.draft_tokens
    valid = (drafts >= 0) & (drafts < vocab)
    safe_drafts = drafts.clamp(0, vocab - 1)
    num_valid = valid.to(torch.int64).cumprod(dim=1).sum(dim=1)
    greedy = inputs.temperature == 0
    verify_words = _row_words(inputs.seed, num_rows, PURPOSE_VERIFY)
    accept_uniform = verify_words[0]

    target_stats = _RowStats(target, inputs.temperature, greedy)
    draft_stats = None
    if inputs.draft_logits is not None:
        draft_stats = _RowStats(_sanitized(inputs.draft_logits), inputs.temperature, greedy)

    # log p(x) - log q(x) of each draft under its row (q = 1 for one-hot drafts), float64.
    log_ratio = target_stats.log_prob_at(safe_drafts)
    if draft_stats is not None:
        log_ratio = log_ratio - draft_stats.log_prob_at(safe_drafts)
    log_ratio = torch.nan_to_num(log_ratio, nan=-_LOG_RATIO_CLAMP).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)

    argmax = target_stats.argmax_rows()
    if inputs.method == "synthetic":
        assert inputs.synthetic_conditional_rates is not None
        accepted = valid & (accept_uniform[:, :num_drafts] < inputs.synthetic_conditional_rates)
    else:
        accepted = valid & (accept_uniform[:, :num_drafts].double() < log_ratio.exp())
    if inputs.method != "synthetic":  # synthetic ignores the logits, greedy requests included
        accepted = torch.where(greedy[:, None], valid & (drafts == argmax[:, :-1]), accepted)
    num_accepted = accepted.to(torch.int64).cumprod(dim=1).sum(dim=1)
    residual_scale = torch.ones((num_requests,), dtype=torch.float64, device=device)

    if inputs.method == "block":
        block_tau, prefix_at_tau = _block_decision(
            log_ratio, num_valid, accept_uniform, target, target_stats, draft_stats, safe_drafts
        )
        num_accepted = torch.where(greedy, num_accepted, block_tau)
        residual_scale = torch.where(greedy, residual_scale, prefix_at_tau)

    emitted = _emit(
        inputs, target, target_stats, draft_stats, num_accepted, num_valid, safe_drafts, residual_scale, tile_size
    )
    emitted = torch.where(greedy, argmax.gather(1, num_accepted[:, None])[:, 0], emitted)
    return _assemble(drafts, num_accepted, emitted)


def _sanitized(logits: torch.Tensor) -> torch.Tensor:
    """float32 view (copy only for bf16/fp16) with NaN -> -inf and +inf -> float32 max."""
    values = logits.float()
    row_max = values.amax(dim=-1)
    if bool((torch.isnan(row_max) | (row_max == math.inf)).any()):
        values = torch.nan_to_num(values, nan=-math.inf, posinf=_FLOAT32_MAX, neginf=-math.inf)
    return values


class _RowStats:
    """Per-row log-softmax at the request's temperature.

    logits: float32 [R, N, V] (sanitised). log_probs: float32 [R, N, V], log softmax(l / T), or
    None when every request is greedy. NaN where a row has no finite logit.
    """

    def __init__(self, logits: torch.Tensor, temperature: torch.Tensor, greedy: torch.Tensor) -> None:
        self.logits = logits
        self.greedy = greedy
        self.log_probs: torch.Tensor | None = None
        if bool(greedy.all()):
            return
        inv_temp = torch.where(greedy, 1.0, 1.0 / temperature)[:, None, None]
        row_max = logits.amax(dim=-1, keepdim=True)
        if bool((row_max.abs() * inv_temp > 1e30).any()):  # l / T would overflow: shift first
            scaled = (logits - torch.where(row_max == -math.inf, 0.0, row_max)).mul_(inv_temp)
        else:
            scaled = logits * inv_temp
        self.log_probs = torch.log_softmax(scaled, dim=-1)

    def log_prob_at(self, tokens: torch.Tensor) -> torch.Tensor:
        """float64 [R, K]: log probability of tokens[r, k] under row k (rows 0..K-1)."""
        assert self.log_probs is not None
        num = tokens.shape[1]
        return self.log_probs[:, :num].gather(-1, tokens[..., None])[..., 0].double()

    def row_probs(self, rows: torch.Tensor) -> torch.Tensor:
        """float64 [R, V]: softmax(l / T) of row rows[r] of each request (0 where the row has no mass)."""
        assert self.log_probs is not None
        index = torch.arange(rows.shape[0], device=rows.device)
        return torch.nan_to_num(self.log_probs[index, rows].double().exp_(), nan=0.0)

    def argmax_rows(self) -> torch.Tensor:
        """int64 [R, N]: first index of the row maximum, for greedy requests (0 elsewhere)."""
        result = torch.zeros(self.logits.shape[:2], dtype=torch.int64, device=self.logits.device)
        if bool(self.greedy.any()):
            chosen = self.greedy.nonzero()[:, 0]
            result[chosen] = self.logits[chosen].argmax(dim=-1)
        return result


def _row_words(seed: torch.Tensor, num_rows: int, purpose: int) -> tuple[torch.Tensor, ...]:
    """Four float32 [R, num_rows] uniforms from counter (0, row, purpose, 0) of each request's seed."""
    rows = torch.arange(num_rows, dtype=torch.int64, device=seed.device)[None, :]
    zero = torch.zeros((), dtype=torch.int64, device=seed.device)
    words = philox4x32(seed[:, None], zero, rows, zero + purpose, zero)
    return tuple(uint32_to_uniform(w) for w in words)


def _block_decision(
    log_ratio: torch.Tensor,
    num_valid: torch.Tensor,
    accept_uniform: torch.Tensor,
    target: torch.Tensor,
    target_stats: _RowStats,
    draft_stats: _RowStats | None,
    safe_drafts: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Block verification (Sun et al. 2024): tau = max{i in 1..n : eta_i < h_i}, else 0.

    Prefix ratios p_0 = 1, p_i = min(p_{i-1} * a_i, 1) with a_i = p(x_i) / q(x_i) at row i-1;
    h_i = Z_i / (Z_i + 1 - p_i) with Z_i = sum_v max(p_i * P_i(v) - Q_i(v), 0) for i < n (1 if the
    denominator is <= 0), and h_n = p_n. eta_i is row i's acceptance uniform.
    Returns tau int64 [R] and p_tau float64 [R] (the residual's scale at tau).
    """
    num_requests, num_drafts = log_ratio.shape
    rows = torch.arange(num_drafts + 1, device=log_ratio.device)
    in_block = rows[None, :num_drafts] < num_valid[:, None]
    step_log = torch.zeros((num_requests, num_drafts + 1), dtype=torch.float64, device=log_ratio.device)
    step_log[:, :num_drafts] = torch.where(in_block, log_ratio, 0.0)
    exclusive = step_log.cumsum(dim=1) - step_log  # sum of log a over rows < k
    log_prefix = exclusive - exclusive.cummax(dim=1).values  # log p_k for k = 0..K (p_0 = 1)
    prefix = log_prefix.exp()
    if draft_stats is None:
        prob_at_draft = target_stats.log_prob_at(safe_drafts).exp()
        residual_mass = prefix[:, :num_drafts] * (1.0 - prob_at_draft)
    else:
        residual_mass = _draft_residual_masses(target_stats, draft_stats, prefix[:, :num_drafts])
    residual_mass = torch.cat([residual_mass, torch.zeros_like(residual_mass[:, :1])], dim=1)
    denominator = residual_mass + 1.0 - prefix
    threshold = torch.where(denominator > 0, residual_mass / denominator.clamp_min(1e-300), 1.0)
    at_end = rows[None, :] == num_valid[:, None]
    threshold = torch.where(at_end, prefix, threshold)
    passes = (rows[None, :] >= 1) & (rows[None, :] <= num_valid[:, None])
    passes &= accept_uniform.double() < threshold
    tau = torch.where(passes, rows[None, :], 0).amax(dim=1)
    return tau, prefix.gather(1, tau[:, None])[:, 0]


def _draft_residual_masses(target_stats: _RowStats, draft_stats: _RowStats, scale: torch.Tensor) -> torch.Tensor:
    """float64 [R, K]: sum_v max(scale * P_k(v) - Q_k(v), 0) for every draft row k (float32 terms)."""
    assert target_stats.log_probs is not None and draft_stats.log_probs is not None
    num_drafts = scale.shape[1]
    residual = target_stats.log_probs[:, :num_drafts].exp().mul_(scale.float()[..., None])
    residual.sub_(draft_stats.log_probs.exp()).clamp_(min=0.0)
    return torch.nan_to_num(residual.sum(dim=-1).double(), nan=0.0)


def _emit(
    inputs: VerifyInputs,
    target: torch.Tensor,
    target_stats: _RowStats,
    draft_stats: _RowStats | None,
    tau: torch.Tensor,
    num_valid: torch.Tensor,
    safe_drafts: torch.Tensor,
    residual_scale: torch.Tensor,
    tile_size: int,
) -> torch.Tensor:
    """int64 [R]: the token emitted at row tau of each sampled request.

    tau < n (a real rejection): the residual, max(s * p - q, 0) with draft logits (s = the block
    prefix ratio, 1 for standard), p without the draft token for one-hot drafts. tau = n (all
    accepted, or a placeholder at tau): the plain target. A residual without mass falls back to
    the plain target; a row without mass (all -inf) emits token 0.
    """
    num_requests, num_rows, vocab = target.shape
    index = torch.arange(num_requests, device=target.device)
    verify = _row_words(inputs.seed, num_rows, PURPOSE_VERIFY)
    tile_uniform = verify[1][index, tau]
    inner_uniform = verify[2][index, tau]
    residual_case = tau < num_valid
    probs = target_stats.row_probs(tau)
    draft_rows = tau.clamp(max=max(num_rows - 2, 0))
    rejected = safe_drafts.gather(1, draft_rows[:, None])[:, 0] if num_rows > 1 else tau * 0
    if draft_stats is None:
        weights = probs.clone()
        weights[index, rejected] = torch.where(residual_case, 0.0, weights[index, rejected])
    else:
        draft_probs = draft_stats.row_probs(draft_rows)
        weights = torch.where(
            residual_case[:, None], (residual_scale[:, None] * probs - draft_probs).clamp_min(0.0), probs
        )
        words = _row_words(inputs.seed, num_rows, PURPOSE_RESIDUAL)
        tile_uniform = torch.where(residual_case, words[0][index, tau], tile_uniform)
        inner_uniform = torch.where(residual_case, words[1][index, tau], inner_uniform)
    token, has_mass = _two_level_sample(weights, tile_uniform, inner_uniform, tile_size)
    if bool(has_mass.all()):
        return token
    # A residual without mass falls back to the plain target, with the plain target's uniforms.
    fallback, fallback_mass = _two_level_sample(probs, verify[1][index, tau], verify[2][index, tau], tile_size)
    return torch.where(has_mass, token, torch.where(fallback_mass, fallback, 0))


def _two_level_sample(
    weights: torch.Tensor, tile_uniform: torch.Tensor, inner_uniform: torch.Tensor, tile_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample index v with probability weights[r, v] / sum: a tile by mass, then a token in it.

    weights: float64 [R, V] >= 0. tile_uniform, inner_uniform: float32 [R] in [0, 1).
    Returns tokens int64 [R] and has_mass bool [R] (False where all weights are 0; token then 0).
    """
    num_requests, vocab = weights.shape
    num_tiles = -(-vocab // tile_size)
    if num_tiles == 1:
        tile_size = vocab  # one (partial) tile: no padding needed
    padded = torch.nn.functional.pad(weights, (0, num_tiles * tile_size - vocab))
    tiles = padded.view(num_requests, num_tiles, tile_size)
    tile_mass = tiles.sum(dim=-1)
    chosen_tile = _inverse_cdf(tile_mass, tile_uniform)
    index = torch.arange(num_requests, device=weights.device)
    inner = _inverse_cdf(tiles[index, chosen_tile.clamp_min(0)], inner_uniform)
    has_mass = (chosen_tile >= 0) & (inner >= 0)
    token = torch.where(has_mass, chosen_tile * tile_size + inner, 0)
    return token, has_mass


def _inverse_cdf(weights: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """int64 [R]: count of prefix sums <= u * total, clamped to the last positive weight (-1 if none)."""
    cumulative = weights.cumsum(dim=-1)
    threshold = uniform.double() * cumulative[:, -1]
    count = (cumulative <= threshold[:, None]).sum(dim=-1)
    positions = torch.arange(weights.shape[1], device=weights.device)
    last_positive = torch.where(weights > 0, positions, -1).amax(dim=-1)
    return torch.minimum(count, last_positive)


def _assemble(drafts: torch.Tensor, num_accepted: torch.Tensor, emitted: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """tokens int64 [R, K+1] (accepted drafts, the emitted token, then -1) and num_tokens int32 [R]."""
    num_requests, num_drafts = drafts.shape
    positions = torch.arange(num_drafts + 1, device=drafts.device)[None, :]
    padded = torch.cat([drafts, drafts.new_full((num_requests, 1), -1)], dim=1)
    tokens = torch.where(positions < num_accepted[:, None], padded, -1)
    tokens = torch.where(positions == num_accepted[:, None], emitted[:, None], tokens)
    return tokens, (num_accepted + 1).to(torch.int32)

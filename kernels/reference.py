"""``rejection_sample`` in plain PyTorch: the twin of the Triton kernels and the simulator's CPU backend.

Same contract, semantics and random streams as ``spectune.kernels.rejection_sample`` (see
``_contract.py``), vectorised over requests and positions (no Python loop over rows). Greedy and
synthetic acceptance therefore match the kernels exactly; sampled tokens use the same two-level
scheme (a tile by inverse CDF, a token in it by the same exponential race) with the same uniforms
and noise, so they match too, except where float rounding puts a uniform on the other side of a
boundary or two race keys within rounding of each other. Ratios, prefix ratios, thresholds and
cumulative sums are float64; per-row log-softmax is float32.

Sampling scheme (the kernels' too): the vocabulary is cut into tiles of ``tile_size`` tokens; a
tile is chosen by inverse CDF over the tile masses with one uniform, then a token inside it by an
exponential race keyed by the row's Philox words. Zero-weight tokens and tiles are never chosen.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from ._arguments import StepTables
from ._contract import DEFAULT_TILE, PURPOSE_RESIDUAL, PURPOSE_VERIFY, VerifyInputs, validate_inputs
from ._philox import philox4x32_numpy
from ._reference_banked import verify_banked
from ._reference_rows import BankStats, RowBank, RowStats, row_draws, sanitized, scratch, two_level_sample

__all__ = [
    "host_step",
    "RowBank",
    "count_emitted_banked",
    "rejection_sample",
    "rejection_sample_banked",
    "rejection_sample_from_inputs",
]

Stats = RowStats | BankStats

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
    """The twin on validated inputs; ``tile_size`` must equal the kernels' for token-level agreement."""
    num_requests, num_rows, vocab = inputs.target_logits.shape
    if num_requests == 0:
        return _empty(num_rows, inputs.target_logits.device)
    greedy = inputs.temperature == 0
    target, target_max = sanitized(inputs.target_logits, "target")
    target_stats = RowStats(target, target_max, inputs.temperature, greedy, "target")
    draft_stats = None
    if inputs.draft_logits is not None:
        draft, draft_max = sanitized(inputs.draft_logits, "draft")
        draft_stats = RowStats(draft, draft_max, inputs.temperature, greedy, "draft")
    return _verify(inputs, vocab, target_stats, draft_stats, tile_size)


def rejection_sample_banked(
    bank: RowBank,
    rows: torch.Tensor,
    draft_tokens: torch.Tensor,
    *,
    temperature: torch.Tensor,
    seed: torch.Tensor,
    method: str,
    synthetic_conditional_rates: torch.Tensor | None = None,
    tile_size: int = DEFAULT_TILE,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``rejection_sample`` where request r's logit row k is row ``rows[r, k]`` of ``bank`` (int64
    [R, K+1]): the same tokens as passing those rows (and the bank's draft rows ``rows[:, :K]``) as
    logits, without a log-softmax per step. ``temperature[r]`` must be the temperature the bank
    computed those rows at. Arguments are not validated (the simulator builds them)."""
    num_requests, num_rows = rows.shape
    if num_requests == 0:
        return _empty(num_rows, rows.device)
    if rows.device.type == "cpu" and bank.target.vocab <= tile_size:
        tokens, num_tokens = verify_banked(
            bank,
            rows.numpy(),
            draft_tokens.numpy(),
            temperature.numpy(),
            seed.numpy(),
            method,
            synthetic_conditional_rates.numpy() if synthetic_conditional_rates is not None else None,
        )
        assert tokens is not None
        return torch.from_numpy(tokens), torch.from_numpy(num_tokens)
    greedy = temperature == 0
    target_stats, draft_stats = bank.stats(rows, greedy)
    inputs = _StepInputs(draft_tokens, temperature, seed, method, synthetic_conditional_rates, draft_stats is not None)
    return _verify(inputs, bank.target.vocab, target_stats, draft_stats, tile_size)


def count_emitted_banked(
    bank: RowBank,
    rows: np.ndarray,
    draft_tokens: np.ndarray,
    *,
    temperature: np.ndarray,
    seed: np.ndarray,
    method: str,
    synthetic_conditional_rates: np.ndarray | None = None,
) -> np.ndarray:
    """``rejection_sample_banked``'s num_tokens (int32 [R], the same numbers) on host arrays of a CPU
    bank, without sampling the emitted tokens: how many tokens a request emits never depends on which
    one it samples, and a simulator needs only the count. Arguments as ``rejection_sample_banked``'s,
    as numpy arrays (rows and draft_tokens int64, temperature and rates float32, seed int64)."""
    if rows.shape[0] == 0:
        return np.zeros(0, dtype=np.int32)
    _, num_tokens = verify_banked(
        bank, rows, draft_tokens, temperature, seed, method, synthetic_conditional_rates, emit=False
    )
    return num_tokens


class _StepInputs(NamedTuple):
    """The fields of ``VerifyInputs`` that ``_verify`` reads besides the logits."""

    draft_tokens: torch.Tensor
    temperature: torch.Tensor
    seed: torch.Tensor
    method: str
    synthetic_conditional_rates: torch.Tensor | None
    has_draft_logits: bool


def _empty(num_rows: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    return (
        torch.empty((0, num_rows), dtype=torch.int64, device=device),
        torch.empty((0,), dtype=torch.int32, device=device),
    )


def _verify(
    inputs: VerifyInputs | _StepInputs, vocab: int, target_stats: Stats, draft_stats: Stats | None, tile_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    drafts = inputs.draft_tokens
    num_requests, num_drafts = drafts.shape
    num_rows = num_drafts + 1
    device = drafts.device
    valid = (drafts >= 0) & (drafts < vocab)
    safe_drafts = drafts.clamp(0, vocab - 1)
    num_valid = valid.to(torch.int64).cumprod(dim=1).sum(dim=1)
    greedy = inputs.temperature == 0
    uniforms = row_draws(inputs.seed, num_rows, 2 if draft_stats is not None else 1)
    accept_uniform = uniforms[PURPOSE_VERIFY][0]

    # log p(x) - log q(x) of each draft under its row (q = 1 for one-hot drafts).
    log_ratio = target_stats.log_prob_at(safe_drafts)
    if draft_stats is not None:
        log_ratio = log_ratio - draft_stats.log_prob_at(safe_drafts)
    log_ratio = torch.nan_to_num(log_ratio, nan=-_LOG_RATIO_CLAMP).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)

    argmax = target_stats.argmax_rows()
    if inputs.method == "synthetic":  # the logits play no part in acceptance, greedy requests included
        assert inputs.synthetic_conditional_rates is not None
        accepted = valid & (accept_uniform[:, :num_drafts] < inputs.synthetic_conditional_rates)
    else:
        accepted = valid & (accept_uniform[:, :num_drafts].double() < log_ratio.exp())
        accepted = torch.where(greedy[:, None], valid & (drafts == argmax[:, :-1]), accepted)
    num_accepted = accepted.to(torch.int64).cumprod(dim=1).sum(dim=1)
    greedy_tokens = argmax.gather(1, num_accepted[:, None])[:, 0]
    if bool(greedy.all()):
        return _assemble(drafts, num_accepted, greedy_tokens)

    residual_scale = torch.ones((num_requests,), dtype=torch.float64, device=device)
    if inputs.method == "block":
        block_tau, prefix_at_tau = _block_decision(
            log_ratio, num_valid, accept_uniform, target_stats, draft_stats, safe_drafts
        )
        num_accepted = torch.where(greedy, num_accepted, block_tau)
        residual_scale = prefix_at_tau
    emitted = _emit(
        uniforms, target_stats, draft_stats, num_accepted, num_valid, safe_drafts, residual_scale, tile_size
    )
    return _assemble(drafts, num_accepted, torch.where(greedy, greedy_tokens, emitted))


def _block_decision(
    log_ratio: torch.Tensor,
    num_valid: torch.Tensor,
    accept_uniform: torch.Tensor,
    target_stats: Stats,
    draft_stats: Stats | None,
    safe_drafts: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Block verification (Sun et al. 2024): tau = max{i in 1..n : eta_i < h_i}, else 0.

    Prefix ratios p_0 = 1, p_i = min(p_{i-1} * a_i, 1), a_i = p(x_i) / q(x_i) at row i-1 (in logs,
    log p_k = S_k - max_{j<=k} S_j with S the running sum of log a); h_i = Z_i / (Z_i + 1 - p_i)
    with Z_i = sum_v max(p_i P_i(v) - Q_i(v), 0) for i < n (1 if the denominator is <= 0), h_n =
    p_n; eta_i is row i's acceptance uniform. Returns tau int64 [R] and p_tau float64 [R].
    """
    num_requests, num_drafts = log_ratio.shape
    rows = torch.arange(num_drafts + 1, device=log_ratio.device)
    in_block = rows[None, :num_drafts] < num_valid[:, None]
    step_log = torch.zeros((num_requests, num_drafts + 1), dtype=torch.float64, device=log_ratio.device)
    step_log[:, :num_drafts] = torch.where(in_block, log_ratio, 0.0)
    exclusive = step_log.cumsum(dim=1) - step_log
    log_prefix = exclusive - exclusive.cummax(dim=1).values
    prefix = log_prefix.exp()
    if draft_stats is None:
        residual_mass = prefix[:, :num_drafts] * (1.0 - target_stats.log_prob_at(safe_drafts).exp())
    else:
        # both RowStats (rejection_sample) or both BankStats (bank.stats); the union does not say which
        residual_mass = target_stats.residual_masses(draft_stats, prefix[:, :num_drafts])  # type: ignore[arg-type]
    residual_mass = torch.cat([residual_mass, torch.zeros_like(residual_mass[:, :1])], dim=1)
    denominator = residual_mass + 1.0 - prefix
    threshold = torch.where(denominator > 0, residual_mass / denominator.clamp_min(1e-300), 1.0)
    threshold = torch.where(rows[None, :] == num_valid[:, None], prefix, threshold)
    passes = (rows[None, :] >= 1) & (rows[None, :] <= num_valid[:, None])
    passes &= accept_uniform.double() < threshold
    tau = torch.where(passes, rows[None, :], 0).amax(dim=1)
    return tau, prefix.gather(1, tau[:, None])[:, 0]


def _emit(
    uniforms: list[list[torch.Tensor]],
    target_stats: Stats,
    draft_stats: Stats | None,
    tau: torch.Tensor,
    num_valid: torch.Tensor,
    safe_drafts: torch.Tensor,
    residual_scale: torch.Tensor,
    tile_size: int,
) -> torch.Tensor:
    """int64 [R]: the token emitted at row tau of each sampled request.

    tau < n (a real rejection): the residual -- max(s p - q, 0) with draft logits (s = the block
    prefix ratio, 1 for standard), p without the draft token for one-hot drafts. tau = n (all
    accepted, or a placeholder at tau): the plain target. A residual without mass falls back to the
    plain target; a row without mass (all -inf) emits token 0.
    """
    num_requests = tau.shape[0]
    index = torch.arange(num_requests, device=tau.device)
    verify = uniforms[PURPOSE_VERIFY]
    tile_uniform, key_lo, key_hi = verify[1][index, tau], verify[2][index, tau], verify[3][index, tau]
    residual_case = tau < num_valid
    probs = target_stats.row_probs(tau, "target_row")
    draft_rows = tau.clamp(max=max(safe_drafts.shape[1] - 1, 0))
    weights = scratch("weights", probs.shape, probs.device, torch.float64)
    if draft_stats is None:
        weights.copy_(probs)
        if safe_drafts.shape[1] > 0:
            rejected = safe_drafts.gather(1, draft_rows[:, None])[:, 0]
            weights[index[residual_case], rejected[residual_case]] = 0.0
    else:
        draft_probs = draft_stats.row_probs(draft_rows, "draft_row")
        torch.mul(probs, residual_scale[:, None], out=weights).sub_(draft_probs).clamp_(min=0.0)
        weights[~residual_case] = probs[~residual_case].double()
        residual = uniforms[PURPOSE_RESIDUAL]
        tile_uniform = torch.where(residual_case, residual[0][index, tau], tile_uniform)
        key_lo = torch.where(residual_case, residual[2][index, tau], key_lo)
        key_hi = torch.where(residual_case, residual[3][index, tau], key_hi)
    token, has_mass = two_level_sample(weights, tile_uniform, key_lo, key_hi, tile_size)
    if bool(has_mass.all()):
        return token
    # A residual without mass falls back to the plain target, with the plain target's draws.
    weights.copy_(probs)
    fallback, fallback_mass = two_level_sample(
        weights, verify[1][index, tau], verify[2][index, tau], verify[3][index, tau], tile_size
    )
    return torch.where(has_mass, token, torch.where(fallback_mass, fallback, 0))


def _assemble(
    drafts: torch.Tensor, num_accepted: torch.Tensor, emitted: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """tokens int64 [R, K+1] (accepted drafts, the emitted token, then -1) and num_tokens int32 [R]."""
    num_requests = drafts.shape[0]
    positions = torch.arange(drafts.shape[1] + 1, device=drafts.device)[None, :]
    padded = torch.cat([drafts, drafts.new_full((num_requests, 1), -1)], dim=1)
    tokens = torch.where(positions < num_accepted[:, None], padded, -1)
    tokens = torch.where(positions == num_accepted[:, None], emitted[:, None], tokens)
    return tokens, (num_accepted + 1).to(torch.int32)


def host_step(
    kernel_seeds: np.ndarray, temperature_index: np.ndarray, k: int, num_drafts: int, tables: StepTables
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The step writer's (``write_step``'s) draws for B requests at k of the engine's K drafts, in numpy: bank rows int64
    [B, K+1] (row indices), draft tokens int64 [B, K] (-1 from k on), temperature float32 [B].

    kernel_seeds: int64 [B] (``spectune.kernels.kernel_seeds``); temperature_index: int64 [B]."""
    slot_of, token_bank = tables.slot_of.cpu().numpy(), tables.token_bank.cpu().numpy()
    positions = np.minimum(np.arange(num_drafts + 1, dtype=np.uint64), np.uint64(k))
    key = np.asarray(kernel_seeds, dtype=np.int64).view(np.uint64)[:, None]
    w0, w1, _, _ = philox4x32_numpy(
        key, positions[None, :], np.zeros((), np.uint64), np.zeros((), np.uint64), np.ones((), np.uint64)
    )
    slots = slot_of[np.asarray(temperature_index)[:, None], np.minimum(positions, k - 1).astype(np.int64)[None, :]]
    rows = slots * tables.bank_rows + (w0 % np.uint64(tables.bank_rows)).astype(np.int64)
    columns = (w1[:, :num_drafts] % np.uint64(token_bank.shape[1])).astype(np.int64)
    tokens = token_bank[rows[:, :num_drafts], columns]
    tokens[:, k:] = -1
    temperature = tables.row_temperature.cpu().numpy()[rows[:, 0]]
    return rows, tokens, temperature

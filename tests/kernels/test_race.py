"""The in-tile exponential race: its noise is Exp(1) down to small values (where the winners are),
the kernels and the twin compute the same noise, and it wins in proportion to the weights."""

import math

import pytest
import torch
import triton
import triton.language as tl
from kernel_cases import assert_distribution

from spectune.kernels._reference_rows import race_noise
from spectune.kernels._sampling import race_keys, race_winner
from spectune.kernels._sampling import race_noise as kernel_race_noise


def _keys(num_rows, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return (
        torch.randint(0, 2**32, (num_rows,), generator=generator, dtype=torch.int64),
        torch.randint(0, 2**32, (num_rows,), generator=generator, dtype=torch.int64),
    )


def test_noise_is_exponential_with_its_small_values_resolved():
    key_lo, key_hi = _keys(256)
    tokens = torch.arange(4096, dtype=torch.int64)[None, :].expand(256, -1)
    exponential = torch.exp2(race_noise(tokens, key_lo, key_hi).double()).flatten()
    n = exponential.numel()  # 2**20 draws
    for threshold in (1e-4, 1e-2, 0.5, 1.0, 3.0):  # P(E < t) = 1 - exp(-t), within 5 sigma
        expected = 1 - math.exp(-threshold)
        observed = float((exponential < threshold).double().mean())
        assert abs(observed - expected) < 5 * math.sqrt(expected * (1 - expected) / n), (threshold, observed, expected)
    assert abs(float(exponential.mean()) - 1.0) < 5 / math.sqrt(n)
    assert bool((exponential > 0).all()) and bool(torch.isfinite(exponential).all())


def test_rows_with_different_keys_draw_unrelated_noise():
    key_lo, key_hi = _keys(2, seed=3)
    tokens = torch.arange(1 << 16, dtype=torch.int64)[None, :].expand(2, -1)
    noise = race_noise(tokens, key_lo, key_hi).double()
    correlation = torch.corrcoef(noise)[0, 1]
    assert abs(float(correlation)) < 5 / math.sqrt(1 << 16)
    shifted = torch.corrcoef(torch.stack([noise[0, 1:], noise[1, :-1]]))[0, 1]  # no shifted copy either
    assert abs(float(shifted)) < 5 / math.sqrt(1 << 16)


@triton.jit
def _noise_kernel(token_ptr, key_lo_ptr, key_hi_ptr, out_ptr, N: tl.constexpr):
    row = tl.program_id(0)
    positions = tl.arange(0, N)
    tokens = tl.load(token_ptr + row * N + positions)[None, :]
    key_lo = tl.load(key_lo_ptr + row + tl.arange(0, 1)).to(tl.uint32)
    key_hi = tl.load(key_hi_ptr + row + tl.arange(0, 1)).to(tl.uint32)
    tl.store(out_ptr + row * N + positions[None, :], kernel_race_noise(tokens, key_lo, key_hi))


@triton.jit
def _winner_kernel(log_weight_ptr, key_lo_ptr, key_hi_ptr, out_ptr, N: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    positions = tl.arange(0, N)
    log_weights = tl.broadcast_to(tl.load(log_weight_ptr + positions)[None, :], (ROWS, N))
    key_lo = tl.load(key_lo_ptr + rows).to(tl.uint32)
    key_hi = tl.load(key_hi_ptr + rows).to(tl.uint32)
    ids = tl.broadcast_to(positions[None, :], (ROWS, N))
    tl.store(out_ptr + rows, race_winner(race_keys(log_weights, ids, key_lo, key_hi)))


def test_kernel_noise_matches_the_twin(device):
    key_lo, key_hi = _keys(8, seed=5)
    tokens = torch.randint(0, 200_000, (8, 128), generator=torch.Generator().manual_seed(1), dtype=torch.int32)
    out = torch.empty(8, 128, device=device)
    _noise_kernel[(8,)](tokens.to(device), key_lo.to(device), key_hi.to(device), out, N=128)
    twin = race_noise(tokens.long(), key_lo, key_hi)
    # The same bits up to the last ulps of log2 (the GPU's approximate log2 against the CPU's).
    assert torch.allclose(out.cpu(), twin, rtol=0, atol=2e-6 * float(twin.abs().max()) + 1e-6)


@pytest.mark.parametrize("backend", ["kernel", "twin"])
def test_race_wins_in_proportion_to_the_weights(backend, device):
    weights = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 0.5, 0.0, 1e-3])
    log_weights = torch.where(weights > 0, torch.log2(weights.clamp_min(1e-30)), -math.inf)
    num_draws = 20480
    key_lo, key_hi = _keys(num_draws, seed=7)
    if backend == "kernel":
        winners = torch.empty(num_draws, dtype=torch.int32, device=device)
        _winner_kernel[(num_draws // 1024,)](
            log_weights.to(device), key_lo.to(device), key_hi.to(device), winners, N=8, ROWS=1024
        )
        winners = winners.cpu().long()
    else:
        tokens = torch.arange(8, dtype=torch.int64)[None, :].expand(num_draws, -1)
        winners = (log_weights.double()[None, :] - race_noise(tokens, key_lo, key_hi).double()).argmax(dim=1)
    assert not bool(((winners == 0) | (winners == 6)).any()), "a zero weight won"
    assert_distribution(winners, (weights / weights.sum()).double(), f"{backend} race")

"""Counts rebuilt from vLLM's rounded rates: inside the stated bounds, and the truth is too."""

import numpy as np
import pytest

from spectune.calibrate._reconstruct import fit_position_counts, reconstruct_window


def _window(rng, num_drafts, k, short=False):
    conditional = rng.uniform(0.3, 0.95, size=k)
    steps = np.cumprod(rng.random((num_drafts, k)) < conditional, axis=1)
    lengths = (
        np.where(rng.random(num_drafts) < 0.3, rng.integers(1, k + 1, size=num_drafts), k)
        if short
        else np.full(num_drafts, k)
    )
    steps = steps * (np.arange(k)[None, :] < lengths[:, None])
    return [int(c) for c in steps.sum(axis=0)], int(lengths.sum())


@pytest.mark.parametrize("seed", range(40))
def test_rebuilt_counts_and_truth_share_the_bounds(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 8))
    num_drafts = int(rng.choice([7, 120, 999, 1001, 5_000, 40_000]))
    per_position, drafted = _window(rng, num_drafts, k, short=bool(seed % 3 == 0))
    accepted = sum(per_position)
    rates = [float(f"{n / num_drafts:.3f}") for n in per_position]
    mean_length = float(f"{1 + accepted / num_drafts:.2f}")
    result = reconstruct_window(
        num_accepted=accepted,
        num_draft_tokens=drafted,
        rates=rates,
        rate_half_step=0.0005,
        mean_length=mean_length,
        length_half_step=0.005,
    )
    assert result is not None
    assert sum(result.accepted_per_position) == accepted
    assert list(result.accepted_per_position) == sorted(result.accepted_per_position, reverse=True)
    low_n, high_n = result.num_drafts_bounds
    assert low_n <= num_drafts <= high_n, "the true draft count is inside the stated range"
    if drafted == num_drafts * k:
        assert result.num_drafts == num_drafts and result.exact_num_drafts
    if result.num_drafts == num_drafts:
        for i, (true_count, count, (low, high)) in enumerate(
            zip(per_position, result.accepted_per_position, result.accepted_per_position_bounds, strict=True)
        ):
            assert low <= true_count <= high, f"position {i}: true count {true_count} outside [{low}, {high}]"
            assert low <= count <= high
            assert high - low <= 0.001 * num_drafts + 1
    if num_drafts < 1000 and result.num_drafts == num_drafts:
        assert list(result.accepted_per_position) == per_position, "3 decimals pin counts of < 1000 drafts exactly"


def test_no_counts_fit_contradictory_rates():
    # 0.9 of 100 drafts at position 0 cannot sum with 0.1 at position 1 to 50 accepted tokens.
    assert fit_position_counts([0.9, 0.1], 0.0005, 100, 50) is None
    assert fit_position_counts([0.5, 0.6], 0.0005, 100, 110) is None  # rates must not rise with position


def test_mean_length_that_contradicts_drafted_over_k_falls_back_to_short_drafts():
    # 150 drafted tokens with K=2 would be 75 drafts, but 1 + 80/75 = 2.07 is not the logged 2.00:
    # the mean length says 80 drafts, some shorter than K.
    result = reconstruct_window(
        num_accepted=80,
        num_draft_tokens=150,
        rates=[0.6, 0.4],
        rate_half_step=0.0005,
        mean_length=2.0,
        length_half_step=0.005,
    )
    assert result is not None and result.num_drafts == 80 and not result.exact_num_drafts
    assert result.accepted_per_position == (48, 32)

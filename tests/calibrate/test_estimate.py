"""Pooled estimates: counts add across windows, and the standard errors cover the truth as they claim."""

import numpy as np
import pytest

from spectune.calibrate._estimate import estimate_from_counts, estimate_from_lengths
from spectune.calibrate._windows import CountWindow, LengthWindow

from .synthetic import draw_window

RATES = (0.72, 0.68, 0.60)


def _windows(rng, *, jitter, count=20):
    truths = [draw_window(rng, RATES, int(rng.integers(500, 3000)), 8, jitter=jitter) for _ in range(count)]
    return [
        CountWindow("synthetic", i, 3, t.num_drafts, t.num_draft_tokens, t.num_accepted, t.accepted_per_position)
        for i, t in enumerate(truths)
    ]


def _coverage(jitter, *, windows=20, replicates=300):
    """Share of replicates whose 95% interval holds the generating rate: ours, and binomial-only."""
    rng = np.random.default_rng(7)
    ours = np.zeros(len(RATES))
    binomial_only = np.zeros(len(RATES))
    length_covered = 0
    true_length = 1 + np.cumprod(RATES).sum()
    for _ in range(replicates):
        estimate = estimate_from_counts(_windows(rng, jitter=jitter, count=windows), 3)
        previous = np.array([estimate.num_drafts, *estimate.accepted_per_position[:-1]])
        rates = np.array(estimate.conditional_rates)
        binomial = np.sqrt(rates * (1 - rates) / previous)
        ours += np.abs(rates - RATES) <= 1.96 * np.array(estimate.conditional_stderr)
        binomial_only += np.abs(rates - RATES) <= 1.96 * binomial
        length_covered += (
            abs(estimate.mean_acceptance_length - true_length) <= 1.96 * estimate.mean_acceptance_length_stderr
        )
    return ours / replicates, binomial_only / replicates, length_covered / replicates


def test_standard_errors_cover_when_steps_are_independent():
    ours, _, length = _coverage(jitter=0.0)
    assert np.all(ours >= 0.91) and np.all(ours <= 0.995), f"coverage {ours}"
    assert 0.91 <= length <= 0.995


def test_standard_errors_cover_when_windows_drift():
    # Acceptance that moves between windows (traffic mix) makes steps correlated within a window; the
    # between-window error sees it, the binomial one does not.
    # The between-window estimate from a few dozen windows runs slightly small (a t, not a normal,
    # quantile would be exact), hence thresholds a little under 0.95.
    ours, binomial_only, length = _coverage(jitter=0.05, windows=40)
    assert np.all(ours >= 0.90), f"coverage {ours}"
    assert np.all(binomial_only <= 0.60), f"binomial-only coverage {binomial_only} should fall short"
    assert length >= 0.88


def test_counts_not_rates_are_pooled():
    # A small window with low acceptance must not weigh as much as a large one.
    windows = [
        CountWindow("f", 1, 1, 10, 10, 1, (1,)),
        CountWindow("f", 2, 1, 990, 990, 891, (891,)),
    ]
    estimate = estimate_from_counts(windows, 1)
    assert estimate.conditional_rates[0] == pytest.approx(892 / 1000)
    assert estimate.mean_acceptance_length == pytest.approx(1.892)


def test_mean_length_windows_weigh_by_verifications():
    windows = [LengthWindow("f", 1, 2.0, 0.005, 1.0, 1), LengthWindow("f", 2, 3.0, 0.005, 3.0, 3)]
    estimate = estimate_from_lengths(windows, 3)
    assert estimate.mean_acceptance_length == pytest.approx((2.0 * 1 + 3.0 * 3) / 4)
    assert 1 + np.cumprod(estimate.conditional_rates).sum() == pytest.approx(estimate.mean_acceptance_length, abs=1e-6)

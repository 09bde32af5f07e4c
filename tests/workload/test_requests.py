"""Request generation: the statistics of what is drawn, and determinism by seed.

Thresholds are about 4-5 standard errors of the estimate: a 3% bias in a rate or a mean fails them.
"""

import math

import numpy as np
import pytest

from spectune.config import WorkloadConfig
from spectune.workload import generate_requests

N = 20_000


def workload(**fields) -> WorkloadConfig:
    base = {"num_requests": N, "prompt_tokens": 100, "output_tokens": 50, "temperature": 0.0}
    base.update(fields)
    if "arrival_rate_per_s" not in base and "concurrency" not in base:
        base["concurrency"] = 8
    return WorkloadConfig.model_validate(base, context={"notices": []})


def chi_square(observed: np.ndarray, expected: np.ndarray) -> tuple[float, float]:
    """(statistic, threshold df + 10 sqrt(2 df)), as the kernel tests use."""
    statistic = float(((observed - expected) ** 2 / expected).sum())
    df = len(observed) - 1
    return statistic, df + 10 * math.sqrt(2 * df)


def test_poisson_arrivals_have_the_configured_rate_and_exponential_gaps():
    rate = 40.0
    table = generate_requests(workload(arrival_rate_per_s=rate), seed=3)
    gaps = np.diff(np.concatenate([[0.0], table.arrival_s]))
    assert np.all(gaps > 0)
    # mean gap 1/rate: standard error (1/rate)/sqrt(N) = 0.7%; allow 3%
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.03)
    # exponential: std equals the mean, and P(gap > mean) = e^-1
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.04)
    assert (gaps > 1 / rate).mean() == pytest.approx(math.exp(-1), abs=0.015)
    # counts in 1-second windows are Poisson: variance equals the mean
    counts = np.bincount(table.arrival_s.astype(int))[:-1]
    assert counts.var() / counts.mean() == pytest.approx(1.0, abs=0.25)


def test_closed_loop_requests_are_all_ready_at_time_zero():
    table = generate_requests(workload(concurrency=16), seed=0)
    assert len(table) == N and np.all(table.arrival_s == 0.0)


def test_fixed_lengths_are_exact():
    table = generate_requests(workload(prompt_tokens=321, output_tokens=7), seed=0)
    assert np.all(table.prompt_tokens == 321) and np.all(table.output_tokens == 7)
    assert table.prompt_tokens.dtype == np.int64 and table.output_tokens.dtype == np.int64


def test_uniform_lengths_cover_the_range_evenly():
    table = generate_requests(
        workload(prompt_tokens={"distribution": "uniform", "min_tokens": 3, "max_tokens": 12}), seed=1
    )
    observed = np.bincount(table.prompt_tokens, minlength=13)[3:]
    assert observed.sum() == N  # nothing outside [3, 12]
    statistic, threshold = chi_square(observed, np.full(10, N / 10))
    assert statistic < threshold, f"chi2={statistic:.1f} > {threshold:.1f} (df=9)"


@pytest.mark.parametrize("distribution", ["normal", "lognormal"])
def test_normal_and_lognormal_lengths_have_the_configured_mean_and_std(distribution):
    mean, std = 400.0, 120.0
    spec = {"distribution": distribution, "mean_tokens": mean, "std_tokens": std}
    table = generate_requests(workload(output_tokens=spec), seed=2)
    lengths = table.output_tokens.astype(float)
    # standard error of the mean 0.85 tokens, of the std about 0.6-1.5 tokens
    assert lengths.mean() == pytest.approx(mean, abs=5.0)
    assert lengths.std() == pytest.approx(std, rel=0.04)
    skew = float(((lengths - lengths.mean()) ** 3).mean() / lengths.std() ** 3)
    expected_skew = 0.0 if distribution == "normal" else 3 * (std / mean) + (std / mean) ** 3  # lognormal closed form
    assert skew == pytest.approx(expected_skew, abs=0.1)


def test_lengths_are_clipped_to_the_bounds():
    spec = {"distribution": "normal", "mean_tokens": 50.0, "std_tokens": 100.0, "min_tokens": 20, "max_tokens": 80}
    table = generate_requests(workload(prompt_tokens=spec), seed=4)
    assert table.prompt_tokens.min() == 20 and table.prompt_tokens.max() == 80
    # P(draw < 19.5) = Phi(-0.305) = 0.380 of the requests sit at the lower bound
    assert (table.prompt_tokens == 20).mean() == pytest.approx(0.380, abs=0.015)


def test_temperature_mix_follows_the_weights():
    mix = [
        {"temperature": 0.0, "weight": 1.0},
        {"temperature": 0.7, "weight": 2.0},
        {"temperature": 1.0, "weight": 5.0},
    ]
    table = generate_requests(workload(temperature=mix), seed=5)
    assert table.temperatures == (0.0, 0.7, 1.0)
    observed = np.bincount(table.temperature_index, minlength=3)
    statistic, threshold = chi_square(observed, N * np.array([1, 2, 5]) / 8)
    assert statistic < threshold, f"chi2={statistic:.1f} > {threshold:.1f} (df=2)"
    assert observed / N == pytest.approx(np.array([1, 2, 5]) / 8, abs=0.015)
    assert np.array_equal(table.temperature, np.array([0.0, 0.7, 1.0])[table.temperature_index])


def test_csv_trace_in_order_cycles_and_random_order_samples_every_row_evenly(tmp_path):
    (tmp_path / "t.csv").write_text("10,1\n20,2\n30,3\n")
    table = generate_requests(
        workload(prompt_tokens=None, output_tokens=None, num_requests=7, lengths_csv={"path": str(tmp_path / "t.csv")}),
        seed=0,
    )
    assert table.prompt_tokens.tolist() == [10, 20, 30, 10, 20, 30, 10]
    assert table.output_tokens.tolist() == [1, 2, 3, 1, 2, 3, 1]
    shuffled = generate_requests(
        workload(
            prompt_tokens=None, output_tokens=None, lengths_csv={"path": str(tmp_path / "t.csv"), "order": "random"}
        ),
        seed=0,
    )
    assert np.array_equal(shuffled.prompt_tokens // 10, shuffled.output_tokens)  # pairs stay together
    statistic, threshold = chi_square(np.bincount(shuffled.output_tokens)[1:], np.full(3, N / 3))
    assert statistic < threshold


def test_same_seed_same_requests_and_streams_are_independent():
    spec = {"distribution": "lognormal", "mean_tokens": 300.0, "std_tokens": 50.0}
    config = workload(arrival_rate_per_s=5.0, output_tokens=spec, num_requests=500)
    first, again = generate_requests(config, seed=11), generate_requests(config, seed=11)
    for name in ("arrival_s", "prompt_tokens", "output_tokens", "temperature_index"):
        assert np.array_equal(getattr(first, name), getattr(again, name))
    other = generate_requests(config, seed=12)
    assert not np.array_equal(first.arrival_s, other.arrival_s)
    assert not np.array_equal(first.output_tokens, other.output_tokens)
    # changing the output-length distribution leaves the arrival times untouched
    changed = generate_requests(workload(arrival_rate_per_s=5.0, output_tokens=64, num_requests=500), seed=11)
    assert np.array_equal(first.arrival_s, changed.arrival_s)


@pytest.mark.parametrize("seed", [-1, 1.5, True, "7"])
def test_bad_seed_is_refused(seed):
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        generate_requests(workload(), seed=seed)

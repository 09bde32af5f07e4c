"""Acceptance-form conversions against the reference's worked examples."""

import pytest

from spectune.config import (
    acceptance_length_to_rates,
    conditional_to_unconditional,
    decay_to_conditional_rates,
    mean_acceptance_length,
    mean_rate_to_decay,
    unconditional_to_conditional,
)

# (K, p̄) -> (a0, gamma), from rejection_sampling.md section 3 (three decimals).
WORKED_EXAMPLES = [
    (3, 0.3, 0.546, 0.85),
    (3, 0.6, 0.839, 0.85),
    (3, 0.8, 0.986, 0.85),
    (3, 0.9, 1.0, 0.920),
    (7, 0.3, 0.837, 0.85),
    (7, 0.6, 1.0, 0.920),
    (7, 0.8, 1.0, 0.970),
]


@pytest.mark.parametrize(("k", "mean_rate", "base", "decay"), WORKED_EXAMPLES)
def test_mean_rate_matches_worked_examples(k, mean_rate, base, decay):
    got_base, got_decay = mean_rate_to_decay(mean_rate, k)
    assert got_base == pytest.approx(base, abs=1e-3)
    assert got_decay == pytest.approx(decay, abs=1e-3)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 7, 10])
def test_mean_rate_round_trips_for_every_rate(k):
    # As vLLM's own test: for p̄ in 0.00..0.99 the mean joint probability equals p̄ and a0 <= 1.
    for hundredths in range(100):
        mean_rate = hundredths / 100
        base, decay = mean_rate_to_decay(mean_rate, k)
        unconditional = conditional_to_unconditional(decay_to_conditional_rates(base, decay, k))
        assert sum(unconditional) / k == pytest.approx(mean_rate, abs=1e-8)
        assert 0.0 <= base <= 1.0 and 0.85 <= decay <= 1.0


def test_k1_base_rate_is_the_mean_rate():
    assert mean_rate_to_decay(0.37, 1)[0] == pytest.approx(0.37, abs=1e-8)


def test_mean_rate_rejects_out_of_range():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        mean_rate_to_decay(1.5, 3)


def test_unconditional_to_conditional_divides_and_keeps_zeros():
    assert unconditional_to_conditional([0.9, 0.45, 0.09]) == pytest.approx([0.9, 0.5, 0.2])
    assert unconditional_to_conditional([0.5, 0.0, 0.0]) == [0.5, 0.0, 0.0]
    assert unconditional_to_conditional([1.0, 1.0, 1.0]) == [1.0, 1.0, 1.0]


def test_conditional_and_unconditional_are_inverse():
    conditional = [0.73, 0.71, 0.68, 0.5]
    assert unconditional_to_conditional(conditional_to_unconditional(conditional)) == pytest.approx(conditional)


@pytest.mark.parametrize(
    ("length", "k", "rates"),
    [(2.6, 3, [1.0, 0.6, 0.0]), (3.5, 4, [1.0, 1.0, 0.5, 0.0]), (1.0, 3, [0.0, 0.0, 0.0]), (4.0, 3, [1.0, 1.0, 1.0])],
)
def test_acceptance_length_to_minimum_variance_rates(length, k, rates):
    assert acceptance_length_to_rates(length, k) == pytest.approx(rates)
    assert mean_acceptance_length(acceptance_length_to_rates(length, k)) == pytest.approx(length)


def test_acceptance_length_outside_range_is_refused():
    with pytest.raises(ValueError, match=r"\[1, 4\]"):
        acceptance_length_to_rates(4.5, 3)


def test_mean_acceptance_length_of_vllm_eagle3_logs():
    # Llama-3.1-8B + EAGLE3, K=3 on MT-Bench: vLLM reports AL 2.60 for these per-position rates.
    assert mean_acceptance_length([0.7296, 0.5208, 0.3545]) == pytest.approx(2.60, abs=0.01)

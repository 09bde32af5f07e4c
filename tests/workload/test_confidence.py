"""The synthesizer's draft confidence (vLLM's logit(max q) feature) against its acceptance."""

import math

import numpy as np
import pytest
import torch

from spectune.workload import LogitSynthesizer
from spectune.workload._confidence import (
    bank_confidence,
    calibrated_confidence,
    draft_confidence_auc,
    draft_log_odds,
    weighted_auc,
)


def test_log_odds_is_the_top_probability_log_odds_clamped() -> None:
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0], [500.0, 0.0, 0.0]])
    top = math.exp(2.0) / (math.exp(2.0) + 2.0)
    assert draft_log_odds(logits).tolist() == pytest.approx([math.log(top / (1 - top)), math.log(0.5), 40.0])


def test_weighted_auc_counts_each_row_as_accepted_with_its_probability() -> None:
    assert weighted_auc(np.array([3.0, 2.0, 1.0]), np.array([1.0, 1.0, 0.0])) == 1.0
    assert weighted_auc(np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0, 0.0])) == 0.0
    assert weighted_auc(np.array([1.0, 1.0]), np.array([1.0, 0.0])) == 0.5  # a tie counts half
    # two rows, each half accepted: the pair (2 accepted, 1 rejected) ranks right, its mirror wrong
    assert weighted_auc(np.array([2.0, 1.0]), np.array([0.5, 0.5])) == pytest.approx(0.5)


def test_weighted_auc_is_the_weighted_pairwise_count() -> None:
    rng = np.random.default_rng(4)
    scores = rng.integers(0, 20, size=300).astype(np.float64)  # many ties
    accept, weight = rng.random(300), rng.random(300)
    positive, negative = weight * accept, weight * (1.0 - accept)
    above = (scores[:, None] > scores[None, :]) + 0.5 * (scores[:, None] == scores[None, :])
    pairwise = positive @ above @ negative / (positive.sum() * negative.sum())
    assert weighted_auc(scores, accept, weight) == pytest.approx(pairwise, rel=1e-12)


@pytest.mark.parametrize(("mode", "temperature"), [("greedy", 0.0), ("greedy", 0.7), ("probabilistic", 0.7)])
def test_synthesized_draft_confidence_ranks_accepted_drafts_above_rejected(mode: str, temperature: float) -> None:
    synthesizer = LogitSynthesizer(
        [0.9, 0.6, 0.3], [temperature], vocab_size=256, draft_sample_method=mode, bank_rows=256
    )
    aucs = [draft_confidence_auc(synthesizer, position, 0) for position in range(3)]
    # the family ties a confident target to a less noisy draft, so the drafter's confidence carries signal,
    # well short of perfect (measured 0.65-0.91 over these banks)
    assert all(0.6 < auc < 0.95 for auc in aucs), aucs


def test_at_temperature_zero_both_drafting_modes_see_the_same_signal() -> None:
    greedy, probabilistic = (
        LogitSynthesizer([0.7], [0.0], vocab_size=256, draft_sample_method=mode, bank_rows=256)
        for mode in ("greedy", "probabilistic")
    )
    assert draft_confidence_auc(greedy, 0, 0) == draft_confidence_auc(probabilistic, 0, 0)


@pytest.mark.parametrize("mode", ["greedy", "probabilistic"])
def test_a_banks_rows_are_known_without_building_the_synthesizer(mode: str) -> None:
    rates = [0.7, 0.4]
    synthesizer = LogitSynthesizer(rates, [0.7], vocab_size=256, draft_sample_method=mode, bank_rows=128)
    for position, rate in enumerate(rates):
        features, accept = bank_confidence(synthesizer, position, 0)
        # the rows' acceptance under the simulated drafting: its mean is what the bank accepts
        assert accept.mean() == pytest.approx(synthesizer.expected_conditional_rates(0)[position], abs=1e-9)
        alone = calibrated_confidence(
            rate, 0.7, measured_with="greedy", draft_sample_method=mode, vocab_size=256, bank_rows=128
        )
        assert np.array_equal(alone[0], features) and np.array_equal(alone[1], accept)

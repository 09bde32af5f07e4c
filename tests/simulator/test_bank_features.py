"""``BankFeatures``: a draft's feature drawn given its outcome from a real synthesizer's banks has the rows'
own joint of (feature, outcome) -- the AUC and the class means the bank gives -- per position and per
request temperature."""

import numpy as np
import pytest

from spectune.simulator._acceptance_estimate import BankFeatures, _alias_table
from spectune.workload import LogitSynthesizer
from spectune.workload._confidence import bank_confidence, draft_confidence_auc, weighted_auc

DRAWS = 50_000


def _engine_outcomes(synthesizer: LogitSynthesizer, rng: np.random.Generator, draws: int) -> np.ndarray:
    """bool [draws, K]: each position's outcome as the engines give it, a uniform row accepted with its p."""
    columns = []
    for position in range(synthesizer.num_speculative_tokens):
        _, accept = bank_confidence(synthesizer, position, 0)
        rows = rng.integers(0, len(accept), size=draws)
        columns.append(rng.random(draws) < accept[rows])
    return np.stack(columns, axis=1)


@pytest.mark.parametrize("rows", [16, 509, 512])
def test_an_alias_table_draws_each_row_with_its_weights_share(rows: int) -> None:
    weights = np.random.default_rng(rows).random(rows) ** 4
    weights[::7] = 0.0  # rows that must never be drawn
    keep, alias = _alias_table(weights)
    # a column is picked with probability 1 / rows: it gives its own row keep[c] of that, its alias the rest
    drawn = keep.copy()
    np.add.at(drawn, alias, 1.0 - keep)
    assert np.allclose(drawn / rows, weights / weights.sum(), rtol=0, atol=1e-15)
    assert np.all(keep[::7] == 0.0)


@pytest.mark.parametrize("mode", ["greedy", "probabilistic"])
def test_drawn_features_have_the_banks_auc_and_class_means(mode: str) -> None:
    synthesizer = LogitSynthesizer([0.8, 0.5], [0.7], vocab_size=256, draft_sample_method=mode, bank_rows=256)
    accepted = _engine_outcomes(synthesizer, np.random.default_rng(0), DRAWS)
    drawn = BankFeatures(synthesizer, np.zeros(DRAWS, dtype=np.int64), seed=1).draw(accepted, np.arange(DRAWS))
    for position in range(2):
        features, accept = bank_confidence(synthesizer, position, 0)
        outcome = accepted[:, position]
        bank_auc = draft_confidence_auc(synthesizer, position, 0)
        drawn_auc = weighted_auc(drawn[:, position], outcome.astype(np.float64))
        # a sampler that ignored the outcome would give 0.5, one that swapped the weights 1 - AUC
        assert 0.6 < bank_auc < 0.95 and abs(drawn_auc - bank_auc) < 0.015, (position, bank_auc, drawn_auc)
        for weight, chosen in ((accept, outcome), (1.0 - accept, ~outcome)):
            mean = np.average(features, weights=weight)
            stderr = np.sqrt(np.average((features - mean) ** 2, weights=weight) / chosen.sum())
            # within 4 standard errors of the bank's mean with its rows so weighted
            assert abs(drawn[chosen, position].mean() - mean) < 4 * stderr, (position, mean, stderr)


def test_each_request_draws_from_its_own_temperatures_bank() -> None:
    # at T = 0 a row is accepted or not (argmax agreement): an accepted draft there can only take the feature
    # of a row that agrees, a rejected one of a row that does not; at T = 0.7 any row of that bank
    synthesizer = LogitSynthesizer([0.6, 0.4], [0.0, 0.7], vocab_size=256, draft_sample_method="greedy", bank_rows=128)
    rng = np.random.default_rng(2)
    temperature_index = rng.integers(0, 2, size=400)
    running = rng.permutation(400)[:300]
    accepted = rng.random((300, 2)) < 0.5
    drawn = BankFeatures(synthesizer, temperature_index, seed=3).draw(accepted, running)
    for position in range(2):
        greedy_features, greedy_accept = bank_confidence(synthesizer, position, 0)
        sampled_features, _ = bank_confidence(synthesizer, position, 1)
        at_zero = temperature_index[running] == 0
        for outcome, agree in ((True, 1.0), (False, 0.0)):
            chosen = at_zero & (accepted[:, position] == outcome)
            assert chosen.any() and set(drawn[chosen, position]) <= set(greedy_features[greedy_accept == agree])
        assert set(drawn[~at_zero, position]) <= set(sampled_features)

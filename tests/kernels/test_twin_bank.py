"""The twin over a bank of rows (per-row statistics kept) emits what it emits given the same rows as logits."""

import pytest
import torch

from spectune.kernels.reference import RowBank, rejection_sample, rejection_sample_banked
from spectune.workload import LogitSynthesizer


@pytest.mark.parametrize("sampling", ["greedy", "probabilistic"])
@pytest.mark.parametrize("method", ["standard", "block", "synthetic"])
@pytest.mark.parametrize(("vocab", "temperatures"), [(256, [0.7]), (96, [0.0, 0.5, 1.3]), (160, [0.0])])
def test_banked_twin_equals_the_twin_on_the_same_rows(sampling, method, vocab, temperatures):
    rates = [0.9, 0.75, 0.6, 0.4]
    synthesizer = LogitSynthesizer(rates, temperatures, vocab_size=vocab, draft_sample_method=sampling, bank_rows=64)
    target_bank, draft_bank, row_temperature = synthesizer.banks()
    bank = RowBank(target_bank, draft_bank, row_temperature)
    synthetic = torch.linspace(0.9, 0.4, len(rates)) if method == "synthetic" else None
    compared = 0
    for seed in range(8):
        requests, k = [1, 7, 64, 200][seed % 4], 1 + seed % len(rates)
        index = torch.randint(0, len(temperatures), (requests,), generator=torch.Generator().manual_seed(seed))
        step = synthesizer.generate_rows(index, torch.Generator().manual_seed(seed), num_speculative_tokens=k)
        logits = synthesizer.generate(index, torch.Generator().manual_seed(seed), num_speculative_tokens=k)
        assert torch.equal(logits.draft_tokens, step.draft_tokens)  # one step, two forms
        seeds = torch.randint(0, 2**62, (requests,), generator=torch.Generator().manual_seed(100 + seed))
        rates_k = synthetic[:k] if synthetic is not None else None
        expected = rejection_sample(
            logits.target_logits,
            logits.draft_tokens,
            draft_logits=logits.draft_logits,
            temperature=logits.temperature,
            seed=seeds,
            method=method,
            synthetic_conditional_rates=rates_k,
        )
        got = rejection_sample_banked(
            bank,
            step.rows,
            step.draft_tokens,
            temperature=step.temperature,
            seed=seeds,
            method=method,
            synthetic_conditional_rates=rates_k,
        )
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1]), f"seed {seed}"
        compared += int(expected[1].sum())
    assert compared > 0

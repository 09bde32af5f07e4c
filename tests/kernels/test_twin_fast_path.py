"""The twin's fast CPU path over a bank (numpy, the pruned race, counts only) against the generic twin:
the same tokens and counts, on the simulator's rows and on adversarial weights."""

import numpy as np
import pytest
import torch

from spectune.kernels._reference_banked import _BIT_TRICK_ERROR, pruned_race, race_bounds
from spectune.kernels._reference_rows import noise_from_hash, race_hash, two_level_sample
from spectune.kernels.reference import RowBank, count_emitted_banked, rejection_sample, rejection_sample_banked
from spectune.workload import LogitSynthesizer


def _full_race(weights: np.ndarray, key_lo: np.ndarray, key_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    token, has_mass = two_level_sample(
        torch.from_numpy(weights),
        torch.zeros(len(weights)),
        torch.from_numpy(key_lo.astype(np.int64)),
        torch.from_numpy(key_hi.astype(np.int64)),
        tile_size=4096,
    )
    return token.numpy(), has_mass.numpy()


def _adversarial_weights(rng: np.random.Generator, rows: int, vocab: int) -> np.ndarray:
    weights = rng.dirichlet(np.full(vocab, 0.3), size=rows)
    weights[0] = 0.0  # no mass
    weights[1] = 1.0 / vocab  # every token tied
    weights[2, :] = 0.0
    weights[2, vocab // 2] = 1.0  # one token
    weights[3] = np.where(rng.random(vocab) < 0.5, 1e-300, 0.0)  # tiny weights
    weights[4] = np.where(rng.random(vocab) < 0.5, 0.0, weights[4])  # half zero (a residual)
    weights[5] = np.repeat(rng.dirichlet(np.ones(vocab // 4)), 4)[:vocab] / 4  # ties in groups of 4
    weights[6] = 2.0 ** -np.arange(vocab, dtype=np.float64)  # weights across every exponent
    weights[7] = np.nextafter(weights[7], 0.0)  # just below the float32 bucket edges of the others
    return weights


@pytest.mark.parametrize("vocab", [1, 7, 96, 256, 1000])
def test_the_pruned_race_picks_the_full_races_token(vocab):
    rng = np.random.default_rng(vocab)
    rows = 400
    weights = _adversarial_weights(rng, rows, vocab) if vocab >= 8 else rng.random((rows, vocab))
    key_lo = rng.integers(0, 2**32, rows, dtype=np.uint64).astype(np.uint32)
    key_hi = rng.integers(0, 2**32, rows, dtype=np.uint64).astype(np.uint32)
    key_lo[:40] = key_lo[0]  # rows sharing a key: the same noise, so weights alone break ties
    key_hi[:40] = key_hi[0]
    token, has_mass = pruned_race(weights, key_lo, key_hi)
    expected_token, expected_mass = _full_race(weights, key_lo, key_hi)
    assert np.array_equal(has_mass, expected_mass)
    assert np.array_equal(token, expected_token)


def test_the_race_bounds_hold_for_every_hash_of_their_bucket():
    rng = np.random.default_rng(0)
    bounds = race_bounds().astype(np.float64) * 2.0**-23
    edges = (np.arange(2**16, dtype=np.uint64) << np.uint64(16))[:, None] + np.array(
        [0, 1, 2, 65533, 65534, 65535], dtype=np.uint64
    )
    hashes = np.concatenate(
        [rng.integers(0, 2**32, 2**22, dtype=np.uint64), edges.ravel(), np.arange(2**16, dtype=np.uint64)]
    )
    hashes = hashes.astype(np.uint32)
    negative_noise = -noise_from_hash(hashes).double().numpy()
    # What the bound must cover beyond -log2 E: the bit trick's under-read of log2 w.
    assert np.all(bounds[hashes >> np.uint32(16)] >= negative_noise + _BIT_TRICK_ERROR)


def test_the_race_hash_matches_the_kernels_noise_stream():
    from spectune.kernels._reference_rows import race_noise

    rng = np.random.default_rng(1)
    lo = rng.integers(0, 2**32, 5, dtype=np.uint64).astype(np.uint32)
    hi = rng.integers(0, 2**32, 5, dtype=np.uint64).astype(np.uint32)
    tokens = np.arange(300, dtype=np.uint32)[None, :]
    expected = race_noise(
        torch.from_numpy(np.broadcast_to(tokens, (5, 300)).astype(np.int64)),
        torch.from_numpy(lo.astype(np.int64)),
        torch.from_numpy(hi.astype(np.int64)),
    )
    got = noise_from_hash(race_hash(tokens * np.uint32(0x9E3779B9), lo, hi))
    assert torch.equal(got, expected)


@pytest.mark.parametrize("sampling", ["greedy", "probabilistic"])
@pytest.mark.parametrize("method", ["standard", "block", "synthetic"])
def test_counts_only_equal_the_twins_counts_with_placeholders_and_temperature_mixes(sampling, method):
    rates = [0.9, 0.75, 0.6, 0.4, 0.7]
    temperatures = [0.0, 0.5, 1.3]
    synthesizer = LogitSynthesizer(rates, temperatures, vocab_size=160, draft_sample_method=sampling, bank_rows=64)
    bank = RowBank(*synthesizer.banks())
    synthetic = torch.linspace(0.9, 0.4, len(rates)) if method == "synthetic" else None
    for seed in range(6):
        requests, k = [1, 9, 130][seed % 3], 1 + seed % len(rates)
        index = torch.randint(0, len(temperatures), (requests,), generator=torch.Generator().manual_seed(100 + seed))
        step = synthesizer.generate_rows(index, torch.Generator().manual_seed(seed), num_speculative_tokens=k)
        rows, drafts = step.rows, step.draft_tokens.clone()
        drafts[::4, k // 2 :] = -1  # placeholders, and an id outside the vocabulary
        drafts[1::5, 0] = 160 + seed
        seeds = torch.randint(0, 2**62, (requests,), generator=torch.Generator().manual_seed(200 + seed))
        rates_k = synthetic[:k] if synthetic is not None else None
        logits = synthesizer.generate(index, torch.Generator().manual_seed(seed), num_speculative_tokens=k)
        expected = rejection_sample(
            logits.target_logits,
            drafts,
            draft_logits=logits.draft_logits,
            temperature=step.temperature,
            seed=seeds,
            method=method,
            synthetic_conditional_rates=rates_k,
        )
        banked = rejection_sample_banked(
            bank,
            rows,
            drafts,
            temperature=step.temperature,
            seed=seeds,
            method=method,
            synthetic_conditional_rates=rates_k,
        )
        counts = count_emitted_banked(
            bank,
            rows.numpy(),
            drafts.numpy(),
            temperature=step.temperature.numpy(),
            seed=seeds.numpy(),
            method=method,
            synthetic_conditional_rates=rates_k.numpy() if rates_k is not None else None,
        )
        assert torch.equal(banked[0], expected[0]) and torch.equal(banked[1], expected[1]), f"seed {seed}"
        assert np.array_equal(counts, expected[1].numpy()), f"seed {seed}"


def test_host_rows_are_the_same_step_as_torch_rows():
    for sampling in ("greedy", "probabilistic"):
        synthesizer = LogitSynthesizer(
            [0.8, 0.6, 0.5], [0.0, 0.7], vocab_size=96, draft_sample_method=sampling, bank_rows=32
        )
        index = torch.randint(0, 2, (50,), generator=torch.Generator().manual_seed(2))
        for k in (1, 3):
            step = synthesizer.generate_rows(index, torch.Generator().manual_seed(k), num_speculative_tokens=k)
            rows, tokens, temperature = synthesizer.generate_host_rows(
                index.numpy(), torch.Generator().manual_seed(k), k
            )
            assert np.array_equal(rows, step.rows.numpy())
            assert np.array_equal(tokens, step.draft_tokens.numpy())
            assert np.array_equal(temperature, step.temperature.numpy())


def test_the_fast_path_refuses_a_bank_off_the_cpu():
    synthesizer = LogitSynthesizer([0.8], [0.7], vocab_size=32, draft_sample_method="greedy", bank_rows=8)
    bank = RowBank(*synthesizer.banks())
    bank.host = None  # as for a bank on a GPU
    with pytest.raises(ValueError, match="bank on the CPU"):
        count_emitted_banked(
            bank,
            np.zeros((1, 2), dtype=np.int64),
            np.zeros((1, 1), dtype=np.int64),
            temperature=np.ones(1, np.float32),
            seed=np.zeros(1, np.int64),
            method="standard",
        )

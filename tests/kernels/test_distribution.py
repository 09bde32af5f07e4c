"""Sampled verification keeps the target distribution at every position (chi-square, ~10 sigma)."""

import pytest
import torch
from kernel_cases import BACKENDS, assert_distribution, assert_every_position, repeated_trials, run, target_probs

VOCAB = 23  # not a power of two
NUM_TRIALS = 4000


def _rows(seed):
    generator = torch.Generator().manual_seed(seed)
    target = torch.randn(VOCAB, generator=generator) * 1.5
    target[3] += 2.5
    draft = target + torch.randn(VOCAB, generator=generator) * 0.8
    return target, draft


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", ["standard", "block"])
@pytest.mark.parametrize("draft_mode", ["one_hot", "draft_logits"])
@pytest.mark.parametrize("temperature", [0.6, 1.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_emitted_tokens_follow_the_target_at_every_position(backend, method, draft_mode, temperature, dtype, device):
    target, draft = _rows(seed=9)
    batch = repeated_trials(
        target,
        draft if draft_mode == "draft_logits" else None,
        proposal_row=draft,
        num_drafts=3,
        temperature=temperature,
        num_trials=NUM_TRIALS,
        dtype=dtype,
        device=device,
    )
    tokens, num_tokens = run(backend, method=method, **batch)
    probs = target_probs(target, temperature, dtype)
    assert_every_position(tokens, num_tokens, probs, f"{backend} {method} {draft_mode} T={temperature} {dtype}")
    assert 0.2 < float((num_tokens > 1).float().mean()) < 0.95, "the case should both accept and reject"


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("draft_mode", ["one_hot", "draft_logits"])
def test_residual_across_vocabulary_tiles_follows_the_target(backend, draft_mode, device):
    # V = 300 cut into 64-token tiles: the tile choice and the in-tile draw both matter.
    generator = torch.Generator().manual_seed(11)
    target = torch.randn(300, generator=generator) * 1.5
    draft = target + torch.randn(300, generator=generator)
    batch = repeated_trials(
        target,
        draft if draft_mode == "draft_logits" else None,
        proposal_row=draft,
        num_drafts=2,
        temperature=0.8,
        num_trials=6000,
        dtype=torch.float32,
        device=device,
    )
    tokens, num_tokens = run(backend, tile_size=64, method="standard", **batch)
    assert_every_position(tokens, num_tokens, target_probs(target, 0.8, torch.float32), f"{backend} tiles")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", ["standard", "block"])
def test_draft_equal_to_target_accepts_every_draft(backend, method, device):
    target, _ = _rows(seed=3)
    batch = repeated_trials(
        target, target, num_drafts=4, temperature=0.8, num_trials=300, dtype=torch.float32, device=device
    )
    _, num_tokens = run(backend, method=method, **batch)
    assert bool((num_tokens == 5).all()), f"accepted counts {num_tokens.unique().tolist()}"


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("num_drafts", [3, 5])
def test_block_accepts_at_least_as_many_as_standard(backend, num_drafts, device):
    generator = torch.Generator().manual_seed(5)
    num_trials, vocab = 3000, 19
    target = torch.randn(num_trials, num_drafts + 1, vocab, generator=generator) * 1.5
    draft = target[:, :num_drafts] + 0.8 * torch.randn(num_trials, num_drafts, vocab, generator=generator)
    drafts = torch.multinomial(torch.softmax(draft.view(-1, vocab), -1), 1, generator=generator).view(num_trials, -1)
    batch = dict(
        target_logits=target.to(device),
        draft_tokens=drafts.to(device),
        draft_logits=draft.to(device),
        temperature=torch.ones(num_trials, device=device),
        seed=torch.arange(num_trials, device=device),
    )
    standard = run(backend, method="standard", **batch)[1].double()
    block = run(backend, method="block", **batch)[1].double()
    difference = block - standard
    standard_error = float(difference.std()) / num_trials**0.5
    assert float(difference.mean()) > -3 * standard_error, (
        f"block {float(block.mean()):.3f} < standard {float(standard.mean()):.3f} (se {standard_error:.3f})"
    )


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_synthetic_acceptance_follows_the_conditional_rates(backend, temperature, device):
    target, draft = _rows(seed=9)
    num_trials = 6000
    batch = repeated_trials(
        target,
        None,
        proposal_row=draft,
        num_drafts=3,
        temperature=max(temperature, 1.0),
        num_trials=num_trials,
        dtype=torch.float32,
        device=device,
    )
    batch["temperature"] = torch.full((num_trials,), temperature, device=device)
    rates = torch.tensor([0.9, 0.5, 0.2], device=device)
    tokens, num_tokens = run(backend, method="synthetic", synthetic_conditional_rates=rates, **batch)
    joint = torch.cumprod(rates.double().cpu(), 0)
    for i in range(3):
        observed = float((num_tokens.cpu() >= i + 2).double().mean())
        tolerance = 5 * (float(joint[i]) * (1 - float(joint[i])) / num_trials) ** 0.5
        assert abs(observed - float(joint[i])) < tolerance, (
            f"P(accepted >= {i + 1}) = {observed:.4f} vs {float(joint[i]):.4f}"
        )
    if temperature > 0:  # at a rejection the emitted token is drawn as standard would: p without x
        drafts = batch["draft_tokens"].cpu()
        rejected_at = num_tokens.cpu().long() - 1
        fixed = drafts[:, 0] == drafts[:, 0].mode().values
        rejected = (rejected_at == 0) & fixed
        emitted = tokens.cpu()[rejected, 0]
        probs = target_probs(target, 1.0, torch.float32)
        without = probs.clone()
        without[int(drafts[fixed][0, 0])] = 0
        assert_distribution(emitted, without / without.sum(), f"{backend} synthetic residual")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rate", [0.0, 1.0])
def test_synthetic_extreme_rates_accept_all_or_nothing(backend, rate, device):
    target, _ = _rows(seed=2)
    batch = repeated_trials(
        target, None, num_drafts=3, temperature=1.0, num_trials=64, dtype=torch.float32, device=device
    )
    _, num_tokens = run(
        backend, method="synthetic", synthetic_conditional_rates=torch.full((3,), rate, device=device), **batch
    )
    assert bool((num_tokens == (4 if rate == 1.0 else 1)).all())


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_bonus_only_rows_sample_the_target(backend, device):
    target, _ = _rows(seed=4)
    batch = repeated_trials(
        target, None, num_drafts=0, temperature=0.7, num_trials=3000, dtype=torch.float32, device=device
    )
    tokens, num_tokens = run(backend, **batch)
    assert bool((num_tokens == 1).all())
    assert_distribution(tokens[:, 0], target_probs(target, 0.7, torch.float32), f"{backend} K=0")

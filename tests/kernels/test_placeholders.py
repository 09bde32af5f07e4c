"""-1 placeholders and out-of-range draft ids: never accepted, nothing after them, plain target there."""

import math

import pytest
import torch
from kernel_cases import BACKENDS, assert_distribution, repeated_trials, run, target_probs

VOCAB = 31


def _peaked_row(seed):
    generator = torch.Generator().manual_seed(seed)
    row = torch.randn(VOCAB, generator=generator)
    row[5] += 8.0  # the drafts propose token 5, which the target accepts most of the time
    return row


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad_id", [-1, VOCAB, 10**6])
@pytest.mark.parametrize("with_draft_logits", [False, True])
def test_placeholder_is_never_accepted_and_emits_from_the_plain_target(backend, bad_id, with_draft_logits, device):
    target = _peaked_row(0)
    batch = repeated_trials(
        target,
        target + 0.3 if with_draft_logits else None,
        num_drafts=1,
        temperature=0.6,
        num_trials=3000,
        dtype=torch.float32,
        device=device,
    )
    batch["draft_tokens"][:] = bad_id
    tokens, num_tokens = run(backend, **batch)
    assert bool((num_tokens == 1).all())
    assert bool((tokens[:, 1] == -1).all())
    # The plain target (token 5 included), not a residual that would exclude a draft.
    assert_distribution(tokens[:, 0], target_probs(target, 0.6, torch.float32), f"{backend} placeholder {bad_id}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", ["standard", "block", "synthetic"])
@pytest.mark.parametrize("with_draft_logits", [False, True])
def test_placeholder_blocks_later_drafts(backend, method, with_draft_logits, device):
    target = _peaked_row(1)
    batch = repeated_trials(
        target,
        target + 0.1 if with_draft_logits else None,
        num_drafts=3,
        temperature=0.8,
        num_trials=400,
        dtype=torch.float32,
        device=device,
    )
    batch["draft_tokens"][:, 0] = 5
    batch["draft_tokens"][:, 1] = -1
    batch["draft_tokens"][:, 2] = 5  # valid, but after the placeholder: must never be accepted
    extra = {}
    if method == "synthetic":
        extra["synthetic_conditional_rates"] = torch.ones(3, device=device)
    tokens, num_tokens = run(backend, method=method, **batch, **extra)
    assert bool((num_tokens <= 2).all())
    assert float((num_tokens == 2).float().mean()) > 0.9
    assert bool(((tokens >= 0) & (tokens < VOCAB) | (tokens == -1)).all())
    assert bool((tokens[:, 2:] == -1).all())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", ["standard", "block", "synthetic"])
def test_greedy_placeholder_emits_the_target_argmax(backend, method, device):
    target = _peaked_row(2).expand(8, 4, VOCAB).contiguous().to(device)
    drafts = torch.full((8, 3), -1, device=device)
    drafts[:, 0] = int(target[0, 0].argmax())
    extra = {"synthetic_conditional_rates": torch.ones(3, device=device)} if method == "synthetic" else {}
    tokens, num_tokens = run(
        backend,
        target_logits=target,
        draft_tokens=drafts,
        method=method,
        temperature=torch.zeros(8, device=device),
        seed=torch.arange(8, device=device),
        **extra,
    )
    assert bool((num_tokens == 2).all())
    assert bool((tokens[:, :2] == 5).all()) and bool((tokens[:, 2:] == -1).all())


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("with_draft_logits", [False, True])
@pytest.mark.parametrize("trailing", [1, 2])
def test_block_trailing_placeholders_truncate_the_block(backend, with_draft_logits, trailing, device):
    target = _peaked_row(3)
    batch = repeated_trials(
        target,
        target + 0.4 if with_draft_logits else None,
        proposal_row=target,
        num_drafts=3,
        temperature=1.0,
        num_trials=3000,
        dtype=torch.float32,
        device=device,
    )
    batch["draft_tokens"][:, 3 - trailing :] = -1
    tokens, num_tokens = run(backend, method="block", **batch)
    assert bool((num_tokens <= 4 - trailing).all())
    probs = target_probs(target, 1.0, torch.float32)
    for position in range(4 - trailing):
        reached = num_tokens > position
        assert_distribution(tokens[reached, position], probs, f"{backend} block, position {position}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", ["standard", "block", "synthetic"])
@pytest.mark.parametrize("with_draft_logits", [False, True])
def test_rows_of_nan_or_minus_inf_emit_in_range_tokens(backend, method, with_draft_logits, device):
    generator = torch.Generator().manual_seed(4)
    target = torch.randn(6, 3, 40, generator=generator)
    target[0] = math.nan
    target[1] = -math.inf
    target[2, 1] = math.nan
    target[3, :, ::2] = -math.inf
    target[4, 0, 7] = math.inf
    draft = torch.randn(6, 2, 40, generator=generator)
    draft[5] = math.nan
    extra = {"synthetic_conditional_rates": torch.full((2,), 0.5, device=device)} if method == "synthetic" else {}
    tokens, num_tokens = run(
        backend,
        target_logits=target.to(device),
        draft_tokens=torch.randint(0, 40, (6, 2), generator=generator).to(device),
        draft_logits=draft.to(device) if with_draft_logits else None,
        method=method,
        temperature=torch.tensor([0.7, 1.0, 0.5, 0.9, 0.8, 0.0], device=device),
        seed=torch.arange(6, device=device),
        **extra,
    )
    emitted = tokens.gather(1, (num_tokens.long() - 1)[:, None])[:, 0]
    assert bool(((emitted >= 0) & (emitted < 40)).all()), emitted
    assert bool((num_tokens >= 1).all()) and bool((num_tokens <= 3).all())
    if not with_draft_logits and method != "synthetic":
        assert int(tokens[4, 0]) == 7 or int(num_tokens[4]) > 1  # +inf holds all the mass

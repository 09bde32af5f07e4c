"""Greedy verification (temperature 0): exact, on both backends."""

import math

import pytest
import torch
from kernel_cases import BACKENDS, greedy_expected, run


def _greedy_batch(num_requests, num_drafts, vocab, device, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    target = torch.randn(num_requests, num_drafts + 1, vocab, generator=generator)
    target = (target * 2).round()  # integers: many ties, which must resolve to the lowest index
    target = target.to(dtype)
    argmax = target.float().argmax(dim=-1)[:, :num_drafts]
    noise = torch.randint(0, vocab, (num_requests, num_drafts), generator=generator)
    follow = torch.rand(num_requests, num_drafts, generator=generator) < 0.7
    drafts = torch.where(follow, argmax, noise)
    return target.to(device), drafts.to(device)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", ["standard", "block"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_greedy_matches_the_loop_rule_exactly(backend, method, dtype, device):
    target, drafts = _greedy_batch(40, 4, 37, device, dtype)
    tokens, num_tokens = run(
        backend,
        target_logits=target,
        draft_tokens=drafts,
        method=method,
        temperature=torch.zeros(40, device=device),
        seed=torch.arange(40, device=device),
    )
    expected_tokens, expected_counts = greedy_expected(target, drafts)
    assert torch.equal(num_tokens.cpu(), expected_counts)
    assert torch.equal(tokens.cpu(), expected_tokens)


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_across_vocabulary_tiles_takes_the_first_maximum(backend, device):
    # V = 300 with 64-token tiles: 5 tiles, the last one partial; ties span tiles.
    target, drafts = _greedy_batch(24, 3, 300, device, seed=1)
    target[:4] = 0.0  # all equal: the argmax is token 0
    target[4:8, :, 250] = 99.0
    target[4:8, :, 70] = 99.0  # tie across tiles: 70 wins
    tokens, num_tokens = run(
        backend,
        tile_size=64,
        target_logits=target,
        draft_tokens=drafts,
        temperature=torch.zeros(24, device=device),
        seed=torch.arange(24, device=device),
    )
    expected_tokens, expected_counts = greedy_expected(target, drafts)
    assert torch.equal(num_tokens.cpu(), expected_counts)
    assert torch.equal(tokens.cpu(), expected_tokens)


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_requests_in_a_mixed_batch_are_exact(backend, device):
    target, drafts = _greedy_batch(32, 3, 29, device, seed=2)
    temperature = torch.tensor([0.0, 0.7, 1.0, 0.0] * 8, device=device)
    draft_logits = target[:, :3] + torch.randn(32, 3, 29, generator=torch.Generator().manual_seed(3)).to(device)
    for logits in (None, draft_logits):
        tokens, num_tokens = run(
            backend,
            target_logits=target,
            draft_tokens=drafts,
            draft_logits=logits,
            temperature=temperature,
            seed=torch.arange(32, device=device),
            method="block",
        )
        greedy = (temperature == 0).cpu()
        expected_tokens, expected_counts = greedy_expected(target, drafts)
        assert torch.equal(num_tokens.cpu()[greedy], expected_counts[greedy])
        assert torch.equal(tokens.cpu()[greedy], expected_tokens[greedy])


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_rows_of_nan_or_minus_inf_emit_in_range_tokens(backend, device):
    target, drafts = _greedy_batch(6, 2, 40, device, seed=4)
    target[0] = math.nan
    target[1] = -math.inf
    target[2, 0] = math.nan
    target[2, 0, 17] = 5.0  # NaNs are ignored: 17 is the argmax
    target[3, 1, 9] = math.inf
    tokens, num_tokens = run(
        backend,
        target_logits=target,
        draft_tokens=drafts,
        temperature=torch.zeros(6, device=device),
        seed=torch.arange(6, device=device),
    )
    expected_tokens, expected_counts = greedy_expected(target, drafts)
    assert torch.equal(tokens.cpu(), expected_tokens)
    assert torch.equal(num_tokens.cpu(), expected_counts)
    assert int(tokens[2, 0]) == 17 or int(drafts[2, 0]) == 17


# Triton's interpreter computes a tile max with numpy's nanmax, which warns on a tile of NaN only.
@pytest.mark.filterwarnings("ignore:All-NaN slice encountered")
@pytest.mark.parametrize("fused", [False, True])
def test_greedy_tokens_from_tile_argmaxes_match_the_re_read(fused, device):
    # A fused launch takes each tile's first argmax from pass A instead of re-reading the tile:
    # ties inside and across tiles, NaN, -inf and +inf must give the loop rule's tokens either way.
    target, drafts = _greedy_batch(10, 3, 300, device, seed=5)
    target[0] = 0.0
    target[1, :, 250] = 99.0
    target[1, :, 70] = 99.0
    target[2] = math.nan
    target[3] = -math.inf
    target[4, 0] = math.nan
    target[4, 0, 130] = 5.0
    target[5, 1, 9] = math.inf
    target[6, :, 64:128] = math.nan  # a whole tile of NaN beside finite tiles
    target[7, :, :128] = -math.inf
    tokens, num_tokens = run(
        "triton",
        tile_size=64,
        fused=fused,
        target_logits=target,
        draft_tokens=drafts,
        temperature=torch.zeros(10, device=device),
        seed=torch.arange(10, device=device),
    )
    expected_tokens, expected_counts = greedy_expected(target, drafts)
    assert torch.equal(tokens.cpu(), expected_tokens)
    assert torch.equal(num_tokens.cpu(), expected_counts)

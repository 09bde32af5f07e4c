"""A request's tokens depend on its own inputs and seed only: not on batch size, order or index."""

import pytest
import torch
from kernel_cases import BACKENDS, run


def _mixed_batch(device, num_requests=24, num_drafts=4, vocab=45, seed=0):
    generator = torch.Generator().manual_seed(seed)
    target = torch.randn(num_requests, num_drafts + 1, vocab, generator=generator) * 2
    draft = target[:, :num_drafts] + torch.randn(num_requests, num_drafts, vocab, generator=generator)
    drafts = torch.multinomial(torch.softmax(draft.view(-1, vocab), -1), 1, generator=generator).view(num_requests, -1)
    ragged = torch.randint(0, num_drafts + 1, (num_requests,), generator=generator)
    drafts[torch.arange(num_drafts)[None, :] >= ragged[:, None]] = -1  # ragged K as -1 padding
    temperature = torch.tensor([0.0, 0.5, 1.0, 1.3])[torch.arange(num_requests) % 4]
    return dict(
        target_logits=target.to(device),
        draft_tokens=drafts.to(device),
        draft_logits=draft.to(device),
        temperature=temperature.to(device),
        seed=(torch.arange(num_requests) * 7919 + 3).to(device),
    )


def _take(batch, index):
    return {name: value[index] for name, value in batch.items()}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", ["standard", "block", "synthetic"])
@pytest.mark.parametrize("with_draft_logits", [False, True])
def test_tokens_do_not_depend_on_batch_composition(backend, method, with_draft_logits, device):
    batch = _mixed_batch(device)
    if not with_draft_logits:
        del batch["draft_logits"]
    extra = {}
    if method == "synthetic":
        extra["synthetic_conditional_rates"] = torch.tensor([0.8, 0.7, 0.6, 0.5], device=device)
    full_tokens, full_counts = run(backend, method=method, **batch, **extra)
    permutation = torch.randperm(24, generator=torch.Generator().manual_seed(1)).to(device)
    tokens, counts = run(backend, method=method, **_take(batch, permutation), **extra)
    assert torch.equal(tokens, full_tokens[permutation]) and torch.equal(counts, full_counts[permutation])
    for chunk in (slice(0, 1), slice(3, 10), slice(10, 24)):
        tokens, counts = run(backend, method=method, **_take(batch, chunk), **extra)
        assert torch.equal(tokens, full_tokens[chunk]) and torch.equal(counts, full_counts[chunk])


@pytest.mark.parametrize("backend", BACKENDS)
def test_padded_rows_and_strided_logits_give_the_same_tokens(backend, device):
    batch = _mixed_batch(device, vocab=57)
    padded = torch.full((24, 5, 64), float("nan"), device=device)
    padded[:, :, :57] = batch["target_logits"]
    strided = dict(batch, target_logits=padded[:, :, :57])  # row stride 64, not contiguous
    assert torch.equal(run(backend, **strided)[0], run(backend, **batch)[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_seed_same_tokens_and_different_seed_different_tokens(backend, device):
    batch = _mixed_batch(device, num_requests=64)
    batch["temperature"] = torch.ones(64, device=device)
    first = run(backend, **batch)[0]
    assert torch.equal(first, run(backend, **batch)[0])
    reseeded = dict(batch, seed=batch["seed"] + 1)
    assert not torch.equal(first, run(backend, **reseeded)[0])


@pytest.mark.parametrize("method", ["standard", "block", "synthetic"])
@pytest.mark.parametrize("with_draft_logits", [False, True])
@pytest.mark.parametrize(("vocab", "tile_size"), [(300, 64), (5000, None), (9000, 8192)])
def test_small_grid_and_separate_launches_give_the_same_tokens(method, with_draft_logits, vocab, tile_size, device):
    # The launcher runs small grids as one small-grid launch (each tile drawing in registers) and
    # others as separate launches (the chosen tile re-read, its race run in chunks): the paths
    # must agree bit for bit, or batch size would change tokens. V = 5000: the default tile of
    # 4096, a ragged last tile; V = 9000 at tiles of 8192: the re-read race takes two chunks.
    from spectune.kernels._contract import validate_inputs
    from spectune.kernels._launcher import launch, plan_for

    batch = _mixed_batch(device, num_requests=12 if vocab < 1000 else 8, vocab=vocab)
    rates = torch.tensor([0.8, 0.7, 0.6, 0.5], device=device) if method == "synthetic" else None
    inputs = validate_inputs(
        batch["target_logits"],
        batch["draft_tokens"],
        batch["draft_logits"] if with_draft_logits else None,
        batch["temperature"],
        batch["seed"],
        method,
        rates,
    )
    fused = launch(inputs, plan_for(inputs, tile=tile_size, small_grid=True))
    separate = launch(inputs, plan_for(inputs, tile=tile_size, small_grid=False))
    assert torch.equal(fused[0], separate[0]) and torch.equal(fused[1], separate[1])


@pytest.mark.parametrize("method", ["standard", "block"])
@pytest.mark.parametrize("with_draft_logits", [False, True])
@pytest.mark.parametrize(
    "knobs",
    [
        dict(bulk_copies=False, pass_a_tiles=1, stages=1),
        dict(bulk_copies=True, pass_a_tiles=1, stages=1),
        dict(bulk_copies=True, pass_a_tiles=3, stages=3),
        dict(bulk_copies=False, pass_a_tiles=4, stages=2),
        dict(bulk_copies=False, pass_a_tiles=1, pass_a_warps=8, decide_warps=2, small_grid=False),
        dict(bulk_copies=False, pass_a_tiles=1, small_grid=True),
        dict(bulk_copies=False, pass_a_tiles=1, small_grid=False, pass_a_registers=72),  # compiled only
        dict(bulk_copies=False, pass_a_tiles=4, small_grid=False, pass_a_registers=72, residual_tiles=1),
        dict(bulk_copies=False, pass_a_tiles=1, small_grid=False, residual_tiles=3),
    ],
)
def test_read_schedule_does_not_change_tokens(method, with_draft_logits, knobs, device):
    # Bulk copies or plain loads, tiles per program (5 tiles: 3 leaves a ragged last chunk), copies
    # in flight, warps, register caps and pass B's tiles per program only change how the logits are
    # read; the tokens must be bit-identical.
    from spectune.kernels._contract import validate_inputs
    from spectune.kernels._launcher import launch, plan_for

    batch = _mixed_batch(device, num_requests=6, vocab=300)
    inputs = validate_inputs(
        batch["target_logits"],
        batch["draft_tokens"],
        batch["draft_logits"] if with_draft_logits else None,
        batch["temperature"],
        batch["seed"],
        method,
        None,
    )
    baseline = launch(inputs, plan_for(inputs, tile=64, bulk_copies=False, pass_a_tiles=1, stages=1))
    varied = launch(inputs, plan_for(inputs, tile=64, **knobs))
    assert torch.equal(baseline[0], varied[0]) and torch.equal(baseline[1], varied[1])


def test_bulk_copies_only_where_a_descriptor_can_address_the_logits():
    from spectune.kernels._launcher import _bulk_copyable

    assert _bulk_copyable(torch.zeros(2, 3, 300))  # 1200-byte rows
    assert not _bulk_copyable(torch.zeros(2, 3, 301))  # 1204-byte rows
    assert not _bulk_copyable(torch.zeros(2, 3, 300, dtype=torch.bfloat16))  # 600-byte rows
    assert _bulk_copyable(torch.zeros(2, 3, 304, dtype=torch.bfloat16))
    assert not _bulk_copyable(torch.zeros(2, 3, 304)[..., 1:301])  # base 4 bytes past an aligned one


@pytest.mark.parametrize("with_draft_logits", [False, True])
def test_small_grid_hands_its_counters_back_at_zero(with_draft_logits, device):
    # The small-grid kernel takes its tickets (and barrier arrivals) from a persistent per-device
    # ring with no memset: every call must leave them at zero, whatever its shape, or the next call
    # that reuses the slice would elect its decider early.
    from spectune.kernels import _launcher
    from spectune.kernels._contract import validate_inputs

    batch = _mixed_batch(device, num_requests=5, vocab=300)
    draft_logits = batch["draft_logits"] if with_draft_logits else None
    first = None
    for num_requests, block_requests in ((5, 1), (3, 2), (5, 1)):
        inputs = validate_inputs(
            batch["target_logits"][:num_requests],
            batch["draft_tokens"][:num_requests],
            draft_logits if draft_logits is None else draft_logits[:num_requests],
            batch["temperature"][:num_requests],
            batch["seed"][:num_requests],
            "block",
            None,
        )
        result = _launcher.launch(
            inputs, _launcher.plan_for(inputs, tile=64, small_grid=True, block_requests=block_requests)
        )
        first = first or result
    assert torch.equal(result[0], first[0]) and torch.equal(result[1], first[1])
    key = torch.device(device) if device == "cpu" else torch.device("cuda", torch.cuda.current_device())
    ring = _launcher._counter_rings[key].view(-1, 4)
    assert int(ring[:, :2].abs().sum()) == 0, "a ticket or arrival count was left non-zero"


def test_small_grid_barrier_and_two_launches_give_the_same_tokens(device):
    # With draft logits the small-grid kernel waits at a grid barrier (compiled) or is launched
    # twice around it (the interpreter): the same statistics, residuals and tokens either way.
    if device == "cpu":
        pytest.skip("the interpreter runs one program at a time: no grid barrier can open")
    from spectune.kernels._contract import validate_inputs
    from spectune.kernels._launcher import launch, plan_for

    batch = _mixed_batch(device, num_requests=4, vocab=300)
    for method in ("standard", "block", "synthetic"):
        rates = torch.tensor([0.8, 0.7, 0.6, 0.5], device=device) if method == "synthetic" else None
        inputs = validate_inputs(
            batch["target_logits"],
            batch["draft_tokens"],
            batch["draft_logits"],
            batch["temperature"],
            batch["seed"],
            method,
            rates,
        )
        with_barrier = launch(inputs, plan_for(inputs, tile=64, small_grid=True, barrier=True))
        around = launch(inputs, plan_for(inputs, tile=64, small_grid=True, barrier=False))
        assert torch.equal(with_barrier[0], around[0]) and torch.equal(with_barrier[1], around[1]), method

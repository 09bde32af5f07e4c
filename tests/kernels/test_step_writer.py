"""The step writer (CUDA's counter-based draws, one Triton kernel): its kernel equals its numpy twin,
and its draws are uniform and independent."""

import numpy as np
import torch

from spectune.kernels import MEMBER_FIELDS, ROW_FIELDS, host_step, kernel_seeds, seed_bases, write_step
from spectune.simulator._kernel_call import step_tables
from spectune.workload import LogitSynthesizer

_VOCAB = 64


def _synthesizer(rates, draft_sample_method, device="cpu", bank_rows=32):
    return LogitSynthesizer(
        rates,
        [0.0, 0.7],
        vocab_size=_VOCAB,
        draft_sample_method=draft_sample_method,
        device=device,
        bank_rows=bank_rows,
        draft_samples_per_row=4,
    )


def _outputs(rows, num_drafts, device):
    """The step writer's outputs, zeroed: target rows, draft rows, tokens, temperature, seeds."""
    return (
        torch.zeros((rows, num_drafts + 1), dtype=torch.int64, device=device),
        torch.zeros((rows, num_drafts), dtype=torch.int64, device=device),
        torch.zeros((rows, num_drafts), dtype=torch.int64, device=device),
        torch.zeros(rows, dtype=torch.float32, device=device),
        torch.zeros(rows, dtype=torch.int64, device=device),
    )


def _offset(tensor, base):
    return (tensor.data_ptr() - base.data_ptr()) // tensor.element_size()


def test_the_kernel_writes_its_numpy_twins_step(device):
    """Three members: one at k = 2 of the engine's K = 4 over three requests of a five-row slot, one at
    K over four of four, one that never verified (k = 0: placeholders, bank row 0). Two synthesizers,
    their tables at offsets of either sign from the bases."""
    first = _synthesizer([0.8, 0.6, 0.5], "probabilistic", device)
    second = _synthesizer([0.4, 0.3, 0.3, 0.2], "probabilistic", device)
    num_drafts, slots = 4, [5, 4, 3]
    total, rng = sum(slots), np.random.default_rng(3)
    request_seeds = rng.integers(0, 2**62, size=20, dtype=np.int64)
    temperature_index = rng.integers(0, 2, size=20)
    requests = np.array([3, 9, 4, 0, 0, 11, 2, 17, 5, 0, 0, 0])  # the rows' requests (0: stale or never staged)
    steps_done = rng.integers(0, 10**5, size=total)
    in_batch = np.array([1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0])
    float_base, int_base = second.banks()[0], second.draw_tables()[0]
    fields = np.zeros((len(MEMBER_FIELDS), 3), dtype=np.int64)
    for member, (synthesizer, k) in enumerate([(first, 2), (second, 4)]):
        target, draft, _ = synthesizer.banks()
        tables = step_tables(synthesizer)
        fields[:, member] = [
            k,
            tables.bank_rows,
            _offset(tables.slot_of, int_base),
            tables.slot_of.shape[1],
            _offset(tables.token_bank, int_base),
            tables.token_bank.shape[1],
            _offset(target, float_base),
            _offset(draft, float_base),
            _offset(tables.row_temperature, float_base),
        ]
    staged = torch.from_numpy(np.concatenate([requests, steps_done, in_batch, fields.reshape(-1)])).to(device)
    assert staged.numel() == len(ROW_FIELDS) * total + len(MEMBER_FIELDS) * 3
    out = _outputs(total, num_drafts, device)
    row_member = torch.tensor([0] * 5 + [1] * 4 + [2] * 3, device=device)
    bases = torch.from_numpy(seed_bases(request_seeds)).to(device)
    index = torch.from_numpy(temperature_index).to(device)
    write_step(staged, total, row_member, bases, index, float_base, int_base, out, _VOCAB)
    target_rows, draft_rows, tokens, temperature, seeds = (t.cpu().numpy() for t in out)

    expected_seeds = kernel_seeds(request_seeds[requests], steps_done)
    assert np.array_equal(seeds, expected_seeds)
    for member, (synthesizer, k, rows) in enumerate([(first, 2, slice(0, 5)), (second, 4, slice(5, 9))]):
        bank, step_tokens, step_temperature = host_step(
            expected_seeds[rows], temperature_index[requests[rows]], k, num_drafts, step_tables(synthesizer)
        )
        target_offset, draft_offset = fields[6, member], fields[7, member]
        expected_rows = bank * _VOCAB * in_batch[rows, None]
        assert np.array_equal(target_rows[rows], expected_rows + target_offset)
        assert np.array_equal(draft_rows[rows], expected_rows[:, :num_drafts] + draft_offset)
        batch = in_batch[rows] == 1  # rows past the batch: greedy, placeholder drafts (the kernels' least work)
        assert np.array_equal(tokens[rows][batch], step_tokens[batch]) and (tokens[rows][~batch] == -1).all()
        assert np.array_equal(temperature[rows][batch], step_temperature[batch])
        assert (temperature[rows][~batch] == 0).all()
        assert (step_tokens[:, k:] == -1).all() and (step_tokens[:, :k] >= 0).all()
        assert (bank[:, k:] == bank[:, k : k + 1]).all()  # the bonus row repeats past k
        assert len(np.unique(bank[:, :k])) > k  # drawn, not constant
    assert set(np.unique(temperature[:9])) == {0.0, np.float32(0.7)}
    assert (target_rows[9:] == 0).all() and (draft_rows[9:] == 0).all() and (tokens[9:] == -1).all()


def test_draws_are_uniform_and_independent_across_positions_and_steps():
    """Bank rows uniform over a slot's rows at every position (chi-square, 31 degrees of freedom: a
    draw reusing a word, or a modulo of a biased word, fails it), token columns uniform over the
    samples, no pair of positions or of consecutive steps agreeing more than chance."""
    synthesizer = _synthesizer([0.5, 0.5, 0.5, 0.5], "probabilistic")
    tables, num_requests = step_tables(synthesizer), 20_000
    request_seeds = np.random.default_rng(11).integers(0, 2**62, size=num_requests, dtype=np.int64)
    temperature_index = np.zeros(num_requests, dtype=np.int64)
    steps = [
        host_step(kernel_seeds(request_seeds, np.full(num_requests, step)), temperature_index, 4, 4, tables)
        for step in (7, 8)
    ]
    rows, tokens, _ = steps[0]
    slot = tables.slot_of.numpy()[0]
    picks = rows - np.append(slot, slot[-1])[None, :] * tables.bank_rows
    expected = num_requests / tables.bank_rows
    for position in range(4):
        counts = np.bincount(picks[:, position], minlength=tables.bank_rows)
        assert ((counts - expected) ** 2 / expected).sum() < 70  # p ~ 1e-4 at 31 degrees of freedom
    for a in range(4):
        for b in range(a + 1, 4):
            assert abs((picks[:, a] == picks[:, b]).mean() - 1 / 32) < 0.006
    assert abs((steps[0][0][:, 0] == steps[1][0][:, 0]).mean() - 1 / 32) < 0.006
    # a token bank whose token is its column: the tokens drawn are the columns
    numbered = tables._replace(token_bank=torch.arange(4).repeat(tables.token_bank.shape[0], 1))
    columns = host_step(kernel_seeds(request_seeds, np.full(num_requests, 7)), temperature_index, 4, 4, numbered)[1]
    for position in range(4):
        counts = np.bincount(columns[:, position], minlength=4)
        assert ((counts - num_requests / 4) ** 2 / (num_requests / 4)).sum() < 21  # p ~ 1e-4 at 3 degrees
    assert abs((columns[:, 0] == columns[:, 1]).mean() - 1 / 4) < 0.015


def test_compile_only_writes_nothing(device):
    """``compile_only`` (``spectune warm-up``) compiles the kernel (nothing under the interpreter) and
    launches none: the outputs keep what they held, where a launch writes placeholders (k = 0)."""
    rows, num_drafts = 16, 2
    staged = torch.zeros(len(ROW_FIELDS) * rows + len(MEMBER_FIELDS), dtype=torch.int64, device=device)
    indices = torch.zeros(rows, dtype=torch.int64, device=device)
    floats = torch.zeros(1, dtype=torch.float32, device=device)

    def step(compile_only):
        out = _outputs(rows, num_drafts, device)
        write_step(staged, rows, indices, indices, indices, floats, indices, out, _VOCAB, compile_only=compile_only)
        return out[2]

    assert bool((step(compile_only=True) == 0).all())
    assert bool((step(compile_only=False) == -1).all())

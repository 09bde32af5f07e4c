"""A row table (``launch(..., rows=)``) reads each logit row where it lies: the tokens equal those of
the same rows gathered into [R, K+1, V] tensors, on every launch path."""

import pytest
import torch

from spectune.kernels._contract import validate_inputs
from spectune.kernels._launcher import RowTable, launch, plan_for


def _banks(device, num_requests=10, num_drafts=3, vocab=300, bank_rows=17, seed=0):
    """Two banks in separate allocations, random rows of them per request, and those rows gathered."""
    generator = torch.Generator().manual_seed(seed)
    target_bank = (torch.randn(bank_rows, vocab, generator=generator) * 2).to(device)
    draft_bank = (target_bank.cpu() + torch.randn(bank_rows, vocab, generator=generator)).to(device)
    rows = torch.randint(0, bank_rows, (num_requests, num_drafts + 1), generator=generator)
    tokens = draft_bank.cpu()[rows[:, :num_drafts].cpu()].argmax(-1)  # likely drafts: acceptances happen
    tokens[0] = torch.randint(0, vocab, (num_drafts,), generator=generator)
    tokens[1, 1:] = -1  # a placeholder
    temperature = torch.tensor([0.0, 0.7, 1.0, 1.3])[torch.arange(num_requests) % 4]
    return dict(
        target_bank=target_bank,
        draft_bank=draft_bank,
        rows=rows.to(device),
        draft_tokens=tokens.to(device),
        temperature=temperature.to(device),
        seed=(torch.arange(num_requests) * 7919 + 3).to(device),
    )


@pytest.mark.parametrize("method", ["standard", "block", "synthetic"])
@pytest.mark.parametrize("with_draft_logits", [False, True])
@pytest.mark.parametrize("small_grid", [False, True])
def test_row_table_gives_the_tokens_of_gathered_rows(method, with_draft_logits, small_grid, device):
    case = _banks(device)
    target_bank, draft_bank, rows = case["target_bank"], case["draft_bank"], case["rows"]
    num_requests, num_rows = rows.shape
    num_drafts, vocab = num_rows - 1, target_bank.shape[1]
    rates = torch.tensor([0.8, 0.7, 0.6], device=device) if method == "synthetic" else None
    gathered = validate_inputs(
        target_bank[rows],
        case["draft_tokens"],
        draft_bank[rows[:, :num_drafts]] if with_draft_logits else None,
        case["temperature"],
        case["seed"],
        method,
        rates,
    )
    expected = launch(gathered, plan_for(gathered, small_grid=small_grid))

    # Offsets from the middle row of the target bank (so some are negative) and from the draft bank's
    # first element; the logits passed carry only the shape (zero strides over one row).
    middle = target_bank.shape[0] // 2
    carrier = target_bank[middle].as_strided((num_requests, num_rows, vocab), (0, 0, 1))
    draft_carrier = draft_bank[0].as_strided((num_requests, num_drafts, vocab), (0, 0, 1))
    table = RowTable(
        ((rows - middle) * vocab).contiguous(),
        (rows[:, :num_drafts] * vocab).contiguous() if with_draft_logits else None,
    )
    banked = validate_inputs(
        carrier,
        case["draft_tokens"],
        draft_carrier if with_draft_logits else None,
        case["temperature"],
        case["seed"],
        method,
        rates,
    )
    tokens, counts = launch(banked, plan_for(banked, aligned=False, small_grid=small_grid), rows=table)
    assert (table.target < 0).any()
    assert torch.equal(tokens, expected[0]) and torch.equal(counts, expected[1])
    assert (counts < num_rows).any() and (counts > 1).any()  # rejections and acceptances both exercised


def test_row_table_that_does_not_fit_the_call_is_refused(device):
    case = _banks(device, num_requests=4, num_drafts=2, vocab=50)
    target_bank, rows = case["target_bank"], case["rows"]
    carrier = target_bank[0].as_strided((4, 3, 50), (0, 0, 1))
    inputs = validate_inputs(
        carrier, case["draft_tokens"], carrier[:, :2], case["temperature"], case["seed"], "standard", None
    )
    with pytest.raises(ValueError, match=r"rows.target: must be a contiguous int64 tensor \[4, 3\].*got torch.int32"):
        launch(inputs, rows=RowTable((rows * 50).to(torch.int32), (rows[:, :2] * 50).contiguous()))
    with pytest.raises(ValueError, match="rows.draft: draft_logits were given, so draft rows are required, got None"):
        launch(inputs, rows=RowTable((rows * 50).contiguous(), None))

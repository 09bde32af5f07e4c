"""Shared helpers for the kernel tests: the two backends, batch builders and the chi-square check."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from spectune.kernels._contract import validate_inputs
from spectune.kernels._launcher import launch, plan_for
from spectune.kernels.reference import rejection_sample_from_inputs

# "small_grid": the Triton kernels as one launch of the small-grid kernel, which the launcher picks
# for small grids on a GPU (and never by itself under the interpreter).
BACKENDS = ("triton", "small_grid", "reference")
Result = tuple[torch.Tensor, torch.Tensor]


def run(backend: str, *, tile_size: int | None = None, fused: bool | None = None, **arguments: object) -> Result:
    """Call ``rejection_sample`` on one backend (keyword arguments as the public contract names them;
    ``fused`` picks the Triton launch as one small-grid kernel or not, default as the plan says)."""
    inputs = validate_inputs(
        arguments["target_logits"],
        arguments["draft_tokens"],
        arguments.get("draft_logits"),
        arguments.get("temperature"),
        arguments.get("seed"),
        arguments.get("method", "standard"),
        arguments.get("synthetic_conditional_rates"),
    )
    if backend == "triton":
        overrides = {} if fused is None else {"small_grid": fused}
        return launch(inputs, plan_for(inputs, tile=tile_size, **overrides))
    if backend == "small_grid":
        return launch(inputs, plan_for(inputs, tile=tile_size, small_grid=True))
    from spectune.kernels._plan import tile_size_for

    return rejection_sample_from_inputs(inputs, tile_size=tile_size or tile_size_for(inputs.vocab_size))


def backend_runner(backend: str) -> Callable[..., Result]:
    return lambda **arguments: run(backend, **arguments)


def repeated_trials(
    target_row: torch.Tensor,
    draft_row: torch.Tensor | None,
    *,
    num_drafts: int,
    temperature: float,
    num_trials: int,
    dtype: torch.dtype,
    device: str,
    proposal_row: torch.Tensor | None = None,
    seed_offset: int = 0,
) -> dict[str, torch.Tensor]:
    """The same target row at every position of every trial; drafts drawn from q.

    With ``draft_row`` (draft logits mode) the drafts are drawn from softmax(draft / T) of the
    dtype-rounded draft logits the kernel sees; without it (one-hot drafts) from
    softmax(proposal_row / 0.3) -- mostly the proposal's top token, as greedy drafting gives; any
    proposal is valid for one-hot verification.
    """
    vocab = target_row.shape[0]
    generator = torch.Generator().manual_seed(1234 + seed_offset)
    target = target_row.to(dtype).expand(num_trials, num_drafts + 1, vocab).contiguous()
    source = draft_row if draft_row is not None else proposal_row
    if source is None:
        source = target_row
    proposal_temperature = temperature if draft_row is not None else 0.3
    proposal = torch.softmax(source.to(dtype).double() / proposal_temperature, dim=-1)
    drafts = torch.zeros(0, dtype=torch.int64)
    if num_drafts > 0:
        drafts = torch.multinomial(proposal, num_trials * num_drafts, replacement=True, generator=generator)
    batch = dict(
        target_logits=target.to(device),
        draft_tokens=drafts.view(num_trials, num_drafts).to(device),
        temperature=torch.full((num_trials,), temperature, dtype=torch.float32, device=device),
        seed=torch.arange(num_trials, dtype=torch.int64, device=device) + 1000 * seed_offset,
    )
    if draft_row is not None:
        batch["draft_logits"] = draft_row.to(dtype).expand(num_trials, num_drafts, vocab).contiguous().to(device)
    return batch


def target_probs(target_row: torch.Tensor, temperature: float, dtype: torch.dtype) -> torch.Tensor:
    """float64 [V]: softmax of the dtype-rounded target row at the temperature."""
    return torch.softmax(target_row.to(dtype).double() / temperature, dim=-1)


def chi_square(samples: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    """Pearson chi-square of samples against probs, bins with expected < 5 merged into one."""
    counts = torch.bincount(samples.cpu(), minlength=probs.shape[0]).double()
    expected = probs.cpu() * samples.numel()
    sparse = expected < 5
    observed_bins = torch.cat([counts[~sparse], counts[sparse].sum().view(1)])
    expected_bins = torch.cat([expected[~sparse], expected[sparse].sum().view(1)])
    keep = expected_bins > 0
    if bool((observed_bins[~keep] > 0).any()):
        return math.inf, 1  # a sample where the distribution has no mass
    observed_bins, expected_bins = observed_bins[keep], expected_bins[keep]
    statistic = float(((observed_bins - expected_bins) ** 2 / expected_bins).sum())
    return statistic, max(int(keep.sum()) - 1, 1)


def assert_distribution(samples: torch.Tensor, probs: torch.Tensor, label: str) -> None:
    """chi2 < df + 10 sqrt(2 df) (about ten sigma), as vLLM's rejection-sampler tests require."""
    assert samples.numel() > 0, f"{label}: no samples"
    statistic, df = chi_square(samples, probs)
    threshold = df + 10 * math.sqrt(2 * df)
    assert statistic < threshold, (
        f"{label}: chi2 = {statistic:.1f} >= {threshold:.1f} (df = {df}, n = {samples.numel()})"
    )


def assert_every_position(tokens: torch.Tensor, num_tokens: torch.Tensor, probs: torch.Tensor, label: str) -> None:
    """Each emitted token, at every position, is distributed as the target."""
    for position in range(tokens.shape[1]):
        reached = num_tokens > position
        if int(reached.sum()) < 50:
            continue
        assert_distribution(tokens[reached, position], probs, f"{label}, position {position}")


def greedy_expected(target_logits: torch.Tensor, draft_tokens: torch.Tensor) -> Result:
    """The greedy rule written as a plain loop (independent of both backends)."""
    target = target_logits.float().cpu()
    target = torch.where(torch.isnan(target), -math.inf, target)
    num_requests, num_rows, vocab = target.shape
    tokens = torch.full((num_requests, num_rows), -1, dtype=torch.int64)
    counts = torch.zeros(num_requests, dtype=torch.int32)
    for r in range(num_requests):
        for k in range(num_rows):
            best = int(target[r, k].argmax())
            draft = int(draft_tokens[r, k]) if k < num_rows - 1 else -1
            if k < num_rows - 1 and 0 <= draft < vocab and draft == best:
                tokens[r, k] = draft
                continue
            tokens[r, k] = best
            counts[r] = k + 1
            break
    return tokens, counts

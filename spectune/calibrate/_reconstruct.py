"""Integer counts back from the rounded rates of a vLLM log line.

vLLM prints a window's per-position rates as ``count_i / num_drafts`` to 3 decimals and its mean
acceptance length as ``1 + accepted / num_drafts`` to 2 decimals, next to the exact accepted and
drafted token totals. So ``num_drafts`` is ``drafted / K`` when every draft had K tokens (checked
against the mean length), and otherwise the integer(s) the mean length and the rates allow. Each
per-position count is then the integer nearest ``rate * num_drafts`` within the rounding interval,
adjusted so that the counts add up to the exact accepted total, and kept non-increasing. The true
count lies in the same interval, which is what bounds the error these estimates carry.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ReconstructedCounts", "fit_position_counts", "reconstruct_window"]

_EPS = 1e-9
# Above this many candidate draft counts the mean length says too little to pin num_drafts down.
_MAX_CANDIDATES = 200_000


@dataclass(frozen=True)
class ReconstructedCounts:
    """One window's counts: ``num_drafts`` with its feasible range, per-position counts with bounds."""

    num_drafts: int
    num_drafts_bounds: tuple[int, int]
    accepted_per_position: tuple[int, ...]
    accepted_per_position_bounds: tuple[tuple[int, int], ...]
    exact_num_drafts: bool  # True when num_drafts = drafted / K (every draft had K tokens)


def _count_bounds(rate: float, half_step: float, num_drafts: int) -> tuple[int, int]:
    low = max(0, math.ceil((rate - half_step) * num_drafts - _EPS))
    high = min(num_drafts, math.floor((rate + half_step) * num_drafts + _EPS))
    return low, high


def fit_position_counts(
    rates: Sequence[float], half_step: float, num_drafts: int, num_accepted: int
) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]] | None:
    """Non-increasing integer counts with ``round(count_i / num_drafts) == rates[i]`` summing to ``num_accepted``.

    Returns (counts, bounds), the bounds tightened by the sum; None when no such counts exist.
    """
    bounds = [_count_bounds(rate, half_step, num_drafts) for rate in rates]
    if any(low > high for low, high in bounds):
        return None
    low_total = sum(low for low, _ in bounds)
    high_total = sum(high for _, high in bounds)
    if not low_total <= num_accepted <= high_total:
        return None
    # The sum pins each count further: it cannot leave the others outside their ranges.
    bounds = [
        (max(low, num_accepted - (high_total - high)), min(high, num_accepted - (low_total - low)))
        for low, high in bounds
    ]
    targets = [rate * num_drafts for rate in rates]
    counts = [min(max(round(t), low), high) for t, (low, high) in zip(targets, bounds, strict=True)]
    shortfall = num_accepted - sum(counts)
    while shortfall != 0:
        step = 1 if shortfall > 0 else -1
        movable = [i for i, (low, high) in enumerate(bounds) if (counts[i] < high if step > 0 else counts[i] > low)]
        best = max(movable, key=lambda i: step * (targets[i] - counts[i]))
        counts[best] += step
        shortfall -= step
    # Sorting keeps every count inside its range, since the ranges are ordered like the rates.
    counts.sort(reverse=True)
    if any(not low <= c <= high for c, (low, high) in zip(counts, bounds, strict=True)):
        return None
    return tuple(counts), tuple(bounds)


def _num_drafts_candidates(
    num_accepted: int, num_draft_tokens: int, num_positions: int, mean_length: float | None, length_half_step: float
) -> range:
    fewest = math.ceil(num_draft_tokens / num_positions)  # no draft has more than K tokens
    most = num_draft_tokens  # nor fewer than one
    if mean_length is not None and num_accepted > 0:
        most = min(most, math.floor(num_accepted / max(mean_length - length_half_step - 1.0, _EPS) + _EPS))
        fewest = max(fewest, math.ceil(num_accepted / (mean_length + length_half_step - 1.0) - _EPS))
    return range(fewest, most + 1)


def reconstruct_window(
    *,
    num_accepted: int,
    num_draft_tokens: int,
    rates: Sequence[float],
    rate_half_step: float,
    mean_length: float | None,
    length_half_step: float,
) -> ReconstructedCounts | None:
    """Counts of one vLLM log window, or None when no integer counts reproduce what was printed."""
    num_positions = len(rates)
    if num_draft_tokens % num_positions == 0:
        exact = num_draft_tokens // num_positions
        consistent_length = (
            mean_length is None
            or exact == 0
            or abs(1.0 + num_accepted / exact - mean_length) <= length_half_step + _EPS
        )
        fitted = fit_position_counts(rates, rate_half_step, exact, num_accepted) if consistent_length else None
        if fitted is not None:
            return ReconstructedCounts(exact, (exact, exact), fitted[0], fitted[1], exact_num_drafts=True)
    candidates = _num_drafts_candidates(num_accepted, num_draft_tokens, num_positions, mean_length, length_half_step)
    if len(candidates) > _MAX_CANDIDATES or len(candidates) == 0:
        return None
    feasible = {
        n: fit for n in candidates if n > 0 and (fit := fit_position_counts(rates, rate_half_step, n, num_accepted))
    }
    if not feasible:
        return None
    center = num_accepted / (mean_length - 1.0) if mean_length is not None and mean_length > 1.0 else candidates[0]
    chosen = min(feasible, key=lambda n: (abs(n - center), n))
    low_n, high_n = min(feasible), max(feasible)
    bounds = tuple(
        (min(a[0], b[0], c[0]), max(a[1], b[1], c[1]))
        for a, b, c in zip(feasible[low_n][1], feasible[high_n][1], feasible[chosen][1], strict=True)
    )
    return ReconstructedCounts(chosen, (low_n, high_n), feasible[chosen][0], bounds, exact_num_drafts=False)

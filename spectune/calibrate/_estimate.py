"""Pooled acceptance estimates from windows: rates from summed counts, with both kinds of uncertainty.

Counts, not rates, are summed across windows (a window with more drafts weighs more). The standard
error of each ratio is the larger of two estimates: the binomial one (every verification step
independent) and the between-window one (the ratio estimator's linearised variance over windows,
which also sees how acceptance drifts between windows and requests). Steps of one request are
correlated, so the binomial error alone would be too small; with one window it is all there is.
Rounding errors are worst-case bounds from the intervals that the true counts are known to lie in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spectune.calibrate._windows import CountWindow, LengthWindow
from spectune.config import decay_to_conditional_rates, mean_rate_to_decay

__all__ = ["AcceptanceEstimate", "estimate_from_counts", "estimate_from_lengths"]


@dataclass(frozen=True)
class AcceptanceEstimate:
    """Pooled acceptance over some windows, per position i = 0..K-1 (fractions; lengths in tokens per step).

    ``per_position_measured`` is False when the source gave only the mean acceptance length; the
    conditional rates are then the base-rate/decay model's (vLLM's model for a mean rate) that
    reproduces that length at this K, and carry no per-position uncertainty. Counts are None where
    the source has none (SGLang). ``*_rounding_error`` are None when the counts are exact.
    """

    num_windows: int
    num_positions: int
    per_position_measured: bool
    conditional_rates: tuple[float, ...]
    mean_acceptance_length: float
    mean_acceptance_length_stderr: float | None
    mean_acceptance_length_rounding_error: float | None
    conditional_stderr: tuple[float, ...] | None = None
    conditional_rounding_error: tuple[float, ...] | None = None
    unconditional_rates: tuple[float, ...] | None = None
    unconditional_stderr: tuple[float, ...] | None = None
    unconditional_rounding_error: tuple[float, ...] | None = None
    num_drafts: int | None = None
    num_draft_tokens: int | None = None
    num_accepted_tokens: int | None = None
    accepted_per_position: tuple[int, ...] | None = None
    min_running: int | None = None
    max_running: int | None = None


def _ratio_stderr(numerators: Sequence[float], denominators: Sequence[float]) -> float | None:
    """Between-window standard error of sum(numerators) / sum(denominators); None with < 2 windows."""
    count = len(numerators)
    total = sum(denominators)
    if count < 2 or total <= 0:
        return None
    ratio = sum(numerators) / total
    spread = sum((y - ratio * x) ** 2 for y, x in zip(numerators, denominators, strict=True))
    return math.sqrt(count / (count - 1) * spread) / total


def _larger(binomial: float, between: float | None) -> float:
    return binomial if between is None else max(binomial, between)


def _running_range(windows: Sequence[CountWindow] | Sequence[LengthWindow]) -> tuple[int | None, int | None]:
    running = [w.num_running for w in windows if w.num_running is not None]
    return (min(running), max(running)) if running else (None, None)


def _assumed_conditional(mean_length: float, num_positions: int) -> tuple[float, ...]:
    """The base-rate/decay conditional rates that give ``mean_length`` at K = ``num_positions``."""
    mean_rate = min(max((mean_length - 1.0) / num_positions, 0.0), 1.0)
    base, decay = mean_rate_to_decay(mean_rate, num_positions)
    return tuple(decay_to_conditional_rates(base, decay, num_positions))


def estimate_from_counts(windows: Sequence[CountWindow], num_positions: int) -> AcceptanceEstimate:
    """Pool count windows that share K; per-position results only if every window has per-position counts."""
    num_drafts = sum(w.num_drafts for w in windows)
    accepted = sum(w.num_accepted_tokens for w in windows)
    drafted = sum(w.num_draft_tokens for w in windows)
    mean_accepted = accepted / num_drafts
    drafts_low = sum((w.num_drafts_bounds or (w.num_drafts, w.num_drafts))[0] for w in windows)
    drafts_high = sum((w.num_drafts_bounds or (w.num_drafts, w.num_drafts))[1] for w in windows)
    length_rounding = max(accepted / drafts_low - mean_accepted, mean_accepted - accepted / drafts_high)
    min_running, max_running = _running_range(windows)
    common: dict[str, Any] = {
        "num_windows": len(windows),
        "num_positions": num_positions,
        "mean_acceptance_length": 1.0 + mean_accepted,
        "mean_acceptance_length_rounding_error": length_rounding if drafts_low != drafts_high else None,
        "num_drafts": num_drafts,
        "num_draft_tokens": drafted,
        "num_accepted_tokens": accepted,
        "min_running": min_running,
        "max_running": max_running,
    }
    length_between = _ratio_stderr([w.num_accepted_tokens for w in windows], [w.num_drafts for w in windows])
    if any(w.accepted_per_position is None for w in windows):
        # Accepted drafts per step lie in [0, K]; m * (K - m) bounds their variance.
        bound = mean_accepted * (num_positions - mean_accepted)
        return AcceptanceEstimate(
            per_position_measured=False,
            conditional_rates=_assumed_conditional(1.0 + mean_accepted, num_positions),
            mean_acceptance_length_stderr=_larger(math.sqrt(max(bound, 0.0) / num_drafts), length_between),
            **common,
        )
    return _per_position_estimate(windows, num_positions, common, length_between, drafts_low, drafts_high)


def _per_position_estimate(
    windows: Sequence[CountWindow],
    num_positions: int,
    common: dict[str, Any],
    length_between: float | None,
    drafts_low: int,
    drafts_high: int,
) -> AcceptanceEstimate:
    num_drafts = common["num_drafts"]
    counts = [
        w.accepted_per_position for w in windows if w.accepted_per_position is not None
    ]  # all of them (see caller)
    per_position = [sum(count[i] for count in counts) for i in range(num_positions)]
    lows = [sum(_bounds(w, i)[0] for w in windows) for i in range(num_positions)]
    highs = [sum(_bounds(w, i)[1] for w in windows) for i in range(num_positions)]
    unconditional = [count / num_drafts for count in per_position]
    conditional, conditional_se, conditional_rounding, unconditional_se, unconditional_rounding = [], [], [], [], []
    for i in range(num_positions):
        before = per_position[i - 1] if i > 0 else num_drafts
        rate = per_position[i] / before if before > 0 else 0.0
        conditional.append(rate)
        column = [w.accepted_per_position[i] for w in windows]  # type: ignore[index]
        previous = [w.accepted_per_position[i - 1] if i > 0 else w.num_drafts for w in windows]  # type: ignore[index]
        binomial = math.sqrt(rate * (1.0 - rate) / before) if before > 0 else 0.5
        conditional_se.append(min(0.5, _larger(binomial, _ratio_stderr(column, previous))))
        u = unconditional[i]
        unconditional_se.append(
            _larger(math.sqrt(u * (1.0 - u) / num_drafts), _ratio_stderr(column, [w.num_drafts for w in windows]))
        )
        unconditional_rounding.append(max(u - lows[i] / drafts_high, highs[i] / drafts_low - u))
        low_before, high_before = (lows[i - 1], highs[i - 1]) if i > 0 else (drafts_low, drafts_high)
        low_rate = min(lows[i] / high_before, 1.0) if high_before > 0 else 0.0
        high_rate = min(highs[i] / low_before, 1.0) if low_before > 0 else 1.0
        conditional_rounding.append(max(rate - low_rate, high_rate - rate, 0.0))
    # Accepted drafts per step X: E[X] = sum a_i and E[X^2] = sum (2i + 1) a_i for unconditional a_i.
    mean_accepted = sum(unconditional)
    variance = sum((2 * i + 1) * a for i, a in enumerate(unconditional)) - mean_accepted**2
    exact = all(w.accepted_per_position_bounds is None for w in windows)
    return AcceptanceEstimate(
        per_position_measured=True,
        conditional_rates=tuple(conditional),
        conditional_stderr=tuple(conditional_se),
        conditional_rounding_error=None if exact else tuple(conditional_rounding),
        unconditional_rates=tuple(unconditional),
        unconditional_stderr=tuple(unconditional_se),
        unconditional_rounding_error=None if exact else tuple(max(e, 0.0) for e in unconditional_rounding),
        accepted_per_position=tuple(per_position),
        mean_acceptance_length_stderr=_larger(math.sqrt(max(variance, 0.0) / num_drafts), length_between),
        **common,
    )


def _bounds(window: CountWindow, position: int) -> tuple[int, int]:
    if window.accepted_per_position_bounds is not None:
        return window.accepted_per_position_bounds[position]
    count = window.accepted_per_position[position]  # type: ignore[index]
    return count, count


def estimate_from_lengths(windows: Sequence[LengthWindow], num_positions: int) -> AcceptanceEstimate:
    """Pool mean-length windows (weighted by their verification steps); rates from the assumed model."""
    total_weight = sum(w.weight for w in windows)
    mean_length = sum(w.weight * w.mean_acceptance_length for w in windows) / total_weight
    between = _ratio_stderr([w.weight * w.mean_acceptance_length for w in windows], [w.weight for w in windows])
    min_running, max_running = _running_range(windows)
    return AcceptanceEstimate(
        num_windows=len(windows),
        num_positions=num_positions,
        per_position_measured=False,
        conditional_rates=_assumed_conditional(mean_length, num_positions),
        mean_acceptance_length=mean_length,
        mean_acceptance_length_stderr=between,
        mean_acceptance_length_rounding_error=max(w.rounding for w in windows),
        min_running=min_running,
        max_running=max_running,
    )

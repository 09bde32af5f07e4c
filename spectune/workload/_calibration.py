"""Solving the family's knob for a requested acceptance rate, once per (rate, temperature class, mode).

The expected acceptance of a bank is the mean of its rows' exact acceptance probabilities (computed in
float64 from the float32 rows the kernel reads), a monotone function of the knob; a bracketed
regula falsi (Illinois variant) finds the knob where it equals the rate. All temperatures T > 0 share
one knob (the family is defined on the tempered distributions); T = 0 has its own (argmax agreement).
Results and the base noise they were solved on are memoised per process.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from spectune.workload._pair_family import (
    DraftSampleMethod,
    FamilyBase,
    expected_acceptance,
    family_base,
    pair_rows,
)

__all__ = [
    "BANK_ROWS",
    "BANK_SEED",
    "DRAFT_SAMPLES_PER_ROW",
    "KnobCalibration",
    "calibrate_knob",
    "clear_calibration_cache",
    "cached_family_base",
]

# A bank's defaults, the same wherever its rows are rebuilt (calibrated, synthesized, or read for their
# confidence): rows per (position, temperature), stratified draft samples per row, and the base seed.
BANK_ROWS = 512
DRAFT_SAMPLES_PER_ROW = 16
BANK_SEED = 0

# Rates are matched to 1e-4 when the bank allows it; T = 0 banks only reach multiples of 1/rows.
_RATE_TOLERANCE = 1e-4
_KNOB_TOLERANCE = 1e-6
_MAX_ITERATIONS = 80
_DRAFT_MODES: tuple[DraftSampleMethod, ...] = ("greedy", "probabilistic")


@dataclass(frozen=True)
class KnobCalibration:
    """The knob that reproduces ``rate`` under ``measured_with`` drafting, and what each mode gets there.

    ``expected_greedy`` / ``expected_probabilistic``: the bank's expected acceptance (fraction) at the
    knob with one-hot drafts and with sampled drafts; at T = 0 both are the argmax agreement.
    The measured mode's value differs from ``rate`` only when the rate is outside what the family
    reaches (below about 1/V), or by half the bank's granularity with one-hot drafts or at T = 0
    (1/rows: a row's argmax either agrees or not), or by 1e-4 otherwise.
    """

    rate: float
    knob: float
    greedy_rule: bool
    measured_with: DraftSampleMethod
    expected_greedy: float
    expected_probabilistic: float

    def expected(self, draft_sample_method: DraftSampleMethod) -> float:
        """Expected acceptance (fraction) at this knob under ``draft_sample_method``."""
        return self.expected_greedy if draft_sample_method == "greedy" else self.expected_probabilistic


def calibrate_knob(
    rate: float,
    *,
    temperature: float,
    measured_with: DraftSampleMethod,
    vocab_size: int,
    bank_rows: int = BANK_ROWS,
    draft_samples_per_row: int = DRAFT_SAMPLES_PER_ROW,
    bank_seed: int = BANK_SEED,
    device: str | torch.device = "cpu",
) -> KnobCalibration:
    """The knob at which the bank's expected acceptance under ``measured_with`` equals ``rate``.

    rate: conditional acceptance rate of one draft position (fraction in [0, 1]).
    temperature: of the requests (0 = greedy rule); every T > 0 shares one solution.
    measured_with: the drafting mode under which the rate was measured.
    """
    _check_arguments(rate, temperature, measured_with, vocab_size, bank_rows, draft_samples_per_row)
    greedy_rule = temperature == 0.0
    mode: DraftSampleMethod = "greedy" if greedy_rule else measured_with  # one solution at T = 0
    return _calibrate(
        float(rate),
        greedy_rule,
        mode,
        vocab_size,
        bank_rows,
        draft_samples_per_row,
        bank_seed,
        str(torch.device(device)),
    )


def clear_calibration_cache() -> None:
    """Forget memoised knobs and base noise (frees the memory the bases hold)."""
    _calibrate.cache_clear()
    cached_family_base.cache_clear()


@functools.lru_cache(maxsize=4)
def cached_family_base(vocab_size: int, num_rows: int, samples_per_row: int, seed: int, device: str) -> FamilyBase:
    """``family_base`` memoised per (V, rows, samples per row, seed, device)."""
    return family_base(vocab_size, num_rows, samples_per_row, seed=seed, device=torch.device(device))


@functools.lru_cache(maxsize=1024)
def _calibrate(
    rate: float,
    greedy_rule: bool,
    measured_with: DraftSampleMethod,
    vocab_size: int,
    bank_rows: int,
    samples_per_row: int,
    bank_seed: int,
    device: str,
) -> KnobCalibration:
    base = cached_family_base(vocab_size, bank_rows, samples_per_row, bank_seed, device)

    def bank_acceptance(knob: float, modes: tuple[DraftSampleMethod, ...]) -> list[float]:
        rows = pair_rows(base, knob)
        return [float(expected_acceptance(rows, greedy_rule=greedy_rule, draft_sample_method=m).mean()) for m in modes]

    # With one-hot drafts a row's acceptance jumps where the drafter's argmax changes, so the bank's
    # moves in steps of up to 1/rows: half a step is as close as it gets.
    one_hot = greedy_rule or measured_with == "greedy"
    tolerance = max(_RATE_TOLERANCE, 0.5 / bank_rows) if one_hot else _RATE_TOLERANCE
    knob = _solve_increasing(lambda knob: bank_acceptance(knob, (measured_with,))[0] - rate, tolerance)
    greedy, probabilistic = bank_acceptance(knob, _DRAFT_MODES)
    return KnobCalibration(
        rate=rate,
        knob=knob,
        greedy_rule=greedy_rule,
        measured_with=measured_with,
        expected_greedy=greedy,
        expected_probabilistic=probabilistic,
    )


def _solve_increasing(excess: Callable[[float], float], tolerance: float) -> float:
    """A root of a non-decreasing ``excess`` on [0, 1]; an end point when the root lies outside."""
    low, high = 0.0, 1.0
    excess_low, excess_high = excess(low), excess(high)
    if excess_low >= 0.0:
        return low
    if excess_high <= 0.0:
        return high
    best, best_excess = (low, excess_low) if -excess_low < excess_high else (high, excess_high)
    last_side = 0
    for _ in range(_MAX_ITERATIONS):
        if high - low <= _KNOB_TOLERANCE:
            break
        guess = high - excess_high * (high - low) / (excess_high - excess_low)
        if not low < guess < high:
            guess = 0.5 * (low + high)
        value = excess(guess)
        if abs(value) < abs(best_excess):
            best, best_excess = guess, value
        if abs(value) <= tolerance:
            break
        # Illinois: halve the stale end's value when the same end moves twice, so the bracket shrinks.
        if value > 0.0:
            high, excess_high = guess, value
            if last_side > 0:
                excess_low *= 0.5
            last_side = 1
        else:
            low, excess_low = guess, value
            if last_side < 0:
                excess_high *= 0.5
            last_side = -1
    return best


def _check_arguments(
    rate: float, temperature: float, measured_with: str, vocab_size: int, bank_rows: int, samples_per_row: int
) -> None:
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0.0 <= rate <= 1.0 or math.isnan(rate):
        raise ValueError(f"rate must be a number in [0, 1], got {rate!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not 0.0 <= temperature < math.inf:
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if measured_with not in _DRAFT_MODES:
        raise ValueError(f"measured_with must be one of greedy, probabilistic, got {measured_with!r}")
    for name, value, low in (
        ("vocab_size", vocab_size, 2),
        ("bank_rows", bank_rows, 1),
        ("draft_samples_per_row", samples_per_row, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")

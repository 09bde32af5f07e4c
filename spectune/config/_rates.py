"""Conversions between the forms in which acceptance is stated.

Vocabulary (the same as vLLM's):
- *unconditional* rate at position i: P(drafts 0..i all accepted) -- what vLLM logs as
  "Per-position acceptance rate"; non-increasing in i.
- *conditional* rate at position i: P(draft i accepted | drafts 0..i-1 accepted) =
  uncond_i / uncond_{i-1}; what a rejection kernel applies at each step.
- *acceptance length*: mean tokens emitted per verification step, bonus included:
  1 + sum_i uncond_i.
- *mean rate* p̄ (the March 2026 ``synthetic_acceptance_rate``): the mean of the unconditional rates,
  i.e. (accepted drafts per step) / K.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

__all__ = [
    "MIN_ACCEPTANCE_DECAY_FACTOR",
    "acceptance_length_to_rates",
    "conditional_to_unconditional",
    "decay_to_conditional_rates",
    "mean_acceptance_length",
    "mean_rate_to_decay",
    "unconditional_to_conditional",
]

# The strongest per-position decay the mean-rate model uses (what well-tuned drafters show).
MIN_ACCEPTANCE_DECAY_FACTOR = 0.85


def _mean_joint_acceptance(base_rate: float, decay: float, num_positions: int) -> float:
    """(1/K) * sum_i P_i with P_i = a0^(i+1) * gamma^(i(i+1)/2)."""
    total = 0.0
    joint = 1.0
    for i in range(num_positions):
        joint *= base_rate * decay**i
        total += joint
    return total / num_positions


def _bisect_upper(predicate_true_at_hi: Callable[[float], bool], lo: float, hi: float, tol: float) -> float:
    """Smallest x in [lo, hi] with predicate(x) true (predicate monotone), returned as the upper end."""
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if predicate_true_at_hi(mid):
            hi = mid
        else:
            lo = mid
    return hi


def mean_rate_to_decay(mean_rate: float, num_speculative_tokens: int, tol: float = 1e-9) -> tuple[float, float]:
    """Mean joint acceptance p̄ -> (base rate a0, decay gamma) with conditional rate a0 * gamma^i.

    The decay is the strongest in [0.85, 1] that still lets a0 <= 1 reach p̄; then a0 solves
    (1/K) sum_i a0^(i+1) gamma^(i(i+1)/2) = p̄. Examples: K=3, p̄=0.6 -> (0.839, 0.85);
    K=3, p̄=0.9 -> (1.0, 0.920); K=1 -> (p̄, 0.85).
    """
    if not 0.0 <= mean_rate <= 1.0 or not math.isfinite(mean_rate):
        raise ValueError(f"mean_rate must be in [0, 1], got {mean_rate}")
    if num_speculative_tokens < 1:
        raise ValueError(f"num_speculative_tokens must be >= 1, got {num_speculative_tokens}")
    k = num_speculative_tokens
    decay = MIN_ACCEPTANCE_DECAY_FACTOR
    if _mean_joint_acceptance(1.0, decay, k) < mean_rate:
        decay = _bisect_upper(lambda g: _mean_joint_acceptance(1.0, g, k) >= mean_rate, decay, 1.0, tol)
    if mean_rate <= 0.0:
        return 0.0, decay
    if mean_rate >= 1.0:
        return 1.0, decay
    base = _bisect_upper(lambda a: _mean_joint_acceptance(a, decay, k) >= mean_rate, 0.0, 1.0, tol)
    return base, decay


def decay_to_conditional_rates(base_rate: float, decay: float, num_speculative_tokens: int) -> list[float]:
    """Conditional rates a0 * gamma^i for i = 0..K-1."""
    return [base_rate * decay**i for i in range(num_speculative_tokens)]


def unconditional_to_conditional(unconditional: Sequence[float]) -> list[float]:
    """c_i = a_i / a_{i-1} with a_{-1} = 1; a position after a zero unconditional rate gets 0."""
    conditional = []
    previous = 1.0
    for rate in unconditional:
        conditional.append(0.0 if previous <= 0.0 else min(1.0, rate / previous))
        previous = rate
    return conditional


def conditional_to_unconditional(conditional: Sequence[float]) -> list[float]:
    """a_i = prod_{j<=i} c_j."""
    unconditional = []
    joint = 1.0
    for rate in conditional:
        joint *= rate
        unconditional.append(joint)
    return unconditional


def acceptance_length_to_rates(acceptance_length: float, num_speculative_tokens: int) -> list[float]:
    """Acceptance length L in [1, K+1] -> the minimum-variance unconditional rates.

    floor(L-1) ones, then the fraction L-1-floor(L-1), then zeros: 2.6 with K=3 -> [1, 0.6, 0];
    3.5 with K=4 -> [1, 1, 0.5, 0].
    """
    k = num_speculative_tokens
    if not 1.0 <= acceptance_length <= k + 1:
        raise ValueError(f"acceptance_length must be in [1, {k + 1}], got {acceptance_length}")
    accepted = acceptance_length - 1.0
    whole = math.floor(accepted)
    rates = [1.0] * whole
    if whole < k:
        rates.append(round(accepted - whole, 12))
    rates.extend([0.0] * (k - len(rates)))
    return rates


def mean_acceptance_length(unconditional: Sequence[float]) -> float:
    """Mean tokens per verification step, bonus included: 1 + sum of the unconditional rates."""
    return 1.0 + float(sum(unconditional))

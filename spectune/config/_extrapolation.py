"""Acceptance past the measured positions: which conditional rate a drafter is assumed to reach at position i.

A profile measured at K = m says nothing about position m and beyond, yet a study tries larger K. Two
rules, named in the study's hash (a changed rule is a changed study):

- ``repeat_last``: every later position has the last measured conditional rate. Optimistic when
  acceptance decays along the draft, as it does for chain drafters (EAGLE, MTP).
- ``geometric_decay``: a line fitted to the logarithms of the measured conditional rates (least
  squares over positions) gives a per-position ratio gamma, capped at 1; position m + j has the last
  measured rate times gamma^(j+1). With one measured position there is nothing to fit, and the rule
  repeats it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

__all__ = ["EXTRAPOLATION_RULES", "ExtrapolationRule", "extend_conditional", "fitted_decay"]

ExtrapolationRule = Literal["repeat_last", "geometric_decay"]
EXTRAPOLATION_RULES: tuple[str, ...] = ExtrapolationRule.__args__  # type: ignore[attr-defined]
_FLOOR = 1e-6  # log of a zero rate


def fitted_decay(conditional_rates: Sequence[float]) -> float:
    """gamma in (0, 1]: exp of the least-squares slope of log(rate) over position (1 with < 2 positions)."""
    count = len(conditional_rates)
    if count < 2:
        return 1.0
    logs = [math.log(max(rate, _FLOOR)) for rate in conditional_rates]
    mean_x, mean_y = (count - 1) / 2, sum(logs) / count
    slope = sum((i - mean_x) * (y - mean_y) for i, y in enumerate(logs)) / sum((i - mean_x) ** 2 for i in range(count))
    return min(math.exp(slope), 1.0)


def extend_conditional(conditional_rates: Sequence[float], num_positions: int, rule: ExtrapolationRule) -> list[float]:
    """``num_positions`` conditional rates: the measured ones (cut if longer), then the rule's."""
    measured = list(conditional_rates[:num_positions])
    if num_positions <= len(conditional_rates):
        return measured
    decay = fitted_decay(conditional_rates) if rule == "geometric_decay" else 1.0
    last = conditional_rates[-1]
    return measured + [last * decay ** (j + 1) for j in range(num_positions - len(conditional_rates))]

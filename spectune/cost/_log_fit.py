"""The roofline fitted to a deployment's measured step times: achieved bandwidth fraction and per-step overhead.

The roofline's two nominal numbers are the ones a setup changes most (vLLM version, CUDA graphs,
kernels): the fraction of peak HBM bandwidth its decode kernels reach, ``achievable_bandwidth_fraction``
(f), and the fixed time every step costs, ``overhead_s`` (o). Given measured steps (batch size, K,
context tokens, seconds), the fit minimises the sum of squared *relative* errors over f and o: for each
f on a grid the best o has a closed form (a weighted mean of the residuals), the best grid point is
refined by golden-section search. Compute-bound parts do not depend on f, so steps at several batch
sizes and contexts are needed to tell f from o; ``LogFit`` reports the leave-nothing-out errors and
the worst window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from spectune.config import CostModelConfig, DrafterSpec, HardwareConfig, TargetModelSpec
from spectune.cost._roofline import RooflineCostModel
from spectune.errors import SpectuneError

__all__ = ["LogFit", "StepSample", "fit_roofline", "fitted_cost_model"]

_LOW, _HIGH, _GRID = 0.05, 1.0, 0.005


@dataclass(frozen=True)
class StepSample:
    """One measured decode step (seconds), where it came from, and the batch, K and context it ran at."""

    batch_size: int
    num_speculative_tokens: int
    context_tokens: float
    step_time_s: float
    where: str  # FILE:LINE


@dataclass(frozen=True)
class LogFit:
    """The fitted parameters and how well the fitted roofline reproduces the steps it was fitted to."""

    achievable_bandwidth_fraction: float
    overhead_s: float
    num_steps: int
    mean_relative_error: float
    max_relative_error: float
    worst: str


def _model(
    hardware: HardwareConfig, target: TargetModelSpec, drafter: DrafterSpec | None, fraction: float
) -> RooflineCostModel:
    gpu = hardware.gpu.model_copy(update={"achievable_bandwidth_fraction": fraction})
    return RooflineCostModel(hardware.model_copy(update={"gpu": gpu}), target, drafter, CostModelConfig(overhead_s=0.0))


def _without_overhead(steps: Sequence[StepSample], model: RooflineCostModel) -> list[float]:
    return [model.step_time(s.batch_size, s.num_speculative_tokens, s.context_tokens).total_s for s in steps]


def _best_overhead(measured: list[float], predicted: list[float]) -> float:
    """o minimising sum(((m - p - o) / m)^2), never negative."""
    weights = [1.0 / m**2 for m in measured]
    return max(sum(w * (m - p) for w, m, p in zip(weights, measured, predicted, strict=True)) / sum(weights), 0.0)


def _loss(fraction: float, steps: Sequence[StepSample], hardware: HardwareConfig, target: TargetModelSpec,
          drafter: DrafterSpec | None) -> tuple[float, float, list[float]]:  # fmt: skip
    measured = [s.step_time_s for s in steps]
    predicted = _without_overhead(steps, _model(hardware, target, drafter, fraction))
    overhead = _best_overhead(measured, predicted)
    errors = [(p + overhead - m) / m for m, p in zip(measured, predicted, strict=True)]
    return math.fsum(e * e for e in errors), overhead, errors


def fit_roofline(
    steps: Sequence[StepSample], hardware: HardwareConfig, target: TargetModelSpec, drafter: DrafterSpec | None
) -> LogFit:
    """Fit f and o to ``steps``; ``SpectuneError`` with fewer than 2 distinct batch sizes (f and o would not separate)."""
    if len({s.batch_size for s in steps}) < 2:
        raise SpectuneError(
            f"fitting the roofline needs decode windows at 2 or more batch sizes (running requests), got "
            f"{sorted({s.batch_size for s in steps}) or 'none'}; log a period with varied load"
        )
    if drafter is None and any(s.num_speculative_tokens for s in steps):
        raise SpectuneError(
            "the steps drafted tokens, but the deployment has no drafter; give the document that served them"
        )
    grid = [_LOW + i * _GRID for i in range(int(round((_HIGH - _LOW) / _GRID)) + 1)]
    losses = [_loss(f, steps, hardware, target, drafter)[0] for f in grid]
    best = min(range(len(grid)), key=losses.__getitem__)
    low, high = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(40):  # golden section: the bracket shrinks to ~1e-10
        left, right = high - ratio * (high - low), low + ratio * (high - low)
        if _loss(left, steps, hardware, target, drafter)[0] <= _loss(right, steps, hardware, target, drafter)[0]:
            high = right
        else:
            low = left
    fraction = (low + high) / 2
    _, overhead, errors = _loss(fraction, steps, hardware, target, drafter)
    worst = max(range(len(errors)), key=lambda i: abs(errors[i]))
    return LogFit(
        achievable_bandwidth_fraction=fraction,
        overhead_s=overhead,
        num_steps=len(steps),
        mean_relative_error=math.fsum(abs(e) for e in errors) / len(errors),
        max_relative_error=abs(errors[worst]),
        worst=steps[worst].where,
    )


def fitted_cost_model(fit: LogFit, *, source: str, base: CostModelConfig | None = None) -> CostModelConfig:
    """``base`` (default: the roofline's defaults) with the fitted fraction and overhead, and the fit's record."""
    record = {"source": source[:2000], "num_windows": fit.num_steps, "mean_relative_error": round(fit.mean_relative_error, 6),
              "max_relative_error": round(fit.max_relative_error, 6)}  # fmt: skip
    update = {"method": "roofline", "achievable_bandwidth_fraction": round(fit.achievable_bandwidth_fraction, 6),
              "overhead_s": round(fit.overhead_s, 9), "fit": record}  # fmt: skip
    data = (base or CostModelConfig()).model_dump(exclude_none=True) | update
    data.pop("step_times", None)
    data.pop("step_times_context_tokens", None)
    return CostModelConfig.model_validate(data)

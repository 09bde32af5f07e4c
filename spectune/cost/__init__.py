"""Step time of one serving iteration (drafting + verification + sampling + overhead) and prefill time.

``build_cost_model(hardware, target_model, drafter, config)`` returns a ``CostModel``: a roofline from
the GPU's bandwidth and FLOP/s and the models' shapes, or a measured step-time table interpolated
between its points. ``CostModel``'s docstring walks through the call order.
"""

from spectune.cost._build import build_cost_model
from spectune.cost._interface import (
    CostLimits,
    CostModel,
    FitReport,
    HeldOutPoint,
    OutOfTableRange,
    StepPhases,
    StepTime,
    StepTimer,
)
from spectune.cost._log_fit import LogFit, StepSample, fit_roofline, fitted_cost_model
from spectune.cost._measured import MAX_BATCH_EXTRAPOLATION, MeasuredCostModel, StepTimeInterpolator
from spectune.cost._roofline import RooflineCostModel, expected_experts_touched
from spectune.cost._vllm_sampler import SamplerWork, VllmSamplerTimes
from spectune.cost._zero_row import ZeroRowDraftCostModel, zero_row_draft_time

__all__ = [
    "MAX_BATCH_EXTRAPOLATION",
    "CostLimits",
    "CostModel",
    "FitReport",
    "HeldOutPoint",
    "LogFit",
    "MeasuredCostModel",
    "OutOfTableRange",
    "RooflineCostModel",
    "SamplerWork",
    "StepSample",
    "StepPhases",
    "StepTime",
    "StepTimeInterpolator",
    "StepTimer",
    "VllmSamplerTimes",
    "ZeroRowDraftCostModel",
    "build_cost_model",
    "expected_experts_touched",
    "fit_roofline",
    "fitted_cost_model",
    "zero_row_draft_time",
]

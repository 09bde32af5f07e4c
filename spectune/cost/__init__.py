"""Step time of one serving iteration (drafting + verification + sampling + overhead) and prefill time.

``build_cost_model(hardware, target_model, drafter, config)`` returns a ``CostModel``: a roofline from
the GPU's bandwidth and FLOP/s and the models' shapes, or a measured step-time table interpolated
between its points. ``CostModel``'s docstring walks through the call order.
"""

from spectune.cost._build import build_cost_model
from spectune.cost._interface import CostLimits, CostModel, StepTimer
from spectune.cost._log_fit import StepSample, fit_roofline, fitted_cost_model
from spectune.cost._roofline import RooflineCostModel
from spectune.cost._vllm_sampler import SamplerWork
from spectune.cost._zero_row import zero_row_draft_time

__all__ = [
    "CostLimits",
    "CostModel",
    "RooflineCostModel",
    "SamplerWork",
    "StepSample",
    "StepTimer",
    "build_cost_model",
    "fit_roofline",
    "fitted_cost_model",
    "zero_row_draft_time",
]

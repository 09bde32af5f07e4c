"""Picking and building the cost model a deployment's config asks for."""

from __future__ import annotations

from spectune.config import CostModelConfig, DrafterSpec, HardwareConfig, TargetModelSpec, deployment_problems
from spectune.cost._interface import CostModel
from spectune.cost._measured import MeasuredCostModel
from spectune.cost._roofline import RooflineCostModel
from spectune.cost._vllm_sampler import SamplerWork
from spectune.errors import SpectuneError

__all__ = ["build_cost_model"]


def build_cost_model(
    hardware: HardwareConfig,
    target_model: TargetModelSpec,
    drafter: DrafterSpec | None = None,
    config: CostModelConfig | None = None,
    *,
    sampler_work: SamplerWork | None = None,
) -> CostModel:
    """The roofline, or the measured table when ``config.method`` is 'measured'.

    ``sampler_work``: the verification rule and whether every request is greedy, which pick the column
    of vLLM's sampler times the roofline charges (default: standard, non-greedy).

    ``drafter`` None means plain decoding only (K = 0). Raises ``SpectuneError`` when hardware,
    target and drafter do not fit together (``deployment_problems``): a document that validated
    them already never gets here with such a problem.
    """
    config = config if config is not None else CostModelConfig()
    problems = deployment_problems(hardware, target_model, drafter)
    if problems:
        raise SpectuneError("; ".join(f"{'.'.join(map(str, path))}: {message}" for path, message in problems))
    roofline = RooflineCostModel(hardware, target_model, drafter, config, sampler_work=sampler_work)
    if config.method == "roofline":
        return roofline
    if config.step_times is None:  # the config's own rule forbids this; keep the type checker honest
        raise SpectuneError("cost_model.step_times: method 'measured' needs a table, got none")
    return MeasuredCostModel(config.step_times, roofline, table_context_tokens=config.step_times_context_tokens)

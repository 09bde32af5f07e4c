"""Picking and building the cost model a deployment's config asks for."""

from __future__ import annotations

from spectune.config import CostModelConfig, DrafterSpec, HardwareConfig, TargetModelSpec, deployment_problems
from spectune.cost._interface import CostModel
from spectune.cost._measured import MeasuredCostModel
from spectune.cost._roofline import RooflineCostModel
from spectune.cost._vllm_sampler import SamplerWork
from spectune.cost._zero_row import ZeroRowDraftCostModel
from spectune.errors import SpectuneError

__all__ = ["build_cost_model"]


def build_cost_model(
    hardware: HardwareConfig,
    target_model: TargetModelSpec,
    drafter: DrafterSpec | None = None,
    config: CostModelConfig | None = None,
    *,
    num_speculative_tokens: int = 1,
    sampler_work: SamplerWork | None = None,
) -> CostModel:
    """The roofline, or the measured table when ``config.method`` is 'measured'.

    ``drafter`` None means plain decoding only (K = 0). With a neural drafter and
    ``config.zero_k_draft_cost`` other than 'none', K = 0 steps also pay the drafter (a 0 row of vLLM's K
    table); ``num_speculative_tokens`` is the configured K, which 'all_draft_steps' runs.
    ``sampler_work``: the verification rule and whether every request is greedy, which pick the column
    of vLLM's sampler times the roofline charges (default: standard, non-greedy). Raises ``SpectuneError`` when hardware,
    target and drafter do not fit together (``deployment_problems``): a document that validated
    them already never gets here with such a problem.
    """
    config = config if config is not None else CostModelConfig()
    problems = deployment_problems(hardware, target_model, drafter)
    if problems:
        raise SpectuneError("; ".join(f"{'.'.join(map(str, path))}: {message}" for path, message in problems))
    if config.achievable_bandwidth_fraction is not None:  # fitted to the deployment: replaces the GPU's nominal one
        gpu = hardware.gpu.model_copy(update={"achievable_bandwidth_fraction": config.achievable_bandwidth_fraction})
        hardware = hardware.model_copy(update={"gpu": gpu})
    roofline = RooflineCostModel(hardware, target_model, drafter, config, sampler_work=sampler_work)
    model: CostModel = roofline
    if config.method == "measured":
        if config.step_times is None:  # the config's own rule forbids this; keep the type checker honest
            raise SpectuneError("cost_model.step_times: method 'measured' needs a table, got none")
        model = MeasuredCostModel(config.step_times, roofline, table_context_tokens=config.step_times_context_tokens)
    if config.zero_k_draft_cost != "none" and drafter is not None and drafter.drafting != "lookup":
        model = ZeroRowDraftCostModel(model, roofline, config.zero_k_draft_cost, num_speculative_tokens)
    return model

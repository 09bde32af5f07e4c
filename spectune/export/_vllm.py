"""The recommendation as vLLM takes it: a ``SpeculativeConfig`` and its ``--speculative-config`` JSON.

Field names are vLLM's current ones (``rejection_sample_method``, ``draft_sample_method``,
``num_speculative_tokens_per_batch_size``, ``enable_adaptive_verification``: the adaptive policies set it,
with K as the budget's cap -- one K max, or a table of them). Besides the config to serve, a *synthetic* variant pins
vLLM's acceptance to what the simulation saw (``rejection_sample_method: synthetic``), so that a
``vllm bench serve`` run on the real GPU measures the simulated operating point: in the current form
(``synthetic_acceptance_rates``, April 2026 on) or the older scalar form of March 2026
(``synthetic_acceptance_rate``, the mean of the unconditional rates, with no ``draft_sample_method``).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from spectune.config import SpeculativeConfig
from spectune.errors import SpectuneError
from spectune.study import Recommendation

__all__ = [
    "SyntheticForm",
    "recommended_speculative_config",
    "simulated_acceptance_rates",
    "vllm_speculative_config",
    "vllm_serve_command",
    "vllm_synthetic_config",
]

SyntheticForm = Literal["current", "legacy"]


def _table_needed(recommendation: Recommendation) -> bool:
    ks = {k for _, _, k in recommendation.schedule}
    return recommendation.has_table and (len(ks) > 1 or 0 in ks)


def vllm_speculative_config(recommendation: Recommendation) -> dict[str, Any]:
    """The ``--speculative-config`` object to serve with (plain JSON types, vLLM's field order)."""
    candidate = recommendation.space.candidate(recommendation.combo.candidate)
    config: dict[str, Any] = dict(candidate.speculative_base)
    config["num_speculative_tokens"] = recommendation.num_speculative_tokens
    config["rejection_sample_method"] = recommendation.combo.rejection_sample_method
    config["draft_sample_method"] = recommendation.combo.draft_sample_method
    if recommendation.adaptive_verification:
        config["enable_adaptive_verification"] = True
    if _table_needed(recommendation):
        config["num_speculative_tokens_per_batch_size"] = [list(row) for row in recommendation.schedule]
    return config


def vllm_serve_command(recommendation: Recommendation) -> str:
    """The ``vllm serve`` line to run; plain serving when K = 0 at every batch size.

    A table of 0 rows would still load and hold the drafter's weights for steps that never use it, so
    speculation off everywhere is served, and exported, without any ``--speculative-config``."""
    if recommendation.speculation_off_everywhere:
        return "vllm serve TARGET  # no --speculative-config: speculation does not pay off at any batch size"
    return f"vllm serve TARGET --speculative-config '{json.dumps(vllm_speculative_config(recommendation))}'"


def recommended_speculative_config(recommendation: Recommendation) -> SpeculativeConfig:
    """The recommendation validated as spectune (and vLLM) validate a speculative config."""
    return _validated(vllm_speculative_config(recommendation), "the recommended config")


def simulated_acceptance_rates(recommendation: Recommendation) -> list[float] | None:
    """Unconditional per-position acceptance the simulation measured at the largest K, length K."""
    k = recommendation.num_speculative_tokens
    for choice in recommendation.choices:
        evaluation = choice.evaluation
        if evaluation is None or choice.num_speculative_tokens != k:
            continue
        rates = evaluation.metrics.acceptance_per_position
        if rates is not None and len(rates) >= k:
            monotone: list[float] = []
            for rate in rates[:k]:  # vLLM wants non-increasing rates in [0, 1]; the counts already are
                monotone.append(min(max(rate, 0.0), monotone[-1] if monotone else 1.0))
            return [round(r, 4) for r in monotone]
    return None


def vllm_synthetic_config(recommendation: Recommendation, form: SyntheticForm = "current") -> dict[str, Any] | None:
    """The recommendation with acceptance pinned to the simulated rates (None without measured rates)."""
    rates = simulated_acceptance_rates(recommendation)
    if rates is None or recommendation.speculation_off_everywhere:
        return None
    config = vllm_speculative_config(recommendation)
    config["rejection_sample_method"] = "synthetic"
    if form == "current":
        config["synthetic_acceptance_rates"] = rates
    else:
        config.pop("draft_sample_method", None)  # the March 2026 schema had no draft sampling field
        config["synthetic_acceptance_rate"] = round(sum(rates) / len(rates), 4)
    _validated(config, f"the {form} synthetic config")
    return config


def _validated(config: dict[str, Any], what: str) -> SpeculativeConfig:
    try:
        return SpeculativeConfig.model_validate(config, context={"notices": []})
    except ValueError as err:  # a spectune bug: the study built a config its own schema refuses
        raise SpectuneError(f"{what} does not validate ({err}); please report this") from None

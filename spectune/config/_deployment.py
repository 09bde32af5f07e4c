"""The rules that tie hardware, target and drafter together, and the KV cache they leave.

vLLM checks these at start-up (tensor-parallel divisibility, weights that fit, a KV cache left over);
spectune checks them at validation so that a document it accepts is one vLLM would start.
"""

from __future__ import annotations

import math

from spectune.config._gpu import HardwareConfig
from spectune.config._models import DrafterSpec, TargetModelSpec

__all__ = ["deployment_problems", "kv_cache_capacity_tokens"]

_GB = 1e9
_HEAD_METHODS_NEEDING_TARGET_WIDTH = ("eagle", "eagle3", "mtp", "dflash", "dspark")


def deployment_problems(
    hardware: HardwareConfig,
    target_model: TargetModelSpec,
    drafter: DrafterSpec | None = None,
    *,
    paths: tuple[str, str, str] = ("hardware", "target_model", "drafter"),
) -> list[tuple[tuple[str | int, ...], str]]:
    """Rules that tie hardware, target and drafter together, as ``(field path, message)`` pairs.

    A document that holds all three calls ``check_rules(deployment_problems(...))`` from its
    ``model_validator(mode="after")``; ``paths`` names the three fields in that document.
    """
    hw, tgt, dft = ((name,) for name in paths)
    problems: list[tuple[tuple[str | int, ...], str]] = []
    tp = target_model.tensor_parallel_size
    if hardware.num_gpus % tp:
        problems.append(
            (
                hw + ("num_gpus",),
                f"must be a multiple of target_model.tensor_parallel_size ({tp}), got {hardware.num_gpus}",
            )
        )
    memory = hardware.gpu.memory_bytes
    target_bytes = target_model.num_parameters * target_model.bytes_per_parameter / tp
    draft_bytes = 0.0
    if drafter is not None:
        draft_tp = drafter.tensor_parallel_size or tp
        draft_bytes = drafter.num_parameters * drafter.bytes_per_parameter / draft_tp
        if draft_tp not in (1, tp):
            problems.append(
                (
                    dft + ("tensor_parallel_size",),
                    f"must be 1 or the target's tensor_parallel_size ({tp}) as vLLM requires, got {draft_tp}",
                )
            )
        if drafter.method in _HEAD_METHODS_NEEDING_TARGET_WIDTH and drafter.hidden_size != target_model.hidden_size:
            problems.append(
                (
                    dft + ("hidden_size",),
                    f"a {drafter.method} drafter reads the target's hidden states, so it must "
                    f"be the target's hidden_size ({target_model.hidden_size}), got {drafter.hidden_size}",
                )
            )
    if target_bytes + draft_bytes > memory:
        problems.append(
            (
                tgt + ("tensor_parallel_size",),
                f"weights need {(target_bytes + draft_bytes) / _GB:.1f} GB per GPU "
                f"(target at TP {tp}{' plus drafter' if draft_bytes else ''}), more than the {memory / _GB:.0f} GB of "
                f"{hardware.gpu.name}; raise tensor_parallel_size, got {tp}",
            )
        )
    elif kv_cache_capacity_tokens(hardware, target_model, drafter) < 1:
        usable = hardware.gpu_memory_utilization * memory
        problems.append(
            (
                hw + ("gpu_memory_utilization",),
                f"leaves no KV cache: {usable / _GB:.1f} GB per GPU usable, weights "
                f"take {(target_bytes + draft_bytes) / _GB:.1f} GB (vLLM refuses to start); raise it or "
                f"target_model.tensor_parallel_size, got {hardware.gpu_memory_utilization}",
            )
        )
    return problems


def kv_cache_capacity_tokens(
    hardware: HardwareConfig, target_model: TargetModelSpec, drafter: DrafterSpec | None = None
) -> int:
    """Tokens one replica's KV cache holds: per GPU, what ``gpu_memory_utilization`` leaves after the weights.

    Every GPU of the replica holds the same blocks (its share of the KV heads of every layer, target and
    neural drafter), so the GPU with the most weights -- the one running a TP-1 drafter -- sets the
    capacity. Activations and CUDA graphs are not subtracted: this is an upper bound on what vLLM
    reports as "GPU KV cache size".
    """
    tp = target_model.tensor_parallel_size
    weights = target_model.num_parameters * target_model.bytes_per_parameter / tp
    per_token = (
        2
        * target_model.num_hidden_layers
        * math.ceil(target_model.num_key_value_heads / tp)
        * (target_model.head_dim * target_model.kv_cache_bytes_per_element)
    )
    if drafter is not None and drafter.drafting != "lookup":
        draft_tp = drafter.tensor_parallel_size or tp
        weights += drafter.num_parameters * drafter.bytes_per_parameter / draft_tp
        per_token += (
            2
            * drafter.num_hidden_layers
            * math.ceil(drafter.num_key_value_heads / draft_tp)
            * (drafter.head_dim * drafter.kv_cache_bytes_per_element)
        )
    free = hardware.gpu_memory_utilization * hardware.gpu.memory_bytes - weights
    return max(int(free // per_token), 0)

"""What a named vLLM release does with a speculative config beyond its field rules: versions, runners.

vLLM 0.33.0 serves a config on Model Runner V2 unless V2 lacks one of its features; it then falls back
to the V1 runner with a warning (``vllm/config/vllm.py:731-767, 3053-3082``), and V1 refuses its own
list (``:3110-3119, 3332-3337``). V1 has no block verification (``vllm/v1/sample/rejection_sampler.py:80-118``)
and keeps draft probabilities only for standard and FLy (``vllm/v1/spec_decode/llm_base_proposer.py:257-260``),
so what it serves is standard verification of one-hot drafts. It keeps the K table: the shared scheduler
looks K up per step (``vllm/v1/core/sched/scheduler.py:1709-1714``) and V1's runner drafts that many
(``vllm/v1/worker/gpu_model_runner.py:4729, 4790-4797, 4944-4946``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ValidationInfo

if TYPE_CHECKING:
    from spectune.config._speculative import SpeculativeFields

__all__ = [
    "DEFAULT_VLLM_VERSION",
    "VLLM_VERSIONS",
    "unknown_vllm_version",
    "is_served_config",
    "refuses_early_2026_forms",
    "served_on_v1",
    "simulation_refusals",
    "v1_fallback_reasons",
    "v1_refusals",
    "vllm_version",
]

DEFAULT_VLLM_VERSION = "0.33.0"
# 0.32 differs from 0.33.0 only in what spectune knows of it: the early-2026 forms (strict/probabilistic,
# the scalar synthetic_acceptance_rate) that 0.33.0 refuses.
VLLM_VERSIONS = ("0.33.0", "0.32")


def unknown_vllm_version(version: str) -> str | None:
    """What ``--vllm-version`` says of a release spectune has no rules for, else None."""
    if version in VLLM_VERSIONS:
        return None
    return f"must be one of {', '.join(VLLM_VERSIONS)}, got {version!r}"


FieldPath = tuple[str | int, ...]


def vllm_version(info: ValidationInfo | None) -> str:
    """The vLLM release a document is validated for (``--vllm-version``), from the validation context."""
    context: Any = info.context if info is not None else None
    if isinstance(context, dict) and isinstance(context.get("vllm_version"), str):
        return str(context["vllm_version"])
    return DEFAULT_VLLM_VERSION


def is_served_config(info: ValidationInfo) -> bool:
    """Whether the config is one handed to vLLM as is (a speculative document), not a simulation's part."""
    context: Any = info.context
    return isinstance(context, dict) and context.get("served_config") is True


def refuses_early_2026_forms(info: ValidationInfo) -> bool:
    """vLLM 0.33.0 refuses strict/probabilistic and the scalar synthetic rate; a simulation still reads them."""
    return is_served_config(info) and vllm_version(info) != "0.32"


def v1_fallback_reasons(spec: SpeculativeFields) -> list[tuple[FieldPath, str]]:
    """Why Model Runner V2 sends this config to V1 (vllm/config/vllm.py:3066-3082): field and feature."""
    reasons: list[tuple[FieldPath, str]] = []
    if spec.method in ("suffix", "custom_class"):
        reasons.append((("method",), f"speculative method '{spec.method}'"))
    if spec.parallel_drafting and spec.method not in ("dflash", "dspark"):
        reasons.append((("parallel_drafting",), f"parallel drafting for method '{spec.method}'"))
    if spec.use_heterogeneous_vocab:
        reasons.append((("use_heterogeneous_vocab",), "heterogeneous-vocabulary draft models"))
    return reasons


def v1_refusals(spec: SpeculativeFields) -> list[tuple[FieldPath, str]]:
    """What the V1 runner refuses outright (vllm/config/vllm.py:3110-3119) once V2 has sent a config there."""
    reasons = v1_fallback_reasons(spec)
    if not reasons:
        return []
    why = ", ".join(feature for _, feature in reasons)
    problems: list[tuple[FieldPath, str]] = []
    if spec.enable_adaptive_verification:
        problems.append(
            (
                ("enable_adaptive_verification",),
                f"vLLM serves {why} on its V1 runner, which has no adaptive verification; remove one of them",
            )
        )
    if spec.draft_lm_head_quantization is not None:
        problems.append(
            (
                ("draft_lm_head_quantization",),
                f"vLLM serves {why} on its V1 runner, which has no draft lm_head quantization; remove one of them",
            )
        )
    return problems


def simulation_refusals(spec: SpeculativeFields, max_k: int) -> list[tuple[FieldPath, str]]:
    """What vLLM serves but spectune's simulator does not model; validation passes, simulate/study refuse."""
    problems: list[tuple[FieldPath, str]] = []
    if spec.method in ("custom_class", "extract_hidden_states"):
        what = "a proposer class of your own" if spec.method == "custom_class" else "it drafts nothing"
        problems.append((("method",), f"'{spec.method}' validates, but spectune does not simulate it ({what})"))
    if spec.rejection_sample_method == "fly":
        problems.append(
            (
                ("rejection_sample_method",),
                "'fly' (vLLM's lossy FLy rule) validates, but spectune does not simulate it: its acceptance "
                "depends on the target's entropy, which the simulator does not model; simulate standard or block",
            )
        )
    k = spec.num_speculative_tokens
    if k is not None and k > max_k:
        problems.append(
            (
                ("num_speculative_tokens",),
                f"{k} validates (vLLM sets no upper bound), but the simulator runs K <= {max_k}; simulate a smaller K",
            )
        )
    return problems


def served_on_v1(spec: SpeculativeFields) -> dict[str, str]:
    """The fields vLLM's V1 runner serves otherwise than written: standard verification of one-hot drafts."""
    if not v1_fallback_reasons(spec):
        return {}
    served = {}
    if spec.rejection_sample_method == "block":
        served["rejection_sample_method"] = "standard"
    if spec.draft_sample_method == "probabilistic":
        served["draft_sample_method"] = "greedy"
    return served

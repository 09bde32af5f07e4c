"""The served (target) model and the drafter, by preset name, preset with overrides, or explicit.

Presets fill the fields; the validated model always carries every number, so downstream code never
looks a preset up again. Preset numbers come from the models' published ``config.json`` files
(targets, draft models); drafter heads are sized from their target's shape.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, GetJsonSchemaHandler, ValidationInfo, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from spectune.config._base import SpectuneModel, check_rules, notify
from spectune.config._hardware_presets import (
    DRAFTER_PRESETS,
    TARGET_MODEL_PRESETS,
    DrafterPresetName,
    TargetModelPresetName,
    active_mlp_width,
    default_drafter_preset,
    drafting_mode,
    head_drafter_fields,
    layer_parameters,
)
from spectune.config._preset_forms import expand_preset, schema_with_name_forms
from spectune.config._speculative import Method
from spectune.config._workload import MAX_SEQUENCE_TOKENS
from spectune.errors import SpectuneError

__all__ = [
    "DRAFTER_PRESET_NAMES",
    "TARGET_MODEL_PRESET_NAMES",
    "DrafterSpec",
    "DraftingMode",
    "TargetModelSpec",
    "default_drafter",
    "default_drafter_preset",
]

DraftingMode = Literal["sequential", "parallel", "lookup"]

TARGET_MODEL_PRESET_NAMES: tuple[str, ...] = tuple(TARGET_MODEL_PRESETS)
DRAFTER_PRESET_NAMES: tuple[str, ...] = tuple(DRAFTER_PRESETS)


class TargetModelSpec(SpectuneModel):
    """The served (target) model: size and shape in Hugging Face ``config.json`` names, and its parallelism."""

    preset: TargetModelPresetName | None = Field(
        default=None, description=f"Model preset that filled the fields not given: {', '.join(TARGET_MODEL_PRESETS)}."
    )
    name: str = Field(min_length=1, max_length=200, description="Display name.")
    num_parameters: float = Field(gt=0, le=1e14, description="Total parameters, embeddings included (count).")
    num_hidden_layers: int = Field(ge=1, le=1024, description="Decoder layers (count).")
    hidden_size: int = Field(ge=1, le=1_000_000, description="Model width (elements).")
    intermediate_size: int = Field(ge=1, le=10_000_000, description="MLP inner width (elements).")
    num_attention_heads: int = Field(ge=1, le=4096, description="Query heads (count).")
    num_key_value_heads: int = Field(ge=1, le=4096, description="Key/value heads (count; < query heads = GQA).")
    head_dim: int = Field(ge=1, le=4096, description="Width of one attention head (elements).")
    vocab_size: int = Field(ge=1, le=10_000_000, description="Vocabulary (tokens); logits per position.")
    tie_word_embeddings: bool = Field(
        description="The LM head shares the input embedding; if not, the embedding table is gathered, not read whole."
    )
    bytes_per_parameter: float = Field(
        default=2.0, gt=0, le=8, description="Weight storage (bytes/parameter; bf16 = 2)."
    )
    kv_cache_bytes_per_element: float = Field(
        default=2.0, gt=0, le=8, description="KV-cache storage (bytes/element; bf16 = 2, fp8 = 1)."
    )
    tensor_parallel_size: int = Field(default=1, ge=1, le=1024, description="GPUs one model replica spans (GPUs).")
    max_model_len_tokens: int | None = Field(
        default=None,
        ge=1,
        le=MAX_SEQUENCE_TOKENS,
        description="Context limit: the most tokens one request may hold, prompt plus output (tokens; vLLM's "
        "--max-model-len, by default config.json's max_position_embeddings). A workload whose largest prompt "
        "plus largest output exceeds it is refused. Default: the preset's, or no check.",
    )
    num_experts: int = Field(
        default=0,
        ge=0,
        le=65536,
        description="MoE: routed experts per MoE layer ('num_experts' / 'n_routed_experts'; count, 0 = dense model).",
    )
    num_experts_per_tok: int = Field(
        default=0, ge=0, le=1024, description="MoE: routed experts each token runs through (count)."
    )
    moe_intermediate_size: int = Field(
        default=0, ge=0, le=10_000_000, description="MoE: width of one routed expert (elements)."
    )
    shared_expert_intermediate_size: int = Field(
        default=0,
        ge=0,
        le=10_000_000,
        description="MoE: total width of the shared experts every token runs through, per MoE layer (elements).",
    )
    first_k_dense_replace: int = Field(
        default=0,
        ge=0,
        le=1024,
        description="MoE: leading layers with a dense MLP of intermediate_size instead of experts (count).",
    )

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return schema_with_name_forms(core_schema, handler, TARGET_MODEL_PRESETS)

    @model_validator(mode="before")
    @classmethod
    def _fill_from_preset(cls, data: Any) -> Any:
        return expand_preset(data, TARGET_MODEL_PRESETS)

    @model_validator(mode="after")
    def _check_shape(self, info: ValidationInfo) -> TargetModelSpec:
        problems: list[tuple[tuple[str | int, ...], str]] = []
        heads, kv_heads, tp = self.num_attention_heads, self.num_key_value_heads, self.tensor_parallel_size
        if heads % kv_heads:
            problems.append((("num_key_value_heads",), f"must divide num_attention_heads ({heads}), got {kv_heads}"))
        if heads % tp:
            problems.append(
                (("tensor_parallel_size",), f"must divide num_attention_heads ({heads}) as vLLM requires, got {tp}")
            )
        problems += self._moe_problems()
        check_rules(problems)
        estimate = self.estimated_parameters
        if not 0.75 <= self.num_parameters / estimate <= 1.33:
            notify(
                info,
                ("num_parameters",),
                f"{self.num_parameters:.3g} is far from the {estimate:.3g} that the layer shapes imply; check "
                "the count (it sets the weight bytes read per step)",
            )
        return self

    def _moe_problems(self) -> list[tuple[tuple[str | int, ...], str]]:
        if self.num_experts == 0:
            given = [
                name
                for name in (
                    "num_experts_per_tok",
                    "moe_intermediate_size",
                    "shared_expert_intermediate_size",
                    "first_k_dense_replace",
                )
                if getattr(self, name)
            ]
            return [
                ((name,), f"only for an MoE model (num_experts > 0), got {getattr(self, name)} with num_experts 0")
                for name in given
            ]
        problems: list[tuple[tuple[str | int, ...], str]] = []
        if not 1 <= self.num_experts_per_tok <= self.num_experts:
            problems.append(
                (
                    ("num_experts_per_tok",),
                    f"must be in [1, num_experts] = [1, {self.num_experts}] for an "
                    f"MoE model, got {self.num_experts_per_tok}",
                )
            )
        if self.moe_intermediate_size < 1:
            problems.append(
                (("moe_intermediate_size",), f"must be >= 1 for an MoE model, got {self.moe_intermediate_size}")
            )
        if self.first_k_dense_replace >= self.num_hidden_layers:
            problems.append(
                (
                    ("first_k_dense_replace",),
                    f"must be < num_hidden_layers ({self.num_hidden_layers}), got {self.first_k_dense_replace}",
                )
            )
        if not problems and self.routed_expert_parameters >= self.num_parameters:
            problems.append(
                (
                    ("num_parameters",),
                    f"must exceed the routed experts' {self.routed_expert_parameters:.3g} "
                    f"parameters that the MoE shape implies, got {self.num_parameters:.3g}",
                )
            )
        return problems

    @property
    def is_moe(self) -> bool:
        """The MLP is a mixture of experts."""
        return self.num_experts > 0

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is routed experts (count; 0 for a dense model)."""
        return self.num_hidden_layers - self.first_k_dense_replace if self.is_moe else 0

    @property
    def expert_parameters(self) -> float:
        """Parameters of one routed expert summed over the MoE layers (count): what a pass reads per expert touched."""
        return float(self.num_moe_layers * 3 * self.hidden_size * self.moe_intermediate_size)

    @property
    def routed_expert_parameters(self) -> float:
        """Parameters of all routed experts (count; 0 for a dense model)."""
        return self.num_experts * self.expert_parameters

    @property
    def active_parameters(self) -> float:
        """Parameters one token runs through: everything but the routed experts it skips (count)."""
        return self.num_parameters - (self.num_experts - self.num_experts_per_tok) * self.expert_parameters

    @property
    def estimated_parameters(self) -> float:
        """Parameters implied by the shapes (Llama-style attention; dense or MoE MLPs; count)."""
        attention = layer_parameters(
            self.hidden_size, 0, self.num_attention_heads, self.num_key_value_heads, self.head_dim
        )
        dense_layers = self.num_hidden_layers - self.num_moe_layers
        mlp = dense_layers * 3 * self.hidden_size * self.intermediate_size + self.routed_expert_parameters
        if self.is_moe:  # shared experts and the router
            mlp += (
                self.num_moe_layers * self.hidden_size * (3 * self.shared_expert_intermediate_size + self.num_experts)
            )
        embeddings = self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)
        return self.num_hidden_layers * attention + mlp + embeddings

    @property
    def lm_head_parameters(self) -> int:
        """Parameters of the LM head (count)."""
        return self.vocab_size * self.hidden_size

    @property
    def parameters_read_per_pass(self) -> float:
        """Parameters one forward reads from HBM whatever its tokens: all but an untied embedding table (only
        gathered) and the routed experts (read as the tokens touch them; see ``spectune.cost``)."""
        untied = 0 if self.tie_word_embeddings else self.lm_head_parameters
        return self.num_parameters - untied - self.routed_expert_parameters

    @property
    def kv_cache_bytes_per_token(self) -> float:
        """KV-cache bytes one token occupies across all layers and all GPUs of a replica (bytes)."""
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * self.kv_cache_bytes_per_element


class DrafterSpec(SpectuneModel):
    """What proposes the draft tokens and how: K sequential passes, one parallel pass, or a lookup off the GPU."""

    preset: DrafterPresetName | None = Field(
        default=None,
        description="Drafter preset that filled the fields not given (e.g. eagle3-llama-3.1-8b, llama-3.2-1b, "
        "ngram); default_drafter(method, target) picks one.",
    )
    name: str = Field(min_length=1, max_length=200, description="Display name.")
    method: Method = Field(description="The speculative method this drafter serves (vLLM's method name).")
    drafting: DraftingMode | None = Field(
        default=None,
        description="sequential: K passes, one token each (eagle, eagle3, mtp, draft_model); parallel: one pass "
        "drafts all K (dflash, dspark); lookup: no neural pass (ngram, ngram_gpu, suffix). Default: from method.",
    )
    num_parameters: float = Field(
        ge=0,
        le=1e14,
        description="Parameters one draft pass reads from HBM: layers and LM head, not embedding "
        "gathers (count; 0 for lookup drafters).",
    )
    num_hidden_layers: int = Field(default=0, ge=0, le=1024, description="Decoder layers with a KV cache (count).")
    hidden_size: int = Field(default=0, ge=0, le=1_000_000, description="Drafter width (elements).")
    num_attention_heads: int = Field(default=0, ge=0, le=4096, description="Query heads (count).")
    num_key_value_heads: int = Field(default=0, ge=0, le=4096, description="Key/value heads (count).")
    head_dim: int = Field(default=0, ge=0, le=4096, description="Width of one attention head (elements).")
    vocab_size: int = Field(
        default=0, ge=0, le=10_000_000, description="Draft vocabulary (tokens); draft logits per position."
    )
    bytes_per_parameter: float = Field(default=2.0, gt=0, le=8, description="Weight storage (bytes/parameter).")
    kv_cache_bytes_per_element: float = Field(default=2.0, gt=0, le=8, description="KV-cache storage (bytes/element).")
    tensor_parallel_size: int | None = Field(
        default=None, ge=1, le=1024, description="GPUs the drafter spans (GPUs); default: the target's, as in vLLM."
    )
    host_time_per_request_s: float = Field(
        default=0.0, ge=0, le=1.0, description="CPU time a lookup drafter spends per request per step (seconds)."
    )

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return schema_with_name_forms(core_schema, handler, DRAFTER_PRESETS)

    @model_validator(mode="before")
    @classmethod
    def _fill_from_preset(cls, data: Any) -> Any:
        data = expand_preset(data, DRAFTER_PRESETS)
        if isinstance(data, dict) and data.get("drafting") is None and isinstance(data.get("method"), str):
            mode = drafting_mode(data["method"])
            if mode is not None:
                data = {**data, "drafting": mode}
        return data

    @model_validator(mode="after")
    def _check_mode(self) -> DrafterSpec:
        problems: list[tuple[tuple[str | int, ...], str]] = []
        expected = drafting_mode(self.method)
        # a sequential drafter trained for it (P-EAGLE, PARD) drafts in parallel: vLLM's parallel_drafting
        allowed = (expected, "parallel") if expected == "sequential" else (expected,)
        if self.drafting not in allowed:
            problems.append(
                (
                    ("drafting",),
                    f"method '{self.method}' drafts as {' or '.join(map(repr, allowed))}, got '{self.drafting}'",
                )
            )
        if self.drafting == "lookup":
            if self.num_parameters != 0:
                problems.append((("num_parameters",), f"must be 0 for a lookup drafter, got {self.num_parameters:g}"))
        else:
            for name in (
                "num_parameters",
                "num_hidden_layers",
                "hidden_size",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "vocab_size",
            ):
                if getattr(self, name) <= 0:
                    value = getattr(self, name)
                    problems.append(((name,), f"must be > 0 for a {self.drafting} (neural) drafter, got {value}"))
            if self.num_key_value_heads > 0 and self.num_attention_heads % self.num_key_value_heads:
                problems.append(
                    (
                        ("num_key_value_heads",),
                        f"must divide num_attention_heads ({self.num_attention_heads}), got {self.num_key_value_heads}",
                    )
                )
        check_rules(problems)
        return self

    @property
    def kv_cache_bytes_per_token(self) -> float:
        """Draft KV-cache bytes per token across its layers and GPUs (bytes)."""
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * self.kv_cache_bytes_per_element


_SHAPE_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
)


def default_drafter(method: str, target_model: TargetModelSpec) -> DrafterSpec:
    """The drafter a method gets when the user names none.

    Heads (eagle, eagle3, mtp, dflash, dspark) are sized from the target's shape; draft_model picks
    Llama-3.2-1B for Llama targets, Qwen3-0.6B for Qwen3-8B and Qwen3-1.7B for Qwen3-32B; lookup
    methods (ngram, ngram_gpu, suffix) cost no GPU time. Raises ``SpectuneError`` for draft_model with
    a target that is not a preset, and for an unknown method.
    """
    mode = drafting_mode(method)
    if mode is None:
        raise SpectuneError(f"no drafter for method {method!r}; methods: {', '.join(_SORTED_METHODS)}")
    if mode == "lookup":
        return DrafterSpec.model_validate(method)
    preset = target_model.preset
    if (
        preset is not None
        and _has_preset_shape(target_model, preset)
        and (method != "draft_model" or preset in _DRAFT_LLM_TARGETS)
    ):
        return DrafterSpec.model_validate(default_drafter_preset(method, preset))
    if method != "draft_model":
        return DrafterSpec.model_validate(head_drafter_fields(method, target_model.model_dump()))
    raise SpectuneError(
        f"no default draft model for target '{target_model.name}' (defaults exist for the presets "
        f"{', '.join(_DRAFT_LLM_TARGETS)} in their preset shape); give the drafter explicitly (preset "
        "llama-3.2-1b, qwen3-0.6b, qwen3-1.7b, or its shape)"
    )


def _has_preset_shape(target_model: TargetModelSpec, preset: str) -> bool:
    fields = TARGET_MODEL_PRESETS[preset]
    return all(getattr(target_model, name) == fields[name] for name in _SHAPE_FIELDS) and active_mlp_width(
        target_model.model_dump()
    ) == active_mlp_width(fields)


_DRAFT_LLM_TARGETS = tuple(name for name in TARGET_MODEL_PRESETS if name not in ("deepseek-v3", "gemma-4-31b"))
_SORTED_METHODS = ("eagle", "eagle3", "mtp", "draft_model", "dflash", "dspark", "ngram", "ngram_gpu", "suffix")

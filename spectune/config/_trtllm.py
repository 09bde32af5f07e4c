"""TensorRT-LLM LLM-API options fragments: the ``speculative_config`` of ``trtllm-serve --extra_llm_api_options``.

A fragment is a YAML or JSON mapping whose ``speculative_config`` names a ``decoding_type`` (vLLM's
config has no such key, which is how ``spectune validate`` tells them apart). The rules are those of
TensorRT-LLM's LLM API (``tensorrt_llm/llmapi/llm_args.py``, ``DecodingBaseConfig`` and the
per-method configs; nvidia.github.io/TensorRT-LLM, llm-api/reference):

- ``draft_len_schedule`` maps batch-size thresholds (>= 1) to draft lengths (>= 0); it must contain
  batch size 1, with ``max_draft_len`` as its length, and no length may exceed ``max_draft_len``;
- Eagle, Eagle3 and Draft_Target need ``speculative_model`` and ``max_draft_len`` > 0; NGram needs
  ``max_draft_len`` > 0; MTP sets ``max_draft_len`` to ``num_nextn_predict_layers``.

Other top-level options (``cuda_graph_config``, ``kv_cache_config``, ...) belong to TensorRT-LLM and
are left to it; unknown keys *inside* ``speculative_config`` are refused, since a misspelt key there
silently changes what is served.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from spectune.config._base import SpectuneModel
from spectune.config._loader import SourceMapping
from spectune.config._messages import problems_from_validation_error
from spectune.errors import DocumentError, Problem

__all__ = ["TRTLLM_DECODING_TYPES", "TrtllmSpeculativeConfig", "is_trtllm_options", "load_trtllm_options"]

TRTLLM_DECODING_TYPES = ("Eagle", "Eagle3", "MTP", "NGram", "Draft_Target")
_NEEDS_MODEL = ("Eagle", "Eagle3", "Draft_Target")
# DecodingBaseConfig and per-method fields spectune does not check but TensorRT-LLM accepts.
_PASSED_THROUGH = (
    "max_total_draft_tokens", "max_concurrency", "load_format", "acceptance_rate_window_size",
    "acceptance_rate_threshold", "acceptance_window", "acceptance_length_threshold", "use_rejection_sampling",
    "allow_advanced_sampling", "advanced_sampling_mode", "enable_penalty", "eagle_choices", "greedy_sampling",
    "posterior_threshold", "use_dynamic_tree", "dynamic_tree_max_topK", "num_eagle_layers",
    "max_non_leaves_per_layer", "eagle3_one_model", "eagle3_layers_to_capture", "eagle3_model_arch",
    "is_keep_all", "is_use_oldest", "is_public_pool", "use_relaxed_acceptance_for_thinking", "relaxed_topk",
    "relaxed_delta", "use_mtp_vanilla", "mtp_eagle_one_model", "begin_thinking_phase_token",
    "end_thinking_phase_token",
)  # fmt: skip


class TrtllmSpeculativeConfig(SpectuneModel):
    """The checked part of TensorRT-LLM's ``speculative_config``."""

    decoding_type: Literal["Eagle", "Eagle3", "MTP", "NGram", "Draft_Target"] = Field(
        description="TensorRT-LLM's speculative method."
    )
    max_draft_len: int | None = Field(default=None, ge=0, description="Largest draft length (tokens).")
    speculative_model: str | None = Field(default=None, min_length=1, description="Drafter checkpoint (id or path).")
    draft_len_schedule: dict[int, int] | None = Field(
        default=None, description="Batch-size threshold (requests) -> draft length (tokens)."
    )
    num_nextn_predict_layers: int | None = Field(default=None, ge=1, description="MTP modules (one draft token each).")
    max_matching_ngram_size: int | None = Field(default=None, ge=1, description="NGram: longest pattern (tokens).")
    passed_through: dict[str, Any] = Field(
        default_factory=dict, description="Other TensorRT-LLM fields, not checked by spectune."
    )

    @model_validator(mode="after")
    def _check(self) -> TrtllmSpeculativeConfig:
        draft_len = self.num_nextn_predict_layers if self.decoding_type == "MTP" else self.max_draft_len
        if self.decoding_type == "MTP" and self.num_nextn_predict_layers is None:
            draft_len = 1  # TensorRT-LLM's default
        if self.decoding_type != "MTP" and not draft_len:
            raise ValueError(f"max_draft_len must be > 0 for {self.decoding_type}, got {self.max_draft_len}")
        if self.decoding_type in _NEEDS_MODEL and self.speculative_model is None:
            raise ValueError(f"speculative_model (the drafter) is required for {self.decoding_type}")
        schedule = self.draft_len_schedule
        if schedule is None:
            return self
        bad = [f"{b}: {n}" for b, n in schedule.items() if b < 1 or n < 0]
        if bad:
            raise ValueError(f"draft_len_schedule: thresholds must be >= 1 and lengths >= 0, got {', '.join(bad)}")
        if 1 not in schedule:
            raise ValueError(f"draft_len_schedule must contain batch size 1 ({{1: {draft_len}}}), got {schedule}")
        if schedule[1] != draft_len:
            raise ValueError(f"draft_len_schedule[1] must equal max_draft_len {draft_len}, got {schedule[1]}")
        over = [f"{b}: {n}" for b, n in schedule.items() if draft_len is not None and n > draft_len]
        if over:
            raise ValueError(f"draft_len_schedule: lengths must be <= max_draft_len {draft_len}, got {', '.join(over)}")
        return self

    def thresholds(self) -> list[tuple[int, int]]:
        """(threshold, draft length), ascending, as TensorRT-LLM sorts the schedule."""
        return sorted((self.draft_len_schedule or {}).items())


def is_trtllm_options(source: SourceMapping) -> bool:
    """Whether a parsed file is a TensorRT-LLM options fragment (a speculative_config with decoding_type)."""
    section = source.data.get("speculative_config")
    return isinstance(section, dict) and "decoding_type" in section


def load_trtllm_options(source: SourceMapping) -> TrtllmSpeculativeConfig:
    """Check a parsed fragment; ``DocumentError`` names file, line and field of every problem.

    It takes the parsed mapping, not a path: a file is read once (a pipe cannot be read twice)."""
    section = source.data.get("speculative_config")
    if not isinstance(section, dict):
        line = source.positions.line_of(("speculative_config",))
        raise DocumentError([Problem(source.file, line, "speculative_config", "must be a mapping")])
    known = set(TrtllmSpeculativeConfig.model_fields) - {"passed_through"}
    unknown = [key for key in section if key not in known and key not in _PASSED_THROUGH]
    if unknown:
        allowed = ", ".join(sorted(known | set(_PASSED_THROUGH)))
        raise DocumentError(
            [
                Problem(
                    source.file,
                    source.positions.line_of(("speculative_config", key), key=True),
                    f"speculative_config.{key}",
                    f"unknown TensorRT-LLM speculative field; allowed: {allowed}",
                )
                for key in unknown
            ]
        )
    data = {key: value for key, value in section.items() if key in known}
    data["passed_through"] = {key: value for key, value in section.items() if key not in known}
    try:
        config = TrtllmSpeculativeConfig.model_validate(data)
    except ValidationError as err:
        raise DocumentError(
            problems_from_validation_error(
                err, file=source.file, positions=source.positions, prefix=("speculative_config",)
            )
        ) from None
    return config

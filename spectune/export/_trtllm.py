"""The recommendation as a TensorRT-LLM LLM-API options fragment (``trtllm.yaml``).

``trtllm-serve MODEL --extra_llm_api_options trtllm.yaml`` (or ``LLM(model, **yaml.safe_load(...))``)
reads it. The K table becomes ``speculative_config.draft_len_schedule``: each row ``[start, end, K]``
gives the threshold ``start: K``, so the thresholds are the table's row starts, and ``{1: max_draft_len}``
comes first, as TensorRT-LLM requires (``tensorrt_llm/llmapi/llm_args.py``,
``DecodingBaseConfig.validate_draft_len_schedule_and_sort``). A table whose first K is not its largest
has no such form, and neither has a method without a TensorRT-LLM decoding type: no fragment then.

What spectune simulated is vLLM's serving of the table; the fragment's ``mark:`` lines say where
TensorRT-LLM's documented serving differs or may differ (docs/calibration.md, "TensorRT-LLM").
"""

from __future__ import annotations

from typing import Any

import yaml

from spectune.config import TrtllmSpeculativeConfig
from spectune.study import Recommendation

__all__ = ["TRTLLM_DECODING_TYPE", "trtllm_options", "trtllm_yaml"]

# vLLM method -> TensorRT-LLM decoding_type
TRTLLM_DECODING_TYPE = {
    "eagle": "Eagle",
    "eagle3": "Eagle3",
    "mtp": "MTP",
    "ngram": "NGram",
    "draft_model": "Draft_Target",
}


def trtllm_options(recommendation: Recommendation) -> tuple[dict[str, Any] | None, str]:
    """The fragment's mapping, or None and why TensorRT-LLM cannot take the recommendation."""
    candidate = recommendation.space.candidate(recommendation.combo.candidate)
    decoding_type = TRTLLM_DECODING_TYPE.get(candidate.method)
    schedule = recommendation.schedule
    top = max(k for _, _, k in schedule)
    if decoding_type is None:
        return None, f"TensorRT-LLM has no decoding type for vLLM's method {candidate.method!r}"
    if top == 0:
        return None, "speculation is off at every batch size: serve TensorRT-LLM without speculative_config"
    if recommendation.adaptive_verification:
        return None, "TensorRT-LLM has no adaptive verification: the recommended K are its caps, not a table to serve"
    if schedule[0][2] != top:
        return None, (
            f"the table starts at K={schedule[0][2]} below its largest K={top}; TensorRT-LLM's draft_len_schedule must "
            "start with {1: max_draft_len}"
        )
    section: dict[str, Any] = {"decoding_type": decoding_type}
    if decoding_type == "MTP":
        section["num_nextn_predict_layers"] = top
    else:
        section["max_draft_len"] = top
    model = candidate.speculative_base.get("model")
    if model and decoding_type in ("Eagle", "Eagle3", "Draft_Target"):
        section["speculative_model"] = str(model)
    if decoding_type == "NGram" and candidate.speculative_base.get("prompt_lookup_max"):
        section["max_matching_ngram_size"] = int(candidate.speculative_base["prompt_lookup_max"])
    section["draft_len_schedule"] = {start: k for start, _, k in schedule}
    TrtllmSpeculativeConfig.model_validate(section)  # what TensorRT-LLM would refuse, spectune refuses first
    return {"speculative_config": section}, ""


def _marks(recommendation: Recommendation) -> list[str]:
    combo = recommendation.combo
    marks = [
        "spectune simulated this schedule as vLLM serves its K table; TensorRT-LLM may serve it otherwise:",
        "- the draft length comes from the largest threshold <= the batch size (LLM API docs of draft_len_schedule);",
        "  releases whose get_draft_len_for_batch_size reads keys as upper bounds ('batch sizes up to that key',",
        "  speculation off past the last key; TensorRT-LLM PR #10860) serve this map differently: check your release;",
        "- TensorRT-LLM captures CUDA graphs per draft length and merges the thresholds into its CUDA-graph batch",
        "  sizes; with cuda_graph_config.enable_padding a batch runs padded up to the next captured size, whose",
        "  step time is not the one spectune simulated for the unpadded batch.",
    ]
    if combo.rejection_sample_method != "standard" or combo.draft_sample_method != "greedy":
        marks.append(
            f"- simulated {combo.rejection_sample_method} verification with {combo.draft_sample_method} drafting; "
            "TensorRT-LLM verifies by its own rule (use_rejection_sampling, allow_advanced_sampling: see its docs)."
        )
    return marks


def trtllm_yaml(recommendation: Recommendation) -> str | None:
    """The fragment's text with its comment lines; None when TensorRT-LLM cannot take the recommendation."""
    options, _ = trtllm_options(recommendation)
    if options is None:
        return None
    header = [
        f"# TensorRT-LLM LLM-API options from spectune study {recommendation.space.name!r}: {recommendation.combo.label}.",
        "# Use: trtllm-serve MODEL --extra_llm_api_options trtllm.yaml",
        f"# vLLM's K table {[list(row) for row in recommendation.schedule]} -> draft_len_schedule (row start: K).",
        *(f"# mark: {line}" for line in _marks(recommendation)),
    ]
    return "\n".join(header) + "\n" + yaml.safe_dump(options, sort_keys=False)

"""How vLLM 0.33.0 reads a speculative config before its field rules apply.

``vllm serve`` rewrites dashed keys (``vllm/engine/arg_utils.py:2126-2128``); ``SpeculativeConfig.__post_init__``
normalises MTP aliases, infers the method from the model's name and fills K where it has a default
(``vllm/config/speculative.py:1226-1300, 1432-1612``). The early-2026 forms (``strict``/``probabilistic``,
the scalar ``synthetic_acceptance_rate``) and V0-era keys are refused here with what to write instead, or,
for ``--vllm-version 0.32`` and in a simulation document, read with a notice.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationInfo

from spectune.config._base import check_rules, notify
from spectune.config._vllm_rules import refuses_early_2026_forms

__all__ = [
    "MTP_DEFAULT_N_PREDICT",
    "SUFFIX_DEFAULT_MAX_TREE_DEPTH",
    "default_num_speculative_tokens",
    "infer_method",
    "read_as_vllm",
]

# vLLM's defaults for a config without K: suffix decoding's tree depth caps K; an MTP checkpoint's
# n_predict (num_nextn_predict_layers) is 1 in DeepSeek-V3, Qwen3-Next, GLM-4.5 and MiMo.
SUFFIX_DEFAULT_MAX_TREE_DEPTH = 24
MTP_DEFAULT_N_PREDICT = 1

_REMOVED_METHODS = {
    "medusa": "removed in vLLM 0.33.0",
    "mlp_speculator": "removed in vLLM 0.33.0",
}
# Keys of old (V0-era) configs and common mistakes, with what to write instead.
_RENAMED_KEYS = {
    "tensor_parallel_size": "the draft's tensor parallelism is 'draft_tensor_parallel_size'",
    "speculative_model": "V0 key; write 'model'",
    "num_lookahead_slots": "V0 key; write 'num_speculative_tokens'",
    "speculative_draft_tensor_parallel_size": "V0 key; write 'draft_tensor_parallel_size'",
    "ngram_prompt_lookup_max": "V0 key; write 'prompt_lookup_max'",
    "ngram_prompt_lookup_min": "V0 key; write 'prompt_lookup_min'",
    "speculative_disable_by_batch_size": "V0 key; add a [start_bs, end_bs, 0] row to "
    "'num_speculative_tokens_per_batch_size' instead",
    "disable_by_batch_size": "V0 key; add a [start_bs, end_bs, 0] row to "
    "'num_speculative_tokens_per_batch_size' instead",
    "verify_method": "block verification is rejection_sample_method: block",
}
_LEGACY_REJECTION_METHODS = {
    # Feb-Mar 2026 names: "strict" verified one-hot (greedy) drafts, "probabilistic" used the full draft
    # distribution; vLLM later split them into the verification rule and the draft sampling.
    "strict": "greedy",
    "probabilistic": "probabilistic",
}


# vLLM 0.33.0's MTPModelTypes (vllm/config/speculative.py:38-67): only these normalise to 'mtp'.
_MTP_ALIASES = frozenset(
    {
        "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp",
        "glm_ocr_mtp", "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp", "exaone4_5_mtp", "qwen3_next_mtp",
        "qwen4_exp_mtp", "qwen3_5_mtp", "longcat_flash_mtp", "bailing_hybrid_v3_mtp", "minimax_m3_mtp",
        "bailing_hybrid_mtp", "kimi_k3_mtp", "pangu_ultra_moe_mtp", "step3p5_mtp", "step5_mtp", "hy_v3_mtp",
        "hy_v4_mtp", "gemma4_mtp", "inkling_mtp", "glm5_next_mtp",
    }
)  # fmt: skip


def _is_mtp_alias(method: str) -> bool:
    return method in _MTP_ALIASES


def read_as_vllm(data: Any, info: ValidationInfo, *, fills_default_k: bool, methods: Sequence[str]) -> Any:
    """``data`` as vLLM reads it: keys rewritten, method normalised or inferred, K filled where vLLM fills it.

    ``fills_default_k``: whether a missing K takes vLLM's default (a config to serve or simulate; a study
    candidate has no K). ``methods``: the allowed method names, for the message on a removed one.
    """
    if not isinstance(data, dict):
        return data
    # `vllm serve` turns '-' into '_' in every key first (vllm/engine/arg_utils.py:2126-2128); a later
    # spelling of the same key silently wins there, so it does here, with a warning.
    rewritten: dict[Any, Any] = {}
    for key, value in data.items():
        name = key.replace("-", "_") if isinstance(key, str) else key
        if name in rewritten:
            notify(info, (key,), f"same field as an earlier key ('{name}'); vLLM keeps this later value")
        rewritten[name] = value
    data = rewritten
    problems = []
    for key, advice in _RENAMED_KEYS.items():
        if key in data:
            problems.append(((key,), f"not a speculative-config field ({advice}), got {data[key]!r}"))
    method = data.get("method")
    if isinstance(method, str):
        if method in _REMOVED_METHODS:
            problems.append((("method",), f"'{method}' was {_REMOVED_METHODS[method]}; allowed: {', '.join(methods)}"))
        elif _is_mtp_alias(method):
            data["method"] = "mtp"
            notify(info, ("method",), f"'{method}' is an MTP alias; vLLM normalises it to 'mtp'")
        model = data.get("model")
        if data["method"] in ("draft_model", "mtp") and isinstance(model, str):
            # vLLM detects the method from the draft's name for every model-based method but these four
            # (vllm/config/speculative.py:1432-1468), so an explicit draft_model or mtp can become eagle.
            detected = _method_from_draft_name(model)
            if detected is not None:
                notify(
                    info,
                    ("method",),
                    f"vLLM 0.33.0 detects '{detected}' from the draft's name {model!r} and serves "
                    f"'{detected}', not '{data['method']}'",
                )
                data["method"] = detected
    elif method is None and isinstance(data.get("model"), str):
        # An explicit null is the same as no method (vllm/config/speculative.py:1235-1244).
        inferred = infer_method(data["model"])
        data["method"] = inferred
        notify(info, ("model",), f"no method given; inferred '{inferred}' from the model name as vLLM does")
    # Only an absent K takes a default: vLLM's field is an int, so an explicit null is refused.
    if fills_default_k and "num_speculative_tokens" not in data:
        _default_num_speculative_tokens(data, info)
    rule = data.get("rejection_sample_method")
    if isinstance(rule, str) and rule in _LEGACY_REJECTION_METHODS:
        draft_sampling = _LEGACY_REJECTION_METHODS[rule]
        instead = f"rejection_sample_method: standard with draft_sample_method: {draft_sampling}"
        if not refuses_early_2026_forms(info):
            data["rejection_sample_method"] = "standard"
            data.setdefault("draft_sample_method", draft_sampling)
            notify(
                info,
                ("rejection_sample_method",),
                f"'{rule}' is deprecated (removed in vLLM 0.33.0); read as {instead}",
            )
        else:
            problems.append(
                (
                    ("rejection_sample_method",),
                    f"'{rule}' was removed in vLLM 0.33.0 (allowed: standard, block, synthetic, fly); write "
                    f"{instead}, or validate with --vllm-version 0.32",
                )
            )
    if "synthetic_acceptance_rate" in data and refuses_early_2026_forms(info):
        problems.append(
            (
                ("synthetic_acceptance_rate",),
                "removed in vLLM 0.33.0, which refuses the key; write synthetic_acceptance_rates (K "
                "per-position rates) or synthetic_acceptance_length, or validate with --vllm-version 0.32, "
                f"got {data['synthetic_acceptance_rate']!r}",
            )
        )
    check_rules(problems)
    return data


def default_num_speculative_tokens(method: object, suffix_decoding_max_tree_depth: object = None) -> int | None:
    """vLLM's K for a config that gives none: suffix decoding's tree depth, an MTP checkpoint's n_predict
    (taken as 1); None for the other methods, which need K."""
    if method == "suffix":
        depth = suffix_decoding_max_tree_depth
        return depth if isinstance(depth, int) and depth >= 1 else SUFFIX_DEFAULT_MAX_TREE_DEPTH
    return MTP_DEFAULT_N_PREDICT if method == "mtp" else None


def _default_num_speculative_tokens(data: dict[str, Any], info: ValidationInfo) -> None:
    """K for a config that gives none, as vLLM 0.33.0 defaults it: suffix only. MTP has no default there:
    with a model its n_predict check compares None > 1 (vllm/config/speculative.py:1486-1487), without
    one _verify_args refuses the missing K (:1946-1951)."""
    method = data.get("method")
    if method == "mtp":
        check_rules(
            [
                (
                    ("num_speculative_tokens",),
                    "required for method 'mtp': vLLM 0.33.0 takes no default from the checkpoint's n_predict; "
                    "give num_speculative_tokens (1 for DeepSeek-V3, Qwen3-Next, GLM-4.5)",
                )
            ]
        )
    if method == "suffix":
        data["num_speculative_tokens"] = default_num_speculative_tokens(
            method, data.get("suffix_decoding_max_tree_depth")
        )
    if method == "dspark" and isinstance(data.get("model"), str):
        block_size = _dspark_block_size(data["model"])
        if block_size is None:
            check_rules(
                [
                    (
                        ("num_speculative_tokens",),
                        "required here: vLLM 0.33.0 takes a DSpark draft's K from the block_size in its config.json "
                        f"(speculative.py:1592-1599), which spectune cannot read from {data['model']!r} (not a local "
                        "folder with a config.json giving block_size); give num_speculative_tokens",
                    )
                ]
            )
        data["num_speculative_tokens"] = block_size


def _dspark_block_size(model: str) -> int | None:
    """The block_size (or dspark_block_size) of a local DSpark draft's config.json, as vLLM reads it."""
    try:
        config = json.loads((Path(model) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for key in ("block_size", "dspark_block_size"):
        value = config.get(key) if isinstance(config, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
    return None


def infer_method(model: str) -> str:
    """vLLM 0.33.0's inference from the model name: "ngram" itself (vllm/config/speculative.py:1240-1242),
    then the draft's name in this order (:1445-1468) -- "eagle-" with the dash, so "EAGLE3-..." is not
    eagle -- else draft_model."""
    if _is_custom_proposer_path(model):
        return "custom_class"
    if model in ("ngram", "[ngram]"):
        return "ngram"
    return _method_from_draft_name(model) or "draft_model"


def _is_custom_proposer_path(model: str) -> bool:
    """A dotted import path such as ``pkg.MyProposer`` (vllm/config/speculative.py:1215-1224)."""
    if model.startswith(("http://", "https://", "file://")) or "/" in model:
        return False
    parts = model.split(".")
    return len(parts) >= 2 and all(part.isidentifier() for part in parts)


def _method_from_draft_name(model: str) -> str | None:
    """The method vLLM 0.33.0 detects from a draft's name (vllm/config/speculative.py:1445-1468), if any."""
    name = model.lower()
    for marker, method in (("eagle-", "eagle"), ("eagle3", "eagle3"), ("dflash", "dflash"), ("dspark", "dspark")):
        if marker in name:
            return method
    return None

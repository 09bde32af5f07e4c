"""The speculative config: vLLM's ``--speculative-config`` with vLLM's own field names.

A user's existing ``--speculative-config`` JSON validates unchanged; spectune adds nothing to it. The
rules are vLLM 0.33's (``vllm/config/speculative.py``), plus the checks a simulation needs, plus the
older field forms (``strict``/``probabilistic``, the scalar ``synthetic_acceptance_rate``) that
vLLM configs of early 2026 still carry.

The per-batch-size K table (``num_speculative_tokens_per_batch_size``) is read as vLLM's dynamic
speculation reads it (``vllm/v1/spec_decode/dynamic/utils.py``): rows are inclusive ranges, sorted by
their start; the first must start at batch size 1 and none may overlap (vLLM refuses both); a batch
size in a gap between rows, or past the last row, takes the previous row's K; and the K scheduled is
``min(num_speculative_tokens, row K)``. spectune warns where vLLM silently clamps or fills a gap.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, model_validator

from spectune.config._base import SpectuneModel, check_rules, notify
from spectune.config._rates import (
    acceptance_length_to_rates,
    decay_to_conditional_rates,
    mean_rate_to_decay,
    unconditional_to_conditional,
)
from spectune.config._vllm_rules import v1_fallback_reasons, v1_refusals, vllm_version

__all__ = [
    "FIELDS_ADDED_FOR_VLLM_0_33",
    "MAX_NUM_SPECULATIVE_TOKENS",
    "METHODS",
    "SpeculativeConfig",
    "SpeculativeFields",
    "Method",
    "UNSIMULATED_METHODS",
    "default_num_speculative_tokens",
]

# Fields added for vLLM 0.33.0: a study made before them hashes without them while they are unset.
FIELDS_ADDED_FOR_VLLM_0_33 = (
    "disable_eagle_block_drop",
    "disable_lookahead_block_hashes",
    "draft_lm_head_quantization",
    "dspark_draft_topk",
    "index_share_for_mtp_iteration",
    "fly_window_size",
    "fly_entropy_threshold",
    "fly_entropy_top_k",
)

# The largest K the simulator runs (its cost grows with K). vLLM has no upper bound (V2 sets none; V1's
# sampler asserts 128 at run time), so a larger K validates and only simulate/study refuse it.
MAX_NUM_SPECULATIVE_TOKENS = 64
# vLLM's defaults for a config without K: suffix decoding's tree depth caps K; an MTP checkpoint's
# n_predict (num_nextn_predict_layers) is 1 in DeepSeek-V3, Qwen3-Next, GLM-4.5 and MiMo.
SUFFIX_DEFAULT_MAX_TREE_DEPTH = 24
MTP_DEFAULT_N_PREDICT = 1

Method = Literal[
    "eagle",
    "eagle3",
    "mtp",
    "ngram",
    "ngram_gpu",
    "draft_model",
    "suffix",
    "dflash",
    "dspark",
    "custom_class",
    "extract_hidden_states",
]
METHODS: tuple[str, ...] = Method.__args__  # type: ignore[attr-defined]

# Methods whose drafter proposes tokens without a distribution: nothing for probabilistic
# drafting or block verification to use.
_DISTRIBUTION_FREE_METHODS = {"ngram", "ngram_gpu", "suffix"}
_PROMPT_LOOKUP_METHODS = {"ngram", "ngram_gpu"}
_NEEDS_MODEL = {"eagle", "eagle3", "draft_model", "dflash", "custom_class"}
# vLLM methods that validate but that spectune does not simulate: a user's own proposer class, and
# hidden-state extraction (which drafts nothing).
UNSIMULATED_METHODS = ("custom_class", "extract_hidden_states")

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


class SpeculativeFields(SpectuneModel):
    """vLLM's speculative-config fields and their rules; K optional, as in vLLM.

    Two models narrow it: ``SpeculativeConfig`` (a config to serve or simulate: K resolved, vLLM's
    default for suffix and mtp filled in) and a study candidate's ``SpeculativeBase`` (no K: the study
    searches it). Neither is the other, so neither has to pretend about K.
    """

    # Whether a missing K takes vLLM's default for the method (suffix, mtp) before the fields validate.
    _fills_default_k: ClassVar[bool] = False

    method: Method = Field(
        description="Drafting method. MTP aliases such as 'deepseek_mtp' normalise to 'mtp'; without a "
        "method, vLLM infers it from the draft model's name (eagle3, eagle, dflash, dspark) or falls "
        "back to 'draft_model'.",
    )
    model: str | None = Field(
        default=None,
        description="Draft model, EAGLE head or drafter weights (a Hugging Face id or a path). Not "
        "needed for mtp/dspark (they reuse the target) or ngram/suffix (no weights).",
    )
    num_speculative_tokens: int | None = Field(
        default=None,
        ge=1,
        description="K: draft tokens proposed and verified per step (tokens). No upper bound, as in vLLM; "
        f"the simulator runs K <= {MAX_NUM_SPECULATIVE_TOKENS}.",
    )
    rejection_sample_method: Literal["standard", "block", "synthetic", "fly"] = Field(
        default="standard",
        description="Verification rule: 'standard' (Leviathan/Chen, token by token), 'block' (Sun et "
        "al. 2024, joint over the block; gains only with probabilistic drafting), 'synthetic' "
        "(forced acceptance at given rates, a performance stand-in) or 'fly' (vLLM's lossy FLy rule; "
        "validates, not simulated). The early-2026 'strict' and 'probabilistic' are refused for vLLM 0.33.0 "
        "and read as 'standard' for --vllm-version 0.32.",
    )
    draft_sample_method: Literal["greedy", "probabilistic"] = Field(
        default="greedy",
        description="Draft sampling: 'greedy' verifies one-hot drafts (q = 1 at the draft token); "
        "'probabilistic' keeps the drafter's full distribution (more memory, higher acceptance).",
    )
    synthetic_acceptance_rate: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Older (March 2026) synthetic form, removed in vLLM 0.33.0: mean joint acceptance rate "
        "p̄ in [0, 1] (fraction), turned into conditional rates a0 * gamma^i.",
    )
    synthetic_acceptance_rates: list[float] | None = Field(
        default=None,
        description="Synthetic form: unconditional per-position acceptance rates (fractions, each in "
        "[0, 1], non-increasing, exactly K of them): entry i = P(drafts 0..i all accepted).",
    )
    synthetic_acceptance_length: float | None = Field(
        default=None,
        description="Synthetic form: mean acceptance length L in [1, K+1] (tokens per step, bonus "
        "included), resolved to the minimum-variance schedule (ones, one fraction, zeros).",
    )
    num_speculative_tokens_per_batch_size: list[tuple[int, int, int]] | None = Field(
        default=None,
        description="Dynamic speculation: rows [start_bs, end_bs, K] (batch sizes in requests, "
        "inclusive; K in tokens, 0 = speculation off), non-overlapping, the first starting at 1. As in "
        "vLLM, a batch size in a gap or past the last row takes the previous row's K, and the K served "
        "is min(num_speculative_tokens, row K).",
    )
    draft_tensor_parallel_size: int | None = Field(
        default=None, ge=1, le=64, description="Tensor parallelism of the drafter (GPUs); 1 or the target's."
    )
    prompt_lookup_min: int | None = Field(
        default=None, ge=1, description="ngram: shortest prompt n-gram to match (tokens)."
    )
    prompt_lookup_max: int | None = Field(
        default=None, ge=1, description="ngram: longest prompt n-gram to match (tokens)."
    )
    fly_window_size: int | None = Field(
        default=None, ge=1, description="FLy: window (tokens), below K; vLLM's default min(6, K - 1)."
    )
    fly_entropy_threshold: float | None = Field(default=None, ge=0.0, description="FLy: entropy threshold (nats).")
    fly_entropy_top_k: int | None = Field(default=None, ge=1, description="FLy: tokens in the entropy estimate.")

    # Secondary vLLM knobs: accepted so that real configs validate, not simulated.
    quantization: str | None = Field(default=None, description="Drafter quantization (vLLM name), not simulated.")
    revision: str | None = Field(default=None, description="Drafter model revision, not simulated.")
    code_revision: str | None = Field(default=None, description="Drafter code revision, not simulated.")
    max_model_len: int | None = Field(default=None, ge=1, description="Drafter context limit (tokens).")
    enforce_eager: bool | None = Field(default=None, description="Run the drafter without CUDA graphs.")
    parallel_drafting: bool | None = Field(
        default=None,
        description="Draft all K tokens in one drafter pass (P-EAGLE, PARD; always on for dflash/dspark); "
        "simulated as one pass.",
    )
    enable_adaptive_verification: bool | None = Field(
        default=None,
        description="vLLM's adaptive verification: each step sizes the verification budget from start-up "
        "step costs and per-slot acceptance estimates (any method; not with use_local_argmax_reduction "
        "except for dspark, as in vLLM 0.33.0).",
    )
    disable_padded_drafter_batch: bool | None = Field(default=None, description="vLLM drafter batching knob.")
    use_local_argmax_reduction: bool | None = Field(default=None, description="vLLM TP argmax knob.")
    use_heterogeneous_vocab: bool | None = Field(
        default=None, description="Drafter vocabulary differs from the target's."
    )
    disable_eagle_block_drop: bool | None = Field(
        default=None, description="vLLM 0.33 prefix-cache knob for EAGLE-like drafters, not simulated."
    )
    disable_lookahead_block_hashes: bool | None = Field(
        default=None, description="vLLM 0.33 prefix-cache knob for EAGLE-like drafters, not simulated."
    )
    draft_lm_head_quantization: Literal["fp8", "nvfp4"] | None = Field(
        default=None,
        description="vLLM 0.33: quantize the drafter's copy of the target's lm_head (eagle, eagle3, mtp); "
        "not simulated.",
    )
    dspark_draft_topk: int | None = Field(
        default=None, ge=1, description="vLLM 0.33 DSpark: top-k base-logit candidates, not simulated."
    )
    index_share_for_mtp_iteration: bool | None = Field(
        default=None, description="vLLM 0.33 MTP: reuse the first step's sparse indices (mtp only), not simulated."
    )
    attention_backend: str | None = Field(default=None, description="Drafter attention backend (vLLM name).")
    kv_cache_dtype: str | None = Field(default=None, description="Drafter KV-cache dtype (vLLM name).")
    moe_backend: str | None = Field(default=None, description="Drafter MoE backend (vLLM name).")
    suffix_decoding_max_tree_depth: int | None = Field(default=None, ge=1, description="suffix: tree depth (tokens).")
    suffix_decoding_max_cached_requests: int | None = Field(default=None, ge=0, description="suffix: cached requests.")
    suffix_decoding_max_spec_factor: float | None = Field(default=None, ge=0.0, description="suffix: spec factor.")
    suffix_decoding_min_token_prob: float | None = Field(
        default=None, ge=0.0, le=1.0, description="suffix: minimum token probability (fraction)."
    )

    @model_validator(mode="before")
    @classmethod
    def _read_older_forms(cls, data: Any, info: ValidationInfo) -> Any:
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
                problems.append(
                    (("method",), f"'{method}' was {_REMOVED_METHODS[method]}; allowed: {', '.join(METHODS)}")
                )
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
            inferred = _infer_method(data["model"])
            data["method"] = inferred
            notify(info, ("model",), f"no method given; inferred '{inferred}' from the model name as vLLM does")
        # Only an absent K takes a default: vLLM's field is an int, so an explicit null is refused.
        if cls._fills_default_k and "num_speculative_tokens" not in data:
            _default_num_speculative_tokens(data, info)
        rule = data.get("rejection_sample_method")
        if isinstance(rule, str) and rule in _LEGACY_REJECTION_METHODS:
            draft_sampling = _LEGACY_REJECTION_METHODS[rule]
            instead = f"rejection_sample_method: standard with draft_sample_method: {draft_sampling}"
            if not _refuses_early_2026_forms(info):
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
        if "synthetic_acceptance_rate" in data and _refuses_early_2026_forms(info):
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

    @model_validator(mode="after")
    def _check_cross_field_rules(self, info: ValidationInfo) -> SpeculativeFields:
        problems: list[tuple[tuple[str | int, ...], str]] = []
        synthetic_fields = [
            name
            for name in ("synthetic_acceptance_rate", "synthetic_acceptance_rates", "synthetic_acceptance_length")
            if getattr(self, name) is not None
        ]
        if self.rejection_sample_method == "synthetic":
            if not synthetic_fields:
                problems.append(
                    (
                        ("rejection_sample_method",),
                        "'synthetic' needs exactly one of synthetic_acceptance_rates, "
                        "synthetic_acceptance_length, synthetic_acceptance_rate; got none",
                    )
                )
            elif len(synthetic_fields) > 1:
                for name in synthetic_fields[1:]:
                    problems.append(((name,), f"give exactly one synthetic form; got {' and '.join(synthetic_fields)}"))
        else:
            for name in synthetic_fields:
                problems.append(
                    (
                        (name,),
                        "only allowed when rejection_sample_method is 'synthetic', got "
                        f"rejection_sample_method '{self.rejection_sample_method}'",
                    )
                )
        problems += self._check_synthetic_values()
        problems += self._check_schedule()
        problems += self._check_fly()
        problems += self._check_model_given(info)
        problems += v1_refusals(self)
        if (
            self.prompt_lookup_min is not None
            and self.prompt_lookup_max is not None
            and self.prompt_lookup_min > self.prompt_lookup_max
        ):
            problems.append(
                (
                    ("prompt_lookup_min",),
                    f"must be <= prompt_lookup_max ({self.prompt_lookup_max}), got {self.prompt_lookup_min}",
                )
            )
        # vLLM 0.33.0 restricts adaptive verification by one rule only, whatever the field's docstring says
        # (vllm/config/speculative.py:1713-1722): outside dspark it needs the draft logits, which
        # use_local_argmax_reduction never materializes.
        if self.enable_adaptive_verification and self.use_local_argmax_reduction and self.method != "dspark":
            problems.append(
                (
                    ("use_local_argmax_reduction",),
                    "must be false with enable_adaptive_verification for method "
                    f"'{self.method}' (adaptive verification estimates acceptance from the draft logits, "
                    "which local argmax reduction never materializes; only dspark allows both), got true",
                )
            )
        problems += self._check_heterogeneous_vocab()
        problems += self._check_method_only_fields()
        check_rules(problems)
        self._advise(info)
        return self

    def _check_fly(self) -> list[tuple[tuple[str | int, ...], str]]:
        """vLLM 0.33.0's FLy rules (vllm/config/speculative.py:2014-2030)."""
        k = self.num_speculative_tokens
        if self.rejection_sample_method != "fly" or k is None:
            return []
        if self.method == "extract_hidden_states":
            return [
                (
                    ("rejection_sample_method",),
                    "'fly' is not compatible with method 'extract_hidden_states', which drafts nothing",
                )
            ]
        if k < 2:
            return [(("num_speculative_tokens",), f"must be >= 2 with rejection_sample_method 'fly', got {k}")]
        window = self.fly_window_size
        if window is not None and window >= k:
            return [(("fly_window_size",), f"must be < num_speculative_tokens ({k}) with FLy, got {window}")]
        return []

    def _check_model_given(self, info: ValidationInfo) -> list[tuple[tuple[str | int, ...], str]]:
        """Methods that vLLM 0.33.0 gives no default draft (speculative.py:1252-1295): the config needs ``model``.

        Only a config to serve (a speculative document) is held to it: a simulation sizes its drafter from
        presets and never loads the weights.
        """
        if not _is_served_config(info) or self.model is not None or self.method not in _NEEDS_MODEL:
            return []
        if self.num_speculative_tokens is None:
            return []
        return [
            (
                ("model",),
                f"required for method '{self.method}' (vLLM 0.33.0 refuses it without the draft's weights: "
                '"num_speculative_tokens was provided but without speculative model")',
            )
        ]

    def _check_method_only_fields(self) -> list[tuple[tuple[str | int, ...], str]]:
        """vLLM 0.33.0's fields that only one family of methods takes."""
        problems: list[tuple[tuple[str | int, ...], str]] = []
        # vllm/config/speculative.py:1953-1958
        if self.draft_lm_head_quantization is not None and self.method not in ("eagle", "eagle3", "mtp"):
            problems.append(
                (
                    ("draft_lm_head_quantization",),
                    f"only for methods eagle, eagle3, mtp (a drafter sharing the target's lm_head), "
                    f"got method '{self.method}'",
                )
            )
        # :1640-1641, checked where vLLM builds a draft model, so ngram and suffix never reach it.
        if self.dspark_draft_topk is not None and self.method not in ("dspark", *_DISTRIBUTION_FREE_METHODS):
            problems.append((("dspark_draft_topk",), f"only for method 'dspark', got method '{self.method}'"))
        # :1659-1668: without a model, the DSpark draft is the target's own (DeepSeek-V4) DSpark stages,
        # rewritten to DSparkDraftModel (:1543-1567), which has no top-k candidates.
        if self.dspark_draft_topk is not None and self.method == "dspark" and self.model is None:
            problems.append(
                (
                    ("dspark_draft_topk",),
                    "only for Qwen3 (and Qwen3-Omni) DSpark drafts; without a model the draft is the target's "
                    "own DSpark stages, which vLLM 0.33.0 refuses it for",
                )
            )
        # :1704-1711
        if self.index_share_for_mtp_iteration is not None and self.method != "mtp":
            problems.append((("index_share_for_mtp_iteration",), f"only for method 'mtp', got method '{self.method}'"))
        return problems

    def _check_heterogeneous_vocab(self) -> list[tuple[tuple[str | int, ...], str]]:
        """vLLM 0.33.0's three rules for a drafter with its own vocabulary (vllm/config/speculative.py:1995-2012)."""
        if not self.use_heterogeneous_vocab:
            return []
        field = ("use_heterogeneous_vocab",)
        if self.method != "draft_model":
            return [(field, f"only works with method 'draft_model', got method '{self.method}'")]
        problems: list[tuple[tuple[str | int, ...], str]] = []
        if self.draft_sample_method != "greedy":
            problems.append(
                (
                    ("draft_sample_method",),
                    f"must be 'greedy' with use_heterogeneous_vocab, got '{self.draft_sample_method}'",
                )
            )
        if self.use_local_argmax_reduction:
            problems.append(
                (
                    ("use_local_argmax_reduction",),
                    "must be false with use_heterogeneous_vocab (the vocabulary intersection needs the full "
                    "draft logits), got true",
                )
            )
        return problems

    def _check_synthetic_values(self) -> list[tuple[tuple[str | int, ...], str]]:
        k = self.num_speculative_tokens
        problems: list[tuple[tuple[str | int, ...], str]] = []
        if k is None:  # no K, no synthetic form (a study candidate refuses both)
            return problems
        rates = self.synthetic_acceptance_rates
        if rates is not None:
            if len(rates) != k:
                problems.append(
                    (
                        ("synthetic_acceptance_rates",),
                        f"must have num_speculative_tokens ({k}) entries, got {len(rates)}",
                    )
                )
            for i, rate in enumerate(rates):
                if not 0.0 <= rate <= 1.0:
                    problems.append((("synthetic_acceptance_rates", i), f"must be in [0, 1], got {rate}"))
            for i in range(1, len(rates)):
                if rates[i] > rates[i - 1]:
                    problems.append(
                        (
                            ("synthetic_acceptance_rates", i),
                            "unconditional rates must be non-increasing (P(first i+1 accepted) <= "
                            f"P(first i accepted)), got {rates[i]} after {rates[i - 1]}",
                        )
                    )
        length = self.synthetic_acceptance_length
        if length is not None and not 1.0 <= length <= k + 1:
            problems.append((("synthetic_acceptance_length",), f"must be in [1, K+1] = [1, {k + 1}], got {length}"))
        return problems

    def _check_schedule(self) -> list[tuple[tuple[str | int, ...], str]]:
        """What vLLM refuses in the K table: empty, bad ranges, K < 0, overlaps, no row starting at 1."""
        rows = self.num_speculative_tokens_per_batch_size
        if rows is None:
            return []
        field = "num_speculative_tokens_per_batch_size"
        if not rows:
            return [((field,), "must have at least one [start_bs, end_bs, K] row, got []")]
        problems: list[tuple[tuple[str | int, ...], str]] = []
        for i, (start, end, k) in enumerate(rows):
            if start < 1:
                problems.append(((field, i, 0), f"start_bs must be >= 1, got {start}"))
            if end < start:
                problems.append(((field, i, 1), f"end_bs must be >= start_bs ({start}), got {end}"))
            if k < 0:
                problems.append(((field, i, 2), f"K must be >= 0 (0 = speculation off), got {k}"))
        if problems:
            return problems
        order = sorted(range(len(rows)), key=lambda i: rows[i][0])  # vLLM sorts rows by start_bs
        previous: int | None = None
        for i in order:
            start = rows[i][0]
            if previous is not None and start <= rows[previous][1]:
                problems.append(
                    (
                        (field, i, 0),
                        f"rows must not overlap: start_bs must be > {rows[previous][1]} (end_bs of row "
                        f"{previous}, [{rows[previous][0]}, {rows[previous][1]}]), got {start}",
                    )
                )
            previous = i
        first = rows[order[0]]
        if first[0] != 1:
            problems.append(
                (
                    (field, order[0], 0),
                    "the first row must start at batch size 1 (vLLM refuses a table that leaves small "
                    f"batches without a K), got {first[0]}",
                )
            )
        return problems

    def _advise_schedule(self, info: ValidationInfo) -> None:
        """Notices where vLLM serves something other than what the table says: clamped K, filled gaps."""
        rows = self.num_speculative_tokens_per_batch_size
        if not rows:
            return
        field = "num_speculative_tokens_per_batch_size"
        k_max = self.num_speculative_tokens
        if k_max is None:  # no K, no table (a study candidate refuses both)
            return
        for i, (start, end, k) in enumerate(rows):
            if k > k_max:
                notify(
                    info,
                    (field, i, 2),
                    f"K {k} is above num_speculative_tokens ({k_max}); vLLM serves batch sizes "
                    f"{start}-{end} with min({k_max}, {k}) = {k_max}",
                )
        ordered = sorted(rows)
        for (_, end, k), (start, _, _) in zip(ordered, ordered[1:]):
            if start > end + 1:
                notify(
                    info,
                    (field,),
                    f"batch sizes {end + 1}-{start - 1} fall between rows; vLLM serves them with the "
                    f"previous row's K, min({k_max}, {k}) = {min(k_max, k)}",
                )

    def _advise(self, info: ValidationInfo) -> None:
        self._advise_schedule(info)
        if self.synthetic_acceptance_rate is not None:
            notify(
                info,
                ("synthetic_acceptance_rate",),
                "deprecated: vLLM 0.33.0 refuses it (write synthetic_acceptance_rates or "
                "synthetic_acceptance_length); read for vLLM 0.32 and simulated with the March 2026 rule "
                "(rates a0 * gamma^i)",
            )
        for field, feature in v1_fallback_reasons(self):
            served = ""
            if self.rejection_sample_method == "block" or self.draft_sample_method == "probabilistic":
                served = " (V1 has no block verification and keeps no draft probabilities for it: served as "
                served += "standard verification of one-hot drafts, and simulated so)"
            notify(
                info,
                field,
                f"vLLM 0.33.0's Model Runner V2 does not support {feature}; vLLM serves this config on its V1 "
                f"runner instead{served}",
            )
        if self.rejection_sample_method == "fly":
            notify(
                info,
                ("rejection_sample_method",),
                "FLy is lossy (vLLM warns that it may degrade outputs); vLLM serves it, spectune does not simulate it",
            )
        if self.method in _DISTRIBUTION_FREE_METHODS and self.draft_sample_method == "probabilistic":
            notify(
                info,
                ("draft_sample_method",),
                f"'{self.method}' proposes tokens without a distribution; vLLM verifies its drafts as one-hot",
            )
        if self.rejection_sample_method == "block" and self.method in _DISTRIBUTION_FREE_METHODS:
            notify(
                info,
                ("rejection_sample_method",),
                f"'{self.method}' has no draft distribution; vLLM falls back to standard verification",
            )
        elif self.rejection_sample_method == "block" and self.draft_sample_method == "greedy":
            notify(
                info,
                ("rejection_sample_method",),
                "block verification gains nothing in expectation with one-hot (greedy) drafts; it pays "
                "off with draft_sample_method: probabilistic",
            )
        if self.prompt_lookup_min is not None or self.prompt_lookup_max is not None:
            if self.method not in _PROMPT_LOOKUP_METHODS:
                notify(
                    info, ("prompt_lookup_max",), f"prompt lookup only applies to ngram, ignored for '{self.method}'"
                )


class SpeculativeConfig(SpeculativeFields):
    """vLLM's speculative config (``--speculative-config``), as spectune validates and simulates it."""

    _fills_default_k: ClassVar[bool] = True

    num_speculative_tokens: int = Field(
        ge=1,
        description="K: draft tokens proposed and verified per step (tokens; no upper bound, as in vLLM; the "
        f"simulator runs K <= {MAX_NUM_SPECULATIVE_TOKENS}). With a per-batch-size "
        "table it caps every row's K and sizes vLLM's buffers. Optional for suffix (default "
        "suffix_decoding_max_tree_depth, 24); required for mtp, as in vLLM 0.33.0.",
    )

    # --- derived values the simulator uses ----------------------------------------------------

    def synthetic_conditional_rates(self) -> list[float] | None:
        """Per-position conditional acceptance rates of the synthetic form, length K (None if not synthetic)."""
        k = self.num_speculative_tokens
        if self.synthetic_acceptance_rates is not None:
            return unconditional_to_conditional(self.synthetic_acceptance_rates)
        if self.synthetic_acceptance_length is not None:
            return unconditional_to_conditional(acceptance_length_to_rates(self.synthetic_acceptance_length, k))
        if self.synthetic_acceptance_rate is not None:
            return decay_to_conditional_rates(*mean_rate_to_decay(self.synthetic_acceptance_rate, k), k)
        return None

    def num_speculative_tokens_for_batch(self, batch_size: int) -> int:
        """The K vLLM schedules at ``batch_size`` running requests (tokens).

        Without a table, ``num_speculative_tokens``. With one, the last row starting at or below
        ``batch_size`` gives its K -- also for a batch size in the gap after that row or past the last
        row -- capped at ``num_speculative_tokens``. A batch size below 1 gets 0 (vLLM's unused index 0).
        """
        rows = self.num_speculative_tokens_per_batch_size
        if not rows:
            return self.num_speculative_tokens
        covering = [(start, k) for start, _, k in rows if start <= batch_size]
        if not covering:
            return 0
        return min(self.num_speculative_tokens, max(covering)[1])


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


def _is_served_config(info: ValidationInfo) -> bool:
    """Whether the config is one handed to vLLM as is (a speculative document), not a simulation's part."""
    context: Any = info.context
    return isinstance(context, dict) and context.get("served_config") is True


def _refuses_early_2026_forms(info: ValidationInfo) -> bool:
    """vLLM 0.33.0 refuses strict/probabilistic and the scalar synthetic rate; a simulation still reads them."""
    return _is_served_config(info) and vllm_version(info) != "0.32"


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


def _infer_method(model: str) -> str:
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

"""The speculative config: vLLM's ``--speculative-config`` with vLLM's own field names.

A user's existing ``--speculative-config`` JSON validates unchanged; spectune adds nothing to it. The
rules are vLLM 0.33.0's (``vllm/config/speculative.py``), checked against a recorded oracle
(``tests/data/vllm-0.33.0-verdicts.json``), plus the checks a simulation needs. How vLLM reads the input
before its rules (dashed keys, aliases, method inference, K defaults, the early-2026 forms) is
``spectune.config._vllm_reading``; the K table's rules are ``_schedule``; what the runner choice adds
(V1 fallback, what V1 refuses, what is not simulated) is ``_vllm_rules``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, model_validator

from spectune.config._base import SpectuneModel, check_rules, notify
from spectune.config._rates import (
    acceptance_length_to_rates,
    decay_to_conditional_rates,
    mean_rate_to_decay,
    unconditional_to_conditional,
)
from spectune.config._schedule import schedule_notices, schedule_problems
from spectune.config._vllm_reading import default_num_speculative_tokens, read_as_vllm
from spectune.config._vllm_rules import (
    is_served_config,
    refuses_early_2026_forms,
    v1_fallback_reasons,
    v1_refusals,
)

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
    def _read_as_vllm_reads_it(cls, data: Any, info: ValidationInfo) -> Any:
        return read_as_vllm(data, info, fills_default_k=cls._fills_default_k, methods=METHODS)

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
                forms = "synthetic_acceptance_rates, synthetic_acceptance_length"
                if not refuses_early_2026_forms(info):  # the scalar form is read where it is still served
                    forms += ", synthetic_acceptance_rate"
                problems.append((("rejection_sample_method",), f"'synthetic' needs exactly one of {forms}; got none"))
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
        problems += schedule_problems(self.num_speculative_tokens_per_batch_size)
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
        if not is_served_config(info) or self.model is not None or self.method not in _NEEDS_MODEL:
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

    def _advise(self, info: ValidationInfo) -> None:
        for path, message in schedule_notices(self.num_speculative_tokens_per_batch_size, self.num_speculative_tokens):
            notify(info, path, message)
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

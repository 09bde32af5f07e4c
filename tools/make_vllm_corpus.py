"""Write the corpus of ``--speculative-config`` JSONs that ``tools/vllm_oracle.py`` records vLLM's verdicts on.

Each case is one file, named for what it tries; the files are plain vLLM JSON (what a user passes to
``vllm serve --speculative-config``), so ``spectune validate`` reads them unchanged. Rerun after editing
the cases, then rerun the oracle:

    python tools/make_vllm_corpus.py && /tmp/oracle-venv/bin/python tools/vllm_oracle.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

EAGLE = "yuhuili/EAGLE-LLaMA3.1-Instruct-8B"
EAGLE3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
DRAFT = "meta-llama/Llama-3.2-1B-Instruct"
OTHER_VOCAB = "Qwen/Qwen3-0.6B"
DFLASH = "z-lab/Llama-3.1-8B-Instruct-DFlash-b16"
DSPARK = "deepseek-ai/dspark_qwen3_8b_block7"
# A tiny DSpark draft checked in beside the corpus (paths are relative to the repository root, the working
# directory of both the oracle and the test, as vLLM resolves them).
LOCAL_DSPARK = "tests/data/vllm-models/dspark_qwen3_8b_block7"
MODEL_OF = {"eagle": EAGLE, "eagle3": EAGLE3, "draft_model": DRAFT, "dflash": DFLASH, "dspark": DSPARK}
TABLE = [[1, 16, 4], [17, 64, 2], [65, 256, 0]]


def _method(method: str, **fields: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"method": method}
    if method in MODEL_OF:
        config["model"] = MODEL_OF[method]
    return {**config, "num_speculative_tokens": 3, **fields}


def cases() -> dict[str, dict[str, Any]]:
    all_methods = ["eagle", "eagle3", "mtp", "ngram", "ngram_gpu", "draft_model", "suffix", "dflash", "dspark"]
    out: dict[str, dict[str, Any]] = {}
    for method in all_methods:
        out[f"method-{method}"] = _method(method)
        out[f"adaptive-{method}"] = _method(method, enable_adaptive_verification=True)
        out[f"table-{method}"] = _method(method, num_speculative_tokens=4, num_speculative_tokens_per_batch_size=TABLE)
    for method in ("eagle", "eagle3", "mtp", "ngram", "draft_model", "dflash", "dspark"):
        out[f"adaptive-local-argmax-{method}"] = _method(
            method, enable_adaptive_verification=True, use_local_argmax_reduction=True
        )
    for method in ("eagle", "eagle3", "mtp", "ngram", "draft_model", "dflash", "dspark"):
        for rule in ("standard", "block"):
            out[f"rule-{rule}-probabilistic-{method}"] = _method(
                method, rejection_sample_method=rule, draft_sample_method="probabilistic"
            )
        out[f"rule-block-greedy-{method}"] = _method(method, rejection_sample_method="block")
    out["rule-block-probabilistic-suffix"] = _method("suffix", rejection_sample_method="block")
    out["local-argmax-eagle"] = _method("eagle", use_local_argmax_reduction=True)
    # MTP aliases and names vLLM does not have
    for alias in ("deepseek_mtp", "qwen3_next_mtp", "glm4_moe_mtp", "gemma4_mtp"):
        out[f"alias-{alias}"] = _method(alias)
    out["alias-invented-llama_mtp"] = _method("llama_mtp")
    out["method-medusa"] = {"method": "medusa", "model": EAGLE, "num_speculative_tokens": 3}
    out["method-mlp_speculator"] = {"method": "mlp_speculator", "model": EAGLE, "num_speculative_tokens": 3}
    out["method-unknown"] = _method("lookahead")
    # K edge cases
    for k in (1, 2, 7, 64, 65, 128, 200):
        out[f"k-{k}-eagle"] = _method("eagle", num_speculative_tokens=k)
    out["k-65-ngram"] = _method("ngram", num_speculative_tokens=65)
    out["k-0"] = _method("eagle", num_speculative_tokens=0)
    out["k-negative"] = _method("eagle", num_speculative_tokens=-2)
    out["k-string"] = _method("eagle", num_speculative_tokens="3")
    out["k-float-whole"] = _method("eagle", num_speculative_tokens=3.0)
    out["k-float-fraction"] = _method("eagle", num_speculative_tokens=3.5)
    out["k-bool-true"] = _method("ngram", num_speculative_tokens=True)
    out["k-word"] = _method("eagle", num_speculative_tokens="three")
    out["k-missing-eagle"] = {"method": "eagle", "model": EAGLE}
    out["k-missing-mtp"] = {"method": "mtp"}
    out["k-missing-mtp-alias"] = {"method": "deepseek_mtp"}
    out["k-missing-ngram"] = {"method": "ngram"}
    out["k-missing-suffix"] = {"method": "suffix"}
    out["k-missing-suffix-tree-depth"] = {"method": "suffix", "suffix_decoding_max_tree_depth": 8}
    # vLLM reads the draft's block_size from its config.json; a local folder lets spectune read it too
    out["k-missing-dspark-block-size"] = {"method": "dspark", "model": LOCAL_DSPARK}
    out["k-missing-dspark-no-model"] = {"method": "dspark"}
    out["k-null-suffix"] = {"method": "suffix", "num_speculative_tokens": None}
    # synthetic forms
    out["synthetic-rates"] = _method(
        "eagle", rejection_sample_method="synthetic", synthetic_acceptance_rates=[0.8, 0.6, 0.4]
    )
    out["synthetic-rates-ngram"] = _method(
        "ngram", rejection_sample_method="synthetic", synthetic_acceptance_rates=[0.5, 0.3, 0.1]
    )
    out["synthetic-rates-wrong-length"] = _method(
        "eagle", rejection_sample_method="synthetic", synthetic_acceptance_rates=[0.8, 0.6]
    )
    out["synthetic-rates-increasing"] = _method(
        "eagle", rejection_sample_method="synthetic", synthetic_acceptance_rates=[0.5, 0.6, 0.4]
    )
    out["synthetic-rates-above-one"] = _method(
        "eagle", rejection_sample_method="synthetic", synthetic_acceptance_rates=[1.2, 0.6, 0.4]
    )
    out["synthetic-rates-negative"] = _method(
        "eagle", rejection_sample_method="synthetic", synthetic_acceptance_rates=[0.8, 0.6, -0.1]
    )
    out["synthetic-length"] = _method("eagle", rejection_sample_method="synthetic", synthetic_acceptance_length=2.6)
    out["synthetic-length-k-plus-one"] = _method(
        "eagle", rejection_sample_method="synthetic", synthetic_acceptance_length=4.0
    )
    out["synthetic-length-above"] = _method(
        "eagle", rejection_sample_method="synthetic", synthetic_acceptance_length=4.5
    )
    out["synthetic-length-below-one"] = _method(
        "eagle", rejection_sample_method="synthetic", synthetic_acceptance_length=0.5
    )
    out["synthetic-both-forms"] = _method(
        "eagle",
        rejection_sample_method="synthetic",
        synthetic_acceptance_rates=[0.8, 0.6, 0.4],
        synthetic_acceptance_length=2.0,
    )
    out["synthetic-no-form"] = _method("eagle", rejection_sample_method="synthetic")
    out["synthetic-rates-without-rule"] = _method("eagle", synthetic_acceptance_rates=[0.8, 0.6, 0.4])
    out["synthetic-length-without-rule"] = _method("eagle", synthetic_acceptance_length=2.0)
    out["synthetic-table"] = _method(
        "eagle",
        rejection_sample_method="synthetic",
        synthetic_acceptance_length=2.0,
        num_speculative_tokens_per_batch_size=[[1, 8, 3], [9, 256, 1]],
    )
    # legacy (early-2026) forms and V0 keys
    out["legacy-mean-rate"] = _method("eagle", rejection_sample_method="synthetic", synthetic_acceptance_rate=0.6)
    out["legacy-strict"] = _method("eagle", rejection_sample_method="strict")
    out["legacy-probabilistic"] = _method("eagle", rejection_sample_method="probabilistic")
    out["legacy-speculative-model"] = {"speculative_model": EAGLE, "num_speculative_tokens": 3}
    out["legacy-num-lookahead-slots"] = {"method": "ngram", "num_lookahead_slots": 3}
    out["legacy-tensor-parallel-size"] = _method("eagle", tensor_parallel_size=1)
    out["legacy-disable-by-batch-size"] = _method("eagle", disable_by_batch_size=64)
    out["legacy-ngram-prompt-lookup-max"] = _method("ngram", ngram_prompt_lookup_max=4)
    out["unknown-key"] = _method("eagle", draft_temperature=0.5)
    # K tables
    out["table-gap"] = _method(
        "eagle", num_speculative_tokens=4, num_speculative_tokens_per_batch_size=[[1, 8, 4], [33, 256, 1]]
    )
    out["table-overlap"] = _method(
        "eagle", num_speculative_tokens=4, num_speculative_tokens_per_batch_size=[[1, 16, 4], [16, 256, 1]]
    )
    out["table-first-row-not-one"] = _method(
        "eagle", num_speculative_tokens=4, num_speculative_tokens_per_batch_size=[[2, 16, 4], [17, 256, 1]]
    )
    out["table-clamped"] = _method(
        "eagle", num_speculative_tokens=3, num_speculative_tokens_per_batch_size=[[1, 16, 5], [17, 256, 1]]
    )
    out["table-k-zero-row"] = _method(
        "eagle", num_speculative_tokens=3, num_speculative_tokens_per_batch_size=[[1, 128, 3], [129, 512, 0]]
    )
    out["table-all-zero"] = _method(
        "eagle", num_speculative_tokens=3, num_speculative_tokens_per_batch_size=[[1, 256, 0]]
    )
    out["table-negative-k"] = _method(
        "eagle", num_speculative_tokens=3, num_speculative_tokens_per_batch_size=[[1, 16, -1]]
    )
    out["table-start-zero"] = _method(
        "eagle", num_speculative_tokens=3, num_speculative_tokens_per_batch_size=[[0, 16, 3]]
    )
    out["table-end-before-start"] = _method(
        "eagle", num_speculative_tokens=3, num_speculative_tokens_per_batch_size=[[1, 16, 3], [40, 20, 1]]
    )
    out["table-empty"] = _method("eagle", num_speculative_tokens_per_batch_size=[])
    out["table-unsorted"] = _method(
        "eagle", num_speculative_tokens=4, num_speculative_tokens_per_batch_size=[[17, 256, 2], [1, 16, 4]]
    )
    out["table-short-row"] = _method("eagle", num_speculative_tokens_per_batch_size=[[1, 16]])
    out["table-past-max-num-seqs"] = _method("eagle", num_speculative_tokens_per_batch_size=[[1, 4096, 3]])
    out["table-single-row"] = _method("eagle", num_speculative_tokens_per_batch_size=[[1, 1, 3]])
    out["table-adaptive"] = _method(
        "eagle",
        num_speculative_tokens=4,
        num_speculative_tokens_per_batch_size=TABLE,
        enable_adaptive_verification=True,
    )
    # FLy
    out["fly"] = _method("eagle", num_speculative_tokens=4, rejection_sample_method="fly")
    out["fly-fields"] = _method(
        "eagle",
        num_speculative_tokens=4,
        rejection_sample_method="fly",
        fly_window_size=3,
        fly_entropy_threshold=0.5,
        fly_entropy_top_k=5,
    )
    out["fly-k-1"] = _method("eagle", num_speculative_tokens=1, rejection_sample_method="fly")
    out["fly-window-equal-k"] = _method(
        "eagle", num_speculative_tokens=4, rejection_sample_method="fly", fly_window_size=4
    )
    out["fly-window-zero"] = _method(
        "eagle", num_speculative_tokens=4, rejection_sample_method="fly", fly_window_size=0
    )
    out["fly-top-k-zero"] = _method(
        "eagle", num_speculative_tokens=4, rejection_sample_method="fly", fly_entropy_top_k=0
    )
    out["fly-threshold-negative"] = _method(
        "eagle", num_speculative_tokens=4, rejection_sample_method="fly", fly_entropy_threshold=-0.1
    )
    out["fly-fields-without-fly"] = _method("eagle", num_speculative_tokens=4, fly_window_size=2)
    out["fly-ngram"] = _method("ngram", num_speculative_tokens=4, rejection_sample_method="fly")
    out["fly-k-above-64"] = _method("eagle", num_speculative_tokens=80, rejection_sample_method="fly")
    # fields new in 0.33
    for method in ("eagle", "eagle3", "mtp", "ngram", "draft_model", "dflash"):
        out[f"lm-head-fp8-{method}"] = _method(method, draft_lm_head_quantization="fp8")
    out["lm-head-nvfp4-eagle3"] = _method("eagle3", draft_lm_head_quantization="nvfp4")
    out["lm-head-int8"] = _method("eagle", draft_lm_head_quantization="int8")
    out["lm-head-parallel-drafting-eagle"] = _method("eagle", draft_lm_head_quantization="fp8", parallel_drafting=True)
    out["eagle-block-drop-off"] = _method("eagle", disable_eagle_block_drop=True)
    out["eagle-block-drop-off-ngram"] = _method("ngram", disable_eagle_block_drop=True)
    out["lookahead-block-hashes-off"] = _method("eagle3", disable_lookahead_block_hashes=True)
    out["padded-drafter-batch-off"] = _method("eagle", disable_padded_drafter_batch=True)
    out["dspark-topk"] = _method("dspark", dspark_draft_topk=8)
    out["dspark-topk-zero"] = _method("dspark", dspark_draft_topk=0)
    out["dspark-topk-no-model"] = {"method": "dspark", "num_speculative_tokens": 3, "dspark_draft_topk": 8}
    out["dspark-topk-eagle"] = _method("eagle", dspark_draft_topk=8)
    out["dspark-topk-ngram"] = _method("ngram", dspark_draft_topk=8)
    out["dspark-no-model"] = {"method": "dspark", "num_speculative_tokens": 3}
    out["index-share-mtp"] = _method("mtp", index_share_for_mtp_iteration=True)
    out["index-share-eagle"] = _method("eagle", index_share_for_mtp_iteration=True)
    out["xpress-topc-dflash"] = _method("dflash", xpress_topc=4)
    # dashed keys and null values
    out["dashed-keys"] = {
        "method": "eagle",
        "model": EAGLE,
        "num-speculative-tokens": 3,
        "rejection-sample-method": "block",
    }
    out["dashed-table"] = {
        "method": "ngram",
        "num-speculative-tokens": 4,
        "num-speculative-tokens-per-batch-size": TABLE,
    }
    out["null-method-eagle"] = {"method": None, "model": EAGLE, "num_speculative_tokens": 3}
    out["null-method-draft"] = {"method": None, "model": DRAFT, "num_speculative_tokens": 3}
    out["null-model-ngram"] = {"method": "ngram", "model": None, "num_speculative_tokens": 3}
    out["null-model-eagle"] = {"method": "eagle", "model": None, "num_speculative_tokens": 3}
    out["null-draft-tp"] = _method("eagle", draft_tensor_parallel_size=None)
    out["null-rule"] = _method("eagle", rejection_sample_method=None)
    # method inference from the model name (vllm/config/speculative.py:1235-1244, 1445-1468)
    for label, model in (
        ("eagle-dash", EAGLE),
        ("eagle3", EAGLE3),
        ("speculator-eagle3", "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3"),
        ("eagle-dash-inside", "my-org/llama-eagle-head"),
        ("eagle-no-dash", "my-org/LlamaEagle-8B"),
        ("dflash", DFLASH),
        ("dspark", DSPARK),
        ("draft", DRAFT),
        ("ngram", "ngram"),
        ("ngram-brackets", "[ngram]"),
    ):
        out[f"infer-{label}"] = {"model": model, "num_speculative_tokens": 3}
    # vLLM detects the method from the draft's name also when draft_model or mtp is given (:1432-1468)
    out["detect-draft-model-named-eagle"] = {"method": "draft_model", "model": EAGLE, "num_speculative_tokens": 3}
    out["detect-draft-model-named-eagle3-lm-head"] = {
        "method": "draft_model",
        "model": EAGLE3,
        "num_speculative_tokens": 3,
        "draft_lm_head_quantization": "fp8",
    }
    out["detect-draft-model-named-dflash"] = {"method": "draft_model", "model": DFLASH, "num_speculative_tokens": 3}
    out["detect-draft-model-named-eagle-heterogeneous"] = {
        "method": "draft_model",
        "model": EAGLE,
        "num_speculative_tokens": 3,
        "use_heterogeneous_vocab": True,
    }
    out["detect-mtp-named-eagle3"] = {"method": "mtp", "model": EAGLE3, "num_speculative_tokens": 1}
    out["no-method-no-model"] = {"num_speculative_tokens": 3}
    # vLLM's own methods that spectune validates but does not simulate
    out["method-custom_class"] = {"method": "custom_class", "model": "my_pkg.MyProposer", "num_speculative_tokens": 3}
    out["infer-custom-class"] = {"model": "my_pkg.proposers.MyProposer", "num_speculative_tokens": 3}
    out["custom-class-no-model"] = {"method": "custom_class", "num_speculative_tokens": 3}
    out["custom-class-adaptive"] = {
        "method": "custom_class",
        "model": "my_pkg.MyProposer",
        "num_speculative_tokens": 3,
        "enable_adaptive_verification": True,
    }
    out["method-extract_hidden_states"] = {"method": "extract_hidden_states", "num_speculative_tokens": 1}
    out["extract-hidden-states-fly"] = {
        "method": "extract_hidden_states",
        "num_speculative_tokens": 3,
        "rejection_sample_method": "fly",
    }
    out["infer-eagle-adaptive"] = {"model": EAGLE, "num_speculative_tokens": 3, "enable_adaptive_verification": True}
    out["infer-eagle3-probabilistic"] = {
        "model": EAGLE3,
        "num_speculative_tokens": 3,
        "draft_sample_method": "probabilistic",
    }
    # methods without a model
    for method in ("eagle", "eagle3", "draft_model", "dflash"):
        out[f"no-model-{method}"] = {"method": method, "num_speculative_tokens": 3}
    # parallel drafting and the V1 fallback (vllm/config/vllm.py:3066-3082)
    for method in ("eagle", "eagle3", "ngram", "draft_model", "dflash", "dspark"):
        out[f"parallel-drafting-{method}"] = _method(method, parallel_drafting=True)
    out["parallel-drafting-eagle-block"] = _method(
        "eagle", parallel_drafting=True, rejection_sample_method="block", draft_sample_method="probabilistic"
    )
    out["parallel-drafting-eagle-table"] = _method(
        "eagle", num_speculative_tokens=4, parallel_drafting=True, num_speculative_tokens_per_batch_size=TABLE
    )
    out["parallel-drafting-eagle-adaptive"] = _method(
        "eagle", parallel_drafting=True, enable_adaptive_verification=True
    )
    out["suffix-block"] = _method("suffix", rejection_sample_method="block", draft_sample_method="probabilistic")
    # heterogeneous vocabularies (a draft_model whose vocabulary differs from the target's without the flag
    # is refused by comparing the two checkpoints, speculative.py:2036-2055, which a config alone cannot show)
    out["heterogeneous-vocab"] = {
        "method": "draft_model",
        "model": OTHER_VOCAB,
        "num_speculative_tokens": 3,
        "use_heterogeneous_vocab": True,
    }
    out["heterogeneous-vocab-eagle"] = _method("eagle", use_heterogeneous_vocab=True)
    out["heterogeneous-vocab-probabilistic"] = _method(
        "draft_model", use_heterogeneous_vocab=True, draft_sample_method="probabilistic"
    )
    out["heterogeneous-vocab-local-argmax"] = _method(
        "draft_model", use_heterogeneous_vocab=True, use_local_argmax_reduction=True
    )
    # prompt lookup, tensor parallelism, suffix knobs, secondary fields
    out["ngram-lookup"] = _method("ngram", prompt_lookup_min=2, prompt_lookup_max=4)
    out["ngram-lookup-max-only"] = _method("ngram", prompt_lookup_max=3)
    out["ngram-lookup-min-only"] = _method("ngram", prompt_lookup_min=3)
    out["ngram-lookup-min-above-max"] = _method("ngram", prompt_lookup_min=5, prompt_lookup_max=2)
    out["ngram-lookup-zero"] = _method("ngram", prompt_lookup_min=0)
    out["ngram-lookup-large"] = _method("ngram", prompt_lookup_min=2, prompt_lookup_max=2048)
    out["ngram-gpu-lookup"] = _method("ngram_gpu", prompt_lookup_min=2, prompt_lookup_max=4)
    out["prompt-lookup-on-eagle"] = _method("eagle", prompt_lookup_max=4)
    out["draft-tp-1"] = _method("eagle", draft_tensor_parallel_size=1)
    out["draft-tp-zero"] = _method("eagle", draft_tensor_parallel_size=0)
    out["suffix-knobs"] = _method(
        "suffix",
        suffix_decoding_max_tree_depth=16,
        suffix_decoding_max_cached_requests=100,
        suffix_decoding_max_spec_factor=2.0,
        suffix_decoding_min_token_prob=0.2,
    )
    out["suffix-min-prob-above-one"] = _method("suffix", suffix_decoding_min_token_prob=1.5)
    out["suffix-tree-depth-zero"] = _method("suffix", suffix_decoding_max_tree_depth=0)
    out["enforce-eager"] = _method("eagle", enforce_eager=True)
    out["attention-backend-auto"] = _method("eagle", attention_backend="auto")
    out["draft-sample-unknown"] = _method("eagle", draft_sample_method="topk")
    out["rule-unknown"] = _method("eagle", rejection_sample_method="typical")
    return out


def main(argv: list[str]) -> int:
    folder = Path(argv[1]) if len(argv) > 1 else Path("tests/data/vllm-corpus")
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.json"):
        old.unlink()
    for name, config in cases().items():
        (folder / f"{name}.json").write_text(json.dumps(config, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))

"""Record vLLM 0.33.0's own verdict on every ``--speculative-config`` JSON of a corpus.

Not part of spectune and never run in CI: it needs a throwaway virtual environment that holds
``vllm==0.33.0`` with its pinned dependencies (CPU is enough; nothing here loads weights).

    python -m venv /tmp/oracle-venv && /tmp/oracle-venv/bin/pip install vllm==0.33.0
    /tmp/oracle-venv/bin/python tools/vllm_oracle.py \
        --corpus tests/data/vllm-corpus --out tests/data/vllm-0.33.0-verdicts.json

Each file is taken through the three places where vLLM checks a speculative config:

1. ``EngineArgs.create_speculative_config`` (``vllm/engine/arg_utils.py:2100-2139``): the dashed-key
   rewrite of ``vllm serve``, then ``SpeculativeConfig`` (``vllm/config/speculative.py``) with the
   draft's ``ModelConfig`` built from a tiny local ``config.json`` named like the real checkpoint, so
   that vLLM's name-based method inference sees the same name;
2. ``build_dynamic_sd_schedule_lookup`` (``vllm/v1/spec_decode/dynamic/utils.py:77``), which the
   scheduler (``vllm/v1/core/sched/scheduler.py:325``) and Model Runner V2's CUDA-graph manager
   (``vllm/v1/worker/gpu/cudagraph_utils.py:288``) run at engine start on the K table;
3. the runner choice of ``VllmConfig`` (``vllm/config/vllm.py:731-767``): the features Model Runner V2
   lacks send a config to V1 with a warning, and V1 refuses its own list (``:3053-3151``,
   ``:3332-3337``). Both lists are vLLM's own methods, run on the config built in step 1.

Suffix decoding needs the ``arctic_inference`` package at step 1 (``speculative.py:1727``): an install
matter, not a config rule, so its import check is made to pass and every other suffix rule runs.
Where a verdict also rests on code that cannot run on a CPU (V1's rejection sampler has no block
verification), the entry says so in ``read`` with the file:line it was read from.

Each verdict is ``ok`` (served as written), ``warning`` (served, with a warning that the config is
served otherwise than written or is lossy) or ``error`` (refused); ``fields`` are the config fields
vLLM's message is about, so that a test can check that spectune blames the same one.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import tempfile
import typing
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

LLAMA_VOCAB = 128256
QWEN3_VOCAB = 151936
_LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "vocab_size": LLAMA_VOCAB,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
}
_QWEN3 = {**_LLAMA, "model_type": "qwen3", "vocab_size": QWEN3_VOCAB, "head_dim": 16}
# Tiny config.json files named like the real checkpoints: vLLM infers the method from the name.
MODELS: dict[str, dict[str, Any]] = {
    "meta-llama/Llama-3.1-8B-Instruct": {**_LLAMA, "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2},
    "meta-llama/Llama-3.2-1B-Instruct": {**_LLAMA, "architectures": ["LlamaForCausalLM"]},
    "Qwen/Qwen3-0.6B": {**_QWEN3, "architectures": ["Qwen3ForCausalLM"]},
    "yuhuili/EAGLE-LLaMA3.1-Instruct-8B": {**_LLAMA, "architectures": ["LlamaForCausalLM"]},
    "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B": {**_LLAMA, "architectures": ["LlamaForCausalLMEagle3"]},
    "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3": {**_LLAMA, "architectures": ["LlamaForCausalLMEagle3"]},
    "my-org/llama-eagle-head": {**_LLAMA, "architectures": ["LlamaForCausalLM"]},
    "my-org/LlamaEagle-8B": {**_LLAMA, "architectures": ["LlamaForCausalLM"]},
    "z-lab/Llama-3.1-8B-Instruct-DFlash-b16": {**_LLAMA, "architectures": ["DFlashDraftModel"]},
    "deepseek-ai/DeepSeek-V3": {
        **_LLAMA,
        "model_type": "deepseek_v3",
        "architectures": ["DeepseekV3ForCausalLM"],
        "vocab_size": 129280,
        "num_nextn_predict_layers": 1,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "q_lora_rank": 32,
        "kv_lora_rank": 16,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 8,
        "v_head_dim": 8,
        "n_group": 1,
        "topk_group": 1,
        "first_k_dense_replace": 0,
    },
    "deepseek-ai/dspark_qwen3_8b_block7": {**_QWEN3, "architectures": ["DSparkDraftModel"], "block_size": 7},
}
TARGET = "meta-llama/Llama-3.1-8B-Instruct"
MTP_TARGET = "deepseek-ai/DeepSeek-V3"  # an MTP method drafts with the target's own MTP layers
MAX_NUM_SEQS = 256  # vLLM's default max_num_seqs on a GPU: the dense K lookup's size

# vLLM's free-text messages -> the config field each is about (pydantic errors carry their own loc).
_FIELD_OF_MESSAGE = [
    (r"Batch-size|batch-size|num_speculative_tokens_per_batch_size", ["num_speculative_tokens_per_batch_size"]),
    (r"without speculative model|requires 'model'", ["model", "num_speculative_tokens", "method"]),
    (r"tensor_parallel_size' is not a valid", ["tensor_parallel_size"]),
    (r"draft_tensor_parallel_size", ["draft_tensor_parallel_size"]),
    (r"prompt_lookup", ["prompt_lookup_min", "prompt_lookup_max"]),
    (
        r"synthetic_acceptance_rates / synthetic_acceptance_length",
        ["synthetic_acceptance_rates", "synthetic_acceptance_length", "rejection_sample_method"],
    ),
    (
        r"synthetic_acceptance|synthetic",
        ["synthetic_acceptance_rates", "synthetic_acceptance_length", "rejection_sample_method"],
    ),
    (r"use_heterogeneous_vocab only works", ["use_heterogeneous_vocab", "method"]),
    (r"use_heterogeneous_vocab currently only supports greedy", ["draft_sample_method", "use_heterogeneous_vocab"]),
    (r"use_heterogeneous_vocab is not compatible", ["use_local_argmax_reduction", "use_heterogeneous_vocab"]),
    (r"FLy requires fly_window_size", ["fly_window_size"]),
    (r"FLy", ["num_speculative_tokens", "rejection_sample_method"]),
    (r"draft_lm_head_quantization|draft lm_head quantization", ["draft_lm_head_quantization"]),
    (r"dspark_draft_topk", ["dspark_draft_topk"]),
    (r"xpress_topc", ["xpress_topc"]),
    (r"index_share_for_mtp_iteration", ["index_share_for_mtp_iteration"]),
    (r"Adaptive verification estimates", ["use_local_argmax_reduction", "enable_adaptive_verification"]),
    (r"adaptive draft verification", ["enable_adaptive_verification"]),
    (r"dspark speculative decoding", ["method"]),
    (r"same vocabulary size", ["model"]),
    (r"suffix_decoding_max_tree_depth", ["suffix_decoding_max_tree_depth"]),
    (r"suffix_decoding_max_cached_requests", ["suffix_decoding_max_cached_requests"]),
    (r"suffix_decoding_max_spec_factor", ["suffix_decoding_max_spec_factor"]),
    (r"suffix_decoding_min_token_prob", ["suffix_decoding_min_token_prob"]),
    (r"max_model_len", ["max_model_len"]),
    (r"attention.backend|AttentionBackendEnum", ["attention_backend"]),
    (r"parallel drafting", ["parallel_drafting"]),
    (r"heterogeneous-vocabulary", ["use_heterogeneous_vocab"]),
    (r"speculative method 'suffix'", ["method"]),
    (r"speculative method 'custom_class'", ["method", "model"]),
    (r"num_speculative_tokens|n_predict", ["num_speculative_tokens"]),
]


def _fields_of(message: str) -> list[str]:
    for pattern, fields in _FIELD_OF_MESSAGE:
        if re.search(pattern, message):
            return fields
    raise SystemExit(f"no field known for vLLM's message {message!r}: add a pattern to _FIELD_OF_MESSAGE")


def write_models(root: Path) -> None:
    for name, config in MODELS.items():
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config))


class _Warnings(logging.Handler):
    """Collects what vLLM logs at WARNING while one config is checked."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _pydantic_error(err: Any) -> tuple[str, list[str]]:
    first = err.errors()[0]
    loc = [str(part) for part in first.get("loc", ()) if isinstance(part, str)]
    message = str(first.get("msg", err))
    if first.get("type") == "value_error" or not loc:
        return message, _fields_of(message)
    return message, loc[:1]


class Oracle:
    """vLLM's three checks over one config; built once, since vLLM's imports take seconds."""

    def __init__(self, models: Path) -> None:
        import vllm.config.speculative as speculative_module
        from vllm.config import ModelConfig, ParallelConfig, VllmConfig
        from vllm.engine.arg_utils import EngineArgs
        from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

        speculative_module.has_arctic_inference = lambda: True  # see the module docstring
        self.models = models
        self.ParallelConfig = ParallelConfig
        self.EngineArgs = EngineArgs
        self.lookup = build_dynamic_sd_schedule_lookup
        self.targets = {
            name: ModelConfig(model=str(models / name), skip_tokenizer_init=True) for name in (TARGET, MTP_TARGET)
        }
        self.mtp_methods = {"mtp", *typing.get_args(speculative_module.MTPModelTypes)}
        self.vllm_config = VllmConfig
        self.handler = _Warnings()
        logging.getLogger("vllm").addHandler(self.handler)

    def _local(self, config: dict[str, Any]) -> dict[str, Any]:
        model = config.get("model")
        if isinstance(model, str) and model in MODELS:
            return {**config, "model": str(self.models / model)}
        return config

    def verdict(self, config: dict[str, Any]) -> dict[str, Any]:
        from pydantic import ValidationError

        self.handler.messages.clear()
        method = config.get("method")
        target_name = MTP_TARGET if isinstance(method, str) and method in self.mtp_methods else TARGET
        target = self.targets[target_name]
        args = self.EngineArgs(model=str(self.models / target_name), speculative_config=self._local(config))
        try:
            spec = args.create_speculative_config(target, self.ParallelConfig())
        except ValidationError as err:
            message, fields = _pydantic_error(err)
            return _refused("SpeculativeConfig", message, fields)
        except (ValueError, TypeError, NotImplementedError) as err:
            message = f"{type(err).__name__}: {err}"
            fields = ["num_speculative_tokens"] if isinstance(err, TypeError) else _fields_of(str(err))
            return _refused("SpeculativeConfig", message, fields)
        assert spec is not None
        if spec.num_speculative_tokens_per_batch_size is not None:
            try:
                self.lookup(
                    spec.num_speculative_tokens_per_batch_size,
                    vllm_max_batch_size=MAX_NUM_SEQS,
                    vllm_num_speculative_tokens=spec.num_speculative_tokens,
                )
            except ValueError as err:
                return _refused("build_dynamic_sd_schedule_lookup", str(err), _fields_of(str(err)))
        view = SimpleNamespace(
            speculative_config=spec,
            parallel_config=self.ParallelConfig(),
            scheduler_config=SimpleNamespace(async_scheduling=True),
            model_config=target,
        )
        for name in ("_dflash_needs_multi_kv_group", "_is_dflash_candidate_draft", "_get_dbo_unsupported_features"):
            setattr(view, name, getattr(self.vllm_config, name).__get__(view))
        v2_lacks = self.vllm_config._get_v2_model_runner_unsupported_features(view)
        result: dict[str, Any] = {
            "verdict": "ok",
            "level": "SpeculativeConfig",
            "message": "",
            "fields": [],
            "runner": "v2",
            "num_speculative_tokens": spec.num_speculative_tokens,
            "method": spec.method,
            "how": "run",
            "target_model": target_name,
        }
        if v2_lacks:
            v1_lacks = self.vllm_config._get_v1_model_runner_unsupported_features(view)
            if v1_lacks:
                message = f"Model Runner V1 does not support: {', '.join(v1_lacks)}"
                fields = sorted({f for lack in v1_lacks for f in _fields_of(lack)})
                refused = _refused("VllmConfig", message, fields)
                refused["v2_lacks"] = v2_lacks
                return refused
            result.update(
                verdict="warning",
                level="VllmConfig",
                runner="v1",
                message=f"Model Runner V2 does not yet support {', '.join(v2_lacks)}; using the V1 model "
                "runner instead.",
                fields=sorted({f for lack in v2_lacks for f in _fields_of(lack)}),
            )
            if spec.rejection_sample_method == "block":
                result["read"] = (
                    "V1 has no block verification: its rejection sampler implements standard, synthetic and FLy "
                    "only (vllm/v1/sample/rejection_sampler.py:80-118), and its drafters keep draft "
                    "probabilities only for standard and fly (vllm/v1/spec_decode/llm_base_proposer.py:257-260), "
                    "so block is served as standard verification of one-hot drafts"
                )
            elif spec.num_speculative_tokens_per_batch_size is not None:
                result["read"] = (
                    "V1 keeps the K table: the shared scheduler looks K up per step (vllm/v1/core/sched/"
                    "scheduler.py:1709-1714) and V1's runner hands that K to every drafter "
                    "(vllm/v1/worker/gpu_model_runner.py:4729, 4790-4797, 4944-4946)"
                )
        if spec.rejection_sample_method == "fly" and result["verdict"] == "ok":
            # logged with warning_once (speculative.py:2031-2034), so only the first FLy config of a run shows it
            result.update(
                verdict="warning",
                message="FLy verification is a lossy speculative decoding method and may degrade model outputs.",
                fields=["rejection_sample_method"],
            )
            result["read"] = (
                "the lossy warning is logged with warning_once (vllm/config/speculative.py:2031-2034), so only "
                "the first FLy config of a run shows it in vllm_warnings; quoted here from that line"
            )
        result["vllm_warnings"] = sorted(set(self.handler.messages))
        return result


def _refused(level: str, message: str, fields: list[str]) -> dict[str, Any]:
    return {"verdict": "error", "level": level, "message": message.strip(), "fields": fields, "how": "run"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=Path("tests/data/vllm-corpus"))
    parser.add_argument("--out", type=Path, default=Path("tests/data/vllm-0.33.0-verdicts.json"))
    parser.add_argument("--models", type=Path, default=None, help="Where the tiny config.json models go.")
    args = parser.parse_args(argv)
    import vllm

    models = args.models or Path(tempfile.mkdtemp(prefix="vllm-oracle-models-"))
    write_models(models)
    oracle = Oracle(models)
    verdicts: dict[str, Any] = {}
    for path in sorted(args.corpus.glob("*.json")):
        config = json.loads(path.read_text())
        verdicts[path.name] = oracle.verdict(config)
        print(f"{path.name}: {verdicts[path.name]['verdict']} {verdicts[path.name]['message'][:100]}", file=sys.stderr)
    document = {
        "vllm_version": vllm.__version__,
        "made_by": "tools/vllm_oracle.py",
        "target_model": TARGET,
        "max_num_seqs": MAX_NUM_SEQS,
        "verdicts": verdicts,
    }
    args.out.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Preset numbers for GPUs, target models and drafters (plain data; the models live in ``_hardware``).

Sources: NVIDIA datasheets for the GPUs (dense BF16 and FP8, i.e. without 2:4 sparsity -- half the
datasheets' headline "with sparsity" figures; NVLink bandwidth per direction; the A100 and RTX 3090 have no
FP8 tensor cores); each model's Hugging Face ``config.json`` for the targets and draft LLMs. Drafter heads
are sized from their target's shape:

- EAGLE: one decoder layer + an fc (2h -> h), and the target's LM head (read each pass);
- EAGLE-3: one decoder layer whose q/k/v take 2h inputs, an fc (3h -> h), its own 32k-token LM head;
- MTP: one decoder layer + an eh projection (2h -> h), and the target's LM head; the layer is stored at the
  target's weight width (it ships in the target's checkpoint), the LM head in BF16;
- DFlash: five decoder layers at the target's width drafting a block in one pass, an fc over five
  tapped hidden states (5h -> h), and the target's LM head (z-lab's released drafters have 5 layers);
- DSpark: assumed shaped like DFlash (no public checkpoint shape); give it explicitly when you know it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

__all__ = [
    "DRAFTER_PRESETS",
    "GPU_PRESETS",
    "TARGET_MODEL_PRESETS",
    "DrafterPresetName",
    "GpuPresetName",
    "TargetModelPresetName",
    "active_mlp_width",
    "default_drafter_preset",
    "drafting_mode",
    "layer_parameters",
]

GPU_PRESETS: dict[str, dict[str, Any]] = {
    "h100-sxm": {
        "name": "NVIDIA H100 SXM 80GB",
        "hbm_bandwidth_bytes_per_s": 3.35e12,
        "dense_bf16_flops": 989e12,
        "dense_fp8_flops": 1979e12,
        "memory_bytes": 80e9,
        "interconnect_bandwidth_bytes_per_s": 450e9,
    },
    "h200": {
        "name": "NVIDIA H200 SXM 141GB",
        "hbm_bandwidth_bytes_per_s": 4.8e12,
        "dense_bf16_flops": 989e12,
        "dense_fp8_flops": 1979e12,
        "memory_bytes": 141e9,
        "interconnect_bandwidth_bytes_per_s": 450e9,
    },
    "a100-80gb": {
        "name": "NVIDIA A100 SXM 80GB",
        "hbm_bandwidth_bytes_per_s": 2.039e12,
        "dense_bf16_flops": 312e12,
        "memory_bytes": 80e9,
        "interconnect_bandwidth_bytes_per_s": 300e9,
    },
    "l40s": {
        "name": "NVIDIA L40S",
        "hbm_bandwidth_bytes_per_s": 0.864e12,
        "dense_bf16_flops": 362e12,
        "dense_fp8_flops": 733e12,
        "memory_bytes": 48e9,
        "interconnect_bandwidth_bytes_per_s": 32e9,  # PCIe Gen4 x16, no NVLink
    },
    # RTX 3090 (Ampere GA102, GeForce datasheet): 936 GB/s GDDR6X; 71 dense BF16 tensor TFLOP/s (142 with
    # sparsity); two cards talk over PCIe Gen4 x16 unless bridged.
    "rtx-3090": {
        "name": "NVIDIA GeForce RTX 3090",
        "hbm_bandwidth_bytes_per_s": 0.936e12,
        "dense_bf16_flops": 71e12,
        "memory_bytes": 24e9,
        "interconnect_bandwidth_bytes_per_s": 32e9,
    },
    # H100 NVL (PCIe card, datasheet): 3.9 TB/s, 94 GB, 835 dense BF16 TFLOP/s (1,671 with sparsity); the
    # NVLink bridge carries 600 GB/s both ways, 300 GB/s per direction.
    "h100-nvl": {
        "name": "NVIDIA H100 NVL 94GB",
        "hbm_bandwidth_bytes_per_s": 3.9e12,
        "dense_bf16_flops": 835e12,
        "dense_fp8_flops": 1671e12,
        "memory_bytes": 94e9,
        "interconnect_bandwidth_bytes_per_s": 300e9,
    },
    "b200": {
        "name": "NVIDIA B200",
        "hbm_bandwidth_bytes_per_s": 8e12,
        "dense_bf16_flops": 2.25e15,
        "dense_fp8_flops": 4.5e15,
        "memory_bytes": 180e9,
        "interconnect_bandwidth_bytes_per_s": 900e9,
    },
}


def _target(
    name: str, params: float, layers: int, hidden: int, inter: int, heads: int, vocab: int, tp: int, **shape: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "num_parameters": params,
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_attention_heads": heads,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": vocab,
        "tie_word_embeddings": False,
        "tensor_parallel_size": tp,
        **shape,
    }


TARGET_MODEL_PRESETS: dict[str, dict[str, Any]] = {
    # max_model_len_tokens: config.json's max_position_embeddings (Llama 3.1's rope_type 'llama3' does not
    # stretch it further in vLLM). Left unset where the released value is not certain here.
    "llama-3.1-8b": _target("Llama-3.1-8B", 8.03e9, 32, 4096, 14336, 32, 128256, 1, max_model_len_tokens=131072),
    "llama-3.1-70b": _target("Llama-3.1-70B", 70.55e9, 80, 8192, 28672, 64, 128256, 4, max_model_len_tokens=131072),
    "qwen3-8b": _target("Qwen3-8B", 8.19e9, 36, 4096, 12288, 32, 151936, 1),
    "qwen3-32b": _target("Qwen3-32B", 32.76e9, 64, 5120, 25600, 64, 151936, 2),
    # MoE: 128 routed experts of width 768, 8 per token, in every layer; 4 KV heads.
    "qwen3-30b-a3b": _target(
        "Qwen3-30B-A3B",
        30.53e9,
        48,
        2048,
        6144,
        32,
        151936,
        1,
        num_key_value_heads=4,
        num_experts=128,
        num_experts_per_tok=8,
        moe_intermediate_size=768,
    ),
    # Gemma-4-31B (google/gemma-4-31B-it config.json, text tower): 60 layers of width 5376, MLP 21504, 32 query
    # heads; 50 sliding-window layers (window 1024) with 16 KV heads of 256 and 10 global layers with 4 KV heads
    # of 512 (K = V); vocabulary 262144, tied embeddings; max_position_embeddings 262144. spectune has one KV
    # shape for all layers: the sliding layers' 16 x 256 is used, which overstates the KV bytes per token by 9 %
    # (60 x 16 x 256 against the 50 x 16 x 256 + 10 x 4 x 512 the checkpoint holds) below the 1024-token window,
    # and more beyond it. Parameters: 50 x 479M + 10 x 534M layers + 1.41B embeddings = 30.7B. Released in
    # bf16; an FP8 checkpoint is written in a document as bytes_per_parameter: 1.
    "gemma-4-31b": _target(
        "Gemma-4-31B",
        30.7e9,
        60,
        5376,
        21504,
        32,
        262144,
        1,
        num_key_value_heads=16,
        head_dim=256,
        tie_word_embeddings=True,
        max_model_len_tokens=262144,
    ),
    # MoE: 256 routed experts of width 2048, 8 per token, plus one shared expert, in all but the first 3
    # layers (dense, width 18432); FP8 weights as released. MLA caches one 576-wide latent per token and
    # layer, written here as a single K/V head of 288; TP 8 as served on 8 H200s.
    "deepseek-v3": _target(
        "DeepSeek-V3",
        671e9,
        61,
        7168,
        18432,
        128,
        129280,
        8,
        num_key_value_heads=1,
        head_dim=288,
        bytes_per_parameter=1.0,
        num_experts=256,
        num_experts_per_tok=8,
        moe_intermediate_size=2048,
        shared_expert_intermediate_size=2048,
        first_k_dense_replace=3,
    ),
}

_DRAFT_LLMS: dict[str, dict[str, Any]] = {
    "llama-3.2-1b": {
        "name": "Llama-3.2-1B",
        "num_parameters": 1.236e9,
        "num_hidden_layers": 16,
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "vocab_size": 128256,
    },
    "qwen3-0.6b": {
        "name": "Qwen3-0.6B",
        "num_parameters": 0.596e9,
        "num_hidden_layers": 28,
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
    },
    "qwen3-1.7b": {
        "name": "Qwen3-1.7B",
        "num_parameters": 1.72e9,
        "num_hidden_layers": 28,
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
    },
}
_DEFAULT_DRAFT_LLM = {
    "llama-3.1-8b": "llama-3.2-1b",
    "llama-3.1-70b": "llama-3.2-1b",
    "qwen3-8b": "qwen3-0.6b",
    "qwen3-32b": "qwen3-1.7b",
    "qwen3-30b-a3b": "qwen3-0.6b",
}

_MODES = {
    "eagle": "sequential",
    "eagle3": "sequential",
    "mtp": "sequential",
    "draft_model": "sequential",
    "dflash": "parallel",
    "dspark": "parallel",
    "ngram": "lookup",
    "ngram_gpu": "lookup",
    "suffix": "lookup",
}
_HEAD_METHODS = ("eagle", "eagle3", "mtp", "dflash", "dspark")
_EAGLE3_DRAFT_VOCAB = 32000
_DFLASH_LAYERS = 5
_HEAD_BYTES_PER_PARAMETER = 2.0  # BF16, as heads are released


def drafting_mode(method: str) -> str | None:
    """How a method drafts: 'sequential', 'parallel' or 'lookup' (None for an unknown method)."""
    return _MODES.get(method)


def layer_parameters(
    hidden: int, intermediate: int, heads: int, kv_heads: int, head_dim: int, *, input_width: int = 0
) -> int:
    """Parameters of one dense Llama-style decoder layer: q, k, v, o and a gated MLP (count).

    ``input_width`` is the width q/k/v read (default ``hidden``; EAGLE-3 feeds them 2h).
    """
    qkv_in = input_width or hidden
    attention = qkv_in * (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden
    return attention + 3 * hidden * intermediate


def active_mlp_width(target: dict[str, Any]) -> int:
    """Width of the MLP one token runs through: the dense MLP, or for MoE its routed and shared experts."""
    if target.get("num_experts", 0):
        return target["num_experts_per_tok"] * target["moe_intermediate_size"] + target.get(
            "shared_expert_intermediate_size", 0
        )
    return int(target["intermediate_size"])


def head_drafter_fields(method: str, target: dict[str, Any]) -> dict[str, Any]:
    """The fields of an EAGLE / EAGLE-3 / MTP / DFlash / DSpark drafter sized from ``target``'s shape.

    A head on an MoE target is sized as a dense layer of the target's active MLP width (the experts one
    token runs through); heads carry no expert routing of their own.
    """
    hidden, vocab = target["hidden_size"], target["vocab_size"]
    shape = (
        hidden,
        active_mlp_width(target),
        target["num_attention_heads"],
        target["num_key_value_heads"],
        target["head_dim"],
    )
    if method == "eagle3":
        layers, head_vocab = 1, _EAGLE3_DRAFT_VOCAB
        params = layer_parameters(*shape, input_width=2 * hidden) + 3 * hidden * hidden + head_vocab * hidden
    elif method in ("dflash", "dspark"):
        layers, head_vocab = _DFLASH_LAYERS, vocab
        params = layers * layer_parameters(*shape) + _DFLASH_LAYERS * hidden * hidden + vocab * hidden
    else:  # eagle, mtp: one layer, a 2h -> h projection, the target's LM head
        layers, head_vocab = 1, vocab
        params = layer_parameters(*shape) + 2 * hidden * hidden + vocab * hidden
    label = {"eagle": "EAGLE", "eagle3": "EAGLE-3", "mtp": "MTP", "dflash": "DFlash", "dspark": "DSpark"}[method]
    width = _mtp_bytes_per_parameter(target, params, vocab * hidden) if method == "mtp" else None
    return {
        "name": f"{label} head for {target['name']}",
        "method": method,
        "num_parameters": float(params),
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": target["num_attention_heads"],
        "num_key_value_heads": target["num_key_value_heads"],
        "head_dim": target["head_dim"],
        "vocab_size": head_vocab,
        **({"bytes_per_parameter": width} if width is not None else {}),
    }


def _mtp_bytes_per_parameter(target: dict[str, Any], params: float, head_params: float) -> float | None:
    """Mean weight width of an MTP head whose target is not stored in BF16 (bytes/parameter; None for BF16).

    An MTP layer ships inside the target's checkpoint and is quantized with it: DeepSeek-V3's README_WEIGHTS.md
    states that model.layers.61 (the MTP module) is "structured the same as the Main Model hidden layers" of
    its FP8 (128x128 block-scaled) file. The LM head it shares stays BF16 (DeepSeek-V3 inference/model.py
    builds the head in the default dtype, the other linears in FP8). Separately trained heads (EAGLE, EAGLE-3,
    DFlash) are their own BF16 checkpoints.
    """
    target_width = float(target.get("bytes_per_parameter", _HEAD_BYTES_PER_PARAMETER))
    if target_width == _HEAD_BYTES_PER_PARAMETER:
        return None
    body = params - head_params
    return (body * target_width + head_params * _HEAD_BYTES_PER_PARAMETER) / params


# Parameters an MTP pass reads where the checkpoint's documentation states them (count): DeepSeek-V3's
# README_WEIGHTS.md gives the MTP module 1.5B activated parameters beside the gathered embedding, 0.9B of them
# the shared output head ("2.4B including the shared 0.9B Embedding and 0.9B Output Head"). The shape-derived
# size overstates it: spectune writes MLA as 128 heads of 288 with q/k/v/o projections of that width.
_PUBLISHED_MTP_PARAMETERS_READ = {"deepseek-v3": 1.5e9}


def _published_mtp(target: dict[str, Any], params: float) -> dict[str, Any]:
    fields: dict[str, Any] = {"num_parameters": params}
    width = _mtp_bytes_per_parameter(target, params, target["vocab_size"] * target["hidden_size"])
    return fields | ({"bytes_per_parameter": width} if width is not None else {})


def _drafter_presets() -> dict[str, dict[str, Any]]:
    presets: dict[str, dict[str, Any]] = {}
    for target_name, target in TARGET_MODEL_PRESETS.items():
        for method in _HEAD_METHODS:
            presets[f"{method}-{target_name}"] = head_drafter_fields(method, target)
        if target_name in _PUBLISHED_MTP_PARAMETERS_READ:
            presets[f"mtp-{target_name}"] |= _published_mtp(target, _PUBLISHED_MTP_PARAMETERS_READ[target_name])
    for name, fields in _DRAFT_LLMS.items():
        presets[name] = {**fields, "method": "draft_model"}
    presets["ngram"] = {"name": "n-gram prompt lookup (CPU)", "method": "ngram", "num_parameters": 0.0}
    presets["ngram-gpu"] = {"name": "n-gram prompt lookup (GPU kernel)", "method": "ngram_gpu", "num_parameters": 0.0}
    presets["suffix"] = {"name": "suffix-tree lookup (CPU)", "method": "suffix", "num_parameters": 0.0}
    return presets


DRAFTER_PRESETS: dict[str, dict[str, Any]] = _drafter_presets()

GpuPresetName = Literal["h100-sxm", "h200", "a100-80gb", "l40s", "rtx-3090", "h100-nvl", "b200"]
TargetModelPresetName = Literal[
    "llama-3.1-8b", "llama-3.1-70b", "qwen3-8b", "qwen3-32b", "qwen3-30b-a3b", "gemma-4-31b", "deepseek-v3"
]
if TYPE_CHECKING:
    DrafterPresetName = str  # the names are data (DRAFTER_PRESETS): a type checker sees strings
else:
    DrafterPresetName = Literal[tuple(DRAFTER_PRESETS)]  # pydantic validates and documents the names


def default_drafter_preset(method: str, target_preset: str) -> str:
    """The drafter preset a (method, target preset) pair gets by default; ``KeyError`` if there is none."""
    if method in _HEAD_METHODS:
        if target_preset not in TARGET_MODEL_PRESETS:
            raise KeyError(target_preset)
        return f"{method}-{target_preset}"
    if method == "draft_model":
        return _DEFAULT_DRAFT_LLM[target_preset]
    if drafting_mode(method) == "lookup":
        return method.replace("_", "-")
    raise KeyError(method)

"""Hardware, target-model and drafter configs: presets, explicit forms, and every error located."""

from __future__ import annotations

import typing

import pytest
from pydantic import ValidationError

from spectune.config import DrafterSpec, TargetModelSpec, default_drafter
from spectune.config._gpu import GPU_PRESET_NAMES, GpuSpec
from spectune.config._hardware_presets import DrafterPresetName, GpuPresetName, TargetModelPresetName
from spectune.config._models import DRAFTER_PRESET_NAMES, TARGET_MODEL_PRESET_NAMES, default_drafter_preset
from spectune.config._speculative import METHODS
from spectune.errors import DocumentError, SpectuneError


def messages(err: DocumentError) -> list[str]:
    return [str(problem) for problem in err.problems]


def test_preset_literals_match_preset_tables():
    assert typing.get_args(GpuPresetName) == GPU_PRESET_NAMES
    assert typing.get_args(TargetModelPresetName) == TARGET_MODEL_PRESET_NAMES
    assert typing.get_args(DrafterPresetName) == DRAFTER_PRESET_NAMES


@pytest.mark.parametrize("name", GPU_PRESET_NAMES)
def test_gpu_presets_have_a_ridge_point_between_50_and_400_flop_per_byte(name):
    gpu = GpuSpec.model_validate(name)
    assert gpu.preset == name
    # Every current GPU's BF16 ridge sits in this band (the RTX 3090's, 66, lowest: BF16 accumulates in
    # FP32 at half rate on GeForce cards); a unit slip (GB vs bytes) would not.
    assert 50 < gpu.ridge_point_flop_per_byte < 400
    assert 1e10 < gpu.memory_bytes < 1e12


def test_rtx_3090_and_h100_nvl_presets_are_the_datasheet_ones():
    rtx, nvl = GpuSpec.model_validate("rtx-3090"), GpuSpec.model_validate("h100-nvl")
    assert (rtx.hbm_bandwidth_bytes_per_s, rtx.dense_bf16_flops, rtx.memory_bytes) == (0.936e12, 71e12, 24e9)
    assert (nvl.hbm_bandwidth_bytes_per_s, nvl.dense_bf16_flops, nvl.memory_bytes) == (3.9e12, 835e12, 94e9)


def test_h100_preset_numbers_are_the_datasheet_ones():
    gpu = GpuSpec.model_validate("h100-sxm")
    assert gpu.hbm_bandwidth_bytes_per_s == 3.35e12
    assert gpu.dense_bf16_flops == 989e12
    assert gpu.effective_bandwidth_bytes_per_s == pytest.approx(3.35e12 * 0.8)


@pytest.mark.parametrize("spelling", ["H100_SXM", "h100 sxm", " H100-Sxm "])
def test_preset_names_forgive_case_underscores_and_spaces(spelling):
    assert GpuSpec.model_validate(spelling).preset == "h100-sxm"


def test_preset_fields_can_be_overridden():
    gpu = GpuSpec.model_validate({"preset": "h200", "achievable_bandwidth_fraction": 0.9})
    assert gpu.achievable_bandwidth_fraction == 0.9
    assert gpu.hbm_bandwidth_bytes_per_s == 4.8e12


def test_explicit_gpu_needs_every_number():
    with pytest.raises(ValidationError) as info:
        GpuSpec.model_validate({"name": "mine", "hbm_bandwidth_bytes_per_s": 1e12})
    missing = {error["loc"][-1] for error in info.value.errors()}
    assert missing == {"dense_bf16_flops", "memory_bytes", "interconnect_bandwidth_bytes_per_s"}


# DeepSeek-V3's MLA attention is written as the GQA shape with its KV cache (one 576-wide latent), whose
# projections count 21B more parameters than MLA's low-rank ones: 3% of 671B.
# Gemma-4-31B's 10 global layers carry wider q/o (16384) and no v projection: 0.55B more than the uniform
# shape the estimate assumes, 1.8% of 30.7B.
_ESTIMATE_TOLERANCE = {"deepseek-v3": 0.035, "gemma-4-31b": 0.025}


@pytest.mark.parametrize("name", TARGET_MODEL_PRESET_NAMES)
def test_target_presets_match_the_parameter_count_their_shapes_imply(name):
    model = TargetModelSpec.model_validate(name)
    assert model.num_parameters == pytest.approx(model.estimated_parameters, rel=_ESTIMATE_TOLERANCE.get(name, 0.01))


def test_llama_70b_preset_runs_at_tensor_parallel_4():
    assert TargetModelSpec.model_validate("llama-3.1-70b").tensor_parallel_size == 4


def test_llama_8b_kv_cache_is_128_kib_per_token():
    # 2 (K and V) x 32 layers x 8 KV heads x 128 dims x 2 bytes
    assert TargetModelSpec.model_validate("llama-3.1-8b").kv_cache_bytes_per_token == 131072


@pytest.mark.parametrize("name", DRAFTER_PRESET_NAMES)
def test_drafter_presets_validate_and_say_how_they_draft(name):
    drafter = DrafterSpec.model_validate(name)
    expected = {
        "dflash": "parallel",
        "dspark": "parallel",
        "ngram": "lookup",
        "ngram_gpu": "lookup",
        "suffix": "lookup",
    }.get(drafter.method, "sequential")
    assert drafter.drafting == expected
    assert (drafter.num_parameters == 0) == (expected == "lookup")


def test_eagle3_head_for_llama_8b_is_about_0_4b_parameters():
    # one 2h-input decoder layer (~0.24B) + fc 3h->h (~0.05B) + a 32k-token LM head (~0.13B)
    head = DrafterSpec.model_validate("eagle3-llama-3.1-8b")
    assert 0.38e9 < head.num_parameters < 0.47e9
    assert head.vocab_size == 32000


# no small public model shares DeepSeek-V3's tokenizer; Gemma 4's small models have no preset here
_NO_DRAFT_LLM = {"deepseek-v3", "gemma-4-31b"}


# vLLM serves these, spectune does not simulate them (simulate and study refuse them with a located line)
_NOT_SIMULATED = ("custom_class", "extract_hidden_states")


@pytest.mark.parametrize("method", _NOT_SIMULATED)
def test_a_method_spectune_does_not_simulate_has_no_default_drafter(method):
    with pytest.raises(SpectuneError, match=f"no drafter for method '{method}'"):
        default_drafter(method, TargetModelSpec.model_validate("llama-3.1-8b"))


@pytest.mark.parametrize("method", [m for m in METHODS if m not in _NOT_SIMULATED])
@pytest.mark.parametrize("target", TARGET_MODEL_PRESET_NAMES)
def test_every_method_has_a_default_drafter_for_every_target_preset(method, target):
    if method == "draft_model" and target in _NO_DRAFT_LLM:
        name = TargetModelSpec.model_validate(target).name
        with pytest.raises(SpectuneError, match=f"no default draft model for target '{name}'"):
            default_drafter(method, TargetModelSpec.model_validate(target))
        return
    drafter = default_drafter(method, TargetModelSpec.model_validate(target))
    assert drafter.method == method
    assert drafter.preset == default_drafter_preset(method, target)


def test_default_draft_models_follow_the_family():
    assert default_drafter_preset("draft_model", "llama-3.1-70b") == "llama-3.2-1b"
    assert default_drafter_preset("draft_model", "qwen3-8b") == "qwen3-0.6b"
    assert default_drafter_preset("draft_model", "qwen3-32b") == "qwen3-1.7b"


def test_default_head_for_an_explicit_target_is_sized_from_its_shape():
    target = TargetModelSpec.model_validate(
        {
            "name": "small",
            "num_parameters": 1.05e9,
            "num_hidden_layers": 16,
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 64,
            "vocab_size": 128256,
            "tie_word_embeddings": True,
        },
    )
    head = default_drafter("mtp", target)
    assert head.preset is None
    assert head.hidden_size == 2048
    assert head.num_parameters < DrafterSpec.model_validate("mtp-llama-3.1-8b").num_parameters
    with pytest.raises(SpectuneError, match="no default draft model for target 'small'"):
        default_drafter("draft_model", target)


def test_hardware_accepts_a_bare_gpu_name(load_deployment):
    doc = load_deployment("hardware: l40s\ntarget_model: llama-3.1-8b\n")
    assert doc.model.hardware.gpu.preset == "l40s"
    assert doc.model.hardware.num_gpus == 1


def test_unknown_preset_is_located_and_lists_the_choices(load_deployment):
    with pytest.raises(DocumentError) as info:
        load_deployment("hardware:\n  gpu: h300\ntarget_model: llama-3.1-8b\n")
    (message,) = messages(info.value)
    assert message.endswith(
        "deployment.yaml:3: hardware.gpu: must be a preset name (h100-sxm, h200, a100-80gb, "
        "l40s, rtx-3090, h100-nvl, b200) or a mapping of fields, got 'h300'"
    )


def test_out_of_range_fields_name_bound_and_value(load_deployment):
    with pytest.raises(DocumentError) as info:
        load_deployment("""\
            hardware:
              gpu: {preset: h100-sxm, achievable_bandwidth_fraction: 1.5}
            target_model: {preset: llama-3.1-8b, bytes_per_parameter: 0}
            """)
    found = messages(info.value)
    assert any(":3: hardware.gpu.achievable_bandwidth_fraction: must be <= 1.0, got 1.5" in m for m in found)
    assert any(":4: target_model.bytes_per_parameter: must be > 0.0, got 0" in m for m in found)


def test_target_shape_rules(load_deployment):
    with pytest.raises(DocumentError) as info:
        load_deployment("""\
            hardware: {gpu: h100-sxm, num_gpus: 3}
            target_model: {preset: llama-3.1-8b, num_key_value_heads: 5, tensor_parallel_size: 3}
            """)
    found = " | ".join(messages(info.value))
    assert "target_model.num_key_value_heads: must divide num_attention_heads (32), got 5" in found
    assert "target_model.tensor_parallel_size: must divide num_attention_heads (32) as vLLM requires, got 3" in found


def test_parameter_count_far_from_the_shapes_is_a_warning(load_deployment):
    doc = load_deployment("hardware: h100-sxm\ntarget_model: {preset: llama-3.1-8b, num_parameters: 8.03e6}\n")
    (notice,) = doc.notices
    assert notice.field == "target_model.num_parameters" and "far from the 8.03e+09" in notice.message


def test_drafter_mode_must_match_its_method(load_deployment):
    with pytest.raises(DocumentError) as info:
        load_deployment("""\
            hardware: h100-sxm
            target_model: llama-3.1-8b
            drafter: {preset: dflash-llama-3.1-8b, drafting: sequential}
            """)
    assert any(
        "drafter.drafting: method 'dflash' drafts as 'parallel', got 'sequential'" in m for m in messages(info.value)
    )


def test_a_sequential_drafter_may_draft_in_parallel_as_p_eagle_does(load_deployment):
    doc = load_deployment("""\
        hardware: h100-sxm
        target_model: llama-3.1-8b
        drafter: {preset: eagle3-llama-3.1-8b, drafting: parallel}
        """)
    assert doc.model.drafter.drafting == "parallel"


def test_lookup_drafter_reads_no_weights_and_neural_drafter_needs_a_shape(load_deployment):
    with pytest.raises(DocumentError) as info:
        load_deployment("""\
            hardware: h100-sxm
            target_model: llama-3.1-8b
            drafter: {preset: ngram, num_parameters: 1e9}
            """)
    assert any("drafter.num_parameters: must be 0 for a lookup drafter, got 1e+09" in m for m in messages(info.value))
    with pytest.raises(DocumentError) as info:
        load_deployment("""\
            hardware: h100-sxm
            target_model: llama-3.1-8b
            drafter: {name: mine, method: draft_model, num_parameters: 1e9}
            """)
    found = " | ".join(messages(info.value))
    assert "drafter.num_hidden_layers: must be > 0 for a sequential (neural) drafter, got 0" in found
    assert "drafter.vocab_size: must be > 0" in found


def test_weights_that_do_not_fit_name_the_sizes(load_deployment):
    with pytest.raises(DocumentError) as info:
        load_deployment("hardware: h100-sxm\ntarget_model: {preset: llama-3.1-70b, tensor_parallel_size: 1}\n")
    (message,) = messages(info.value)
    assert (
        "target_model.tensor_parallel_size: weights need 141.1 GB per GPU (target at TP 1), more than the 80 GB"
        in message
    )


def test_deployment_rules_across_hardware_target_and_drafter(load_deployment):
    with pytest.raises(DocumentError) as info:
        load_deployment("""\
            hardware: {gpu: h100-sxm, num_gpus: 6}
            target_model: llama-3.1-70b
            drafter: {preset: eagle3-llama-3.1-8b, tensor_parallel_size: 2}
            """)
    found = " | ".join(messages(info.value))
    assert "hardware.num_gpus: must be a multiple of target_model.tensor_parallel_size (4), got 6" in found
    assert (
        "drafter.tensor_parallel_size: must be 1 or the target's tensor_parallel_size (4) as vLLM requires, got 2"
        in found
    )
    assert (
        "drafter.hidden_size: a eagle3 drafter reads the target's hidden states, so it must be the target's "
        "hidden_size (8192), got 4096" in found
    )


def test_seventy_b_at_tp4_on_four_h100s_with_its_eagle3_head_loads(load_deployment):
    doc = load_deployment("""\
        hardware: {gpu: h100-sxm, num_gpus: 4}
        target_model: llama-3.1-70b
        drafter: eagle3-llama-3.1-70b
        """)
    assert doc.notices == []
    assert doc.model.drafter.hidden_size == 8192


def test_json_schema_offers_the_preset_name_and_override_forms(deployment_document):
    schema = deployment_document.model_json_schema()
    definitions = schema["$defs"]
    gpu_forms = definitions["GpuSpec"]["anyOf"]
    assert gpu_forms[0] == {"type": "string", "enum": list(GPU_PRESET_NAMES)}
    assert gpu_forms[1]["required"] == ["preset"]
    assert "hbm_bandwidth_bytes_per_s" in gpu_forms[2]["required"]
    assert definitions["TargetModelSpec"]["anyOf"][0]["enum"] == list(TARGET_MODEL_PRESET_NAMES)
    assert definitions["DrafterSpec"]["anyOf"][0]["enum"] == list(DRAFTER_PRESET_NAMES)
    assert definitions["HardwareConfig"]["anyOf"][0]["enum"] == list(GPU_PRESET_NAMES)
    step_times = definitions["CostModelConfig"]["anyOf"][1]["properties"]["step_times"]
    assert {"type": "string"} in step_times["anyOf"]


def test_moe_presets_have_their_published_active_parameters():
    qwen = TargetModelSpec.model_validate("qwen3-30b-a3b")
    assert qwen.is_moe and qwen.active_parameters == pytest.approx(3.3e9, rel=0.03)  # "A3B": 3.3B activated
    deepseek = TargetModelSpec.model_validate("deepseek-v3")
    assert deepseek.num_moe_layers == 58 and deepseek.active_parameters == pytest.approx(
        37e9, rel=0.05
    )  # 37B activated
    assert deepseek.kv_cache_bytes_per_token == 61 * 576 * 2  # MLA: one 576-wide latent per token and layer


def test_moe_fields_on_a_dense_model_and_bad_routing_are_located(load_deployment):
    with pytest.raises(DocumentError) as info:
        load_deployment("""\
            hardware: h100-sxm
            target_model: {preset: llama-3.1-8b, num_experts_per_tok: 8}
            """)
    assert any(
        "target_model.num_experts_per_tok: only for an MoE model (num_experts > 0), got 8" in m
        for m in messages(info.value)
    )
    with pytest.raises(DocumentError) as info:
        load_deployment("""\
            hardware: h200
            target_model: {preset: qwen3-30b-a3b, num_experts_per_tok: 129}
            """)
    assert any(
        "target_model.num_experts_per_tok: must be in [1, num_experts] = [1, 128] for an MoE model, got 129" in m
        for m in messages(info.value)
    )

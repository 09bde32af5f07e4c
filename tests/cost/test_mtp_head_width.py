"""An MTP head ships inside its target's checkpoint: its layer is stored at the target's weight width.

Public facts: DeepSeek-V3's README_WEIGHTS.md -- the MTP module (model.layers.61) is "structured the same as
the Main Model hidden layers" of the FP8 (128x128 block-scaled) release; DeepSeek-V3 inference/model.py builds
the LM head (shared with the MTP module) in the default dtype, BF16. Separately trained heads stay BF16.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spectune.cli import app
from spectune.config import CostModelConfig, DrafterSpec, HardwareConfig, TargetModelSpec
from spectune.cost import build_cost_model

A7 = Path(__file__).resolve().parents[2] / "benchmarks" / "fidelity" / "a7-deepseek-r1-mtp" / "mtp-k1.yaml"
DEEPSEEK_V3_HIDDEN, DEEPSEEK_V3_VOCAB = 7168, 129280


def test_mtp_head_of_an_fp8_target_reads_its_layer_in_fp8_and_its_lm_head_in_bf16() -> None:
    head = DrafterSpec.model_validate("mtp-deepseek-v3")
    lm_head = DEEPSEEK_V3_HIDDEN * DEEPSEEK_V3_VOCAB
    expected_bytes = (head.num_parameters - lm_head) * 1 + lm_head * 2
    assert head.num_parameters * head.bytes_per_parameter == pytest.approx(expected_bytes, rel=1e-9)


def test_deepseek_v3_mtp_head_reads_the_activated_parameters_its_weight_notes_state() -> None:
    """README_WEIGHTS.md: 2.4B activated, including the shared 0.9B embedding (gathered, not read) and 0.9B head."""
    head = DrafterSpec.model_validate("mtp-deepseek-v3")
    assert head.num_parameters == pytest.approx(2.4e9 - 0.9e9, rel=0.01)
    assert head.num_parameters > DEEPSEEK_V3_HIDDEN * DEEPSEEK_V3_VOCAB  # the head is inside what it reads


@pytest.mark.parametrize("name", ["mtp-llama-3.1-8b", "mtp-qwen3-30b-a3b", "eagle3-deepseek-v3", "eagle-deepseek-v3"])
def test_heads_of_bf16_targets_and_separately_trained_heads_stay_bf16(name: str) -> None:
    assert DrafterSpec.model_validate(name).bytes_per_parameter == 2.0


def test_mtp_drafting_time_at_batch_one_is_the_mtp_weights_read_on_one_gpu() -> None:
    hardware = HardwareConfig.model_validate({"gpu": "h200", "num_gpus": 8})
    target = TargetModelSpec.model_validate("deepseek-v3")
    head = DrafterSpec.model_validate({"preset": "mtp-deepseek-v3", "tensor_parallel_size": 1})
    config = CostModelConfig(draft_pass_overhead_s=0.0)
    drafting_s = build_cost_model(hardware, target, head, config).step_time(1, 1, 0.0).drafting_s
    lm_head = DEEPSEEK_V3_HIDDEN * DEEPSEEK_V3_VOCAB
    weight_bytes = (head.num_parameters - lm_head) * 1 + lm_head * 2
    kv_bytes = 2 * 2 * 288 * 2  # the two tokens of the first pass write/read one MLA latent each (bf16)
    expected_s = (weight_bytes + kv_bytes) / hardware.gpu.effective_bandwidth_bytes_per_s
    assert drafting_s == pytest.approx(expected_s, rel=0.02)


def _drafting_s_per_step(*overrides: str) -> float:
    arguments = ["simulate", str(A7), "--json", "--set", "workload.num_requests=8"]
    for item in overrides:
        arguments += ["--set", item]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    return float(report["step_time_share"]["drafting"]) * float(report["simulated_time_s"]) / report["simulated_steps"]


def test_simulated_deepseek_mtp_drafting_costs_what_its_fp8_layer_and_bf16_head_read() -> None:
    read, lm_head = 2.4e9 - 0.9e9, DEEPSEEK_V3_HIDDEN * DEEPSEEK_V3_VOCAB  # README_WEIGHTS.md, config.json
    stored = _drafting_s_per_step()
    all_bf16 = _drafting_s_per_step("drafter.preset=mtp-deepseek-v3", "drafter.bytes_per_parameter=2.0")
    # batch ~1 on one GPU (draft TP 1): a draft pass is its weights read, plus a 0.1 ms pass overhead
    expected = ((read - lm_head) * 1 + lm_head * 2) / (read * 2)
    assert stored / all_bf16 == pytest.approx(expected, abs=0.05), (stored, all_bf16)

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


def _drafting_share(*overrides: str) -> float:
    arguments = ["simulate", str(A7), "--json", "--set", "workload.num_requests=8"]
    for item in overrides:
        arguments += ["--set", item]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    return float(json.loads(result.stdout)["step_time_share"]["drafting"])


def test_simulated_deepseek_mtp_drafting_costs_less_than_the_same_head_stored_in_bf16() -> None:
    fp8_layer = _drafting_share()
    all_bf16 = _drafting_share("drafter.preset=mtp-deepseek-v3", "drafter.bytes_per_parameter=2.0")
    assert fp8_layer < 0.85 * all_bf16, (fp8_layer, all_bf16)

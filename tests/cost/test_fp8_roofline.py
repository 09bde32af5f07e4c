"""FP8 weights: their GEMMs run at the GPU's FP8 rate where it has FP8 tensor cores, at the BF16 rate elsewhere.

Datasheet peaks (dense, no sparsity): H100 SXM 989 BF16 / 1979 FP8 TFLOP/s; the A100 has no FP8 tensor cores.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spectune.cli import app
from spectune.config import CostModelConfig, HardwareConfig, TargetModelSpec
from spectune.cost import build_cost_model

A10 = Path(__file__).resolve().parents[2] / "benchmarks" / "fidelity" / "a10-gemma4-dsd-h100nvl" / "k0-row.yaml"


def _verification_s(gpu: str, bytes_per_parameter: float, batch: int) -> float:
    target = TargetModelSpec.model_validate({"preset": "llama-3.1-8b", "bytes_per_parameter": bytes_per_parameter})
    cost = build_cost_model(HardwareConfig.model_validate(gpu), target, None, CostModelConfig())
    return cost.step_time(batch, 0, 0.0).verification_s


def test_fp8_gemms_take_half_the_bf16_time_when_compute_bound_on_an_h100() -> None:
    target = TargetModelSpec.model_validate("llama-3.1-8b")
    head = target.lm_head_parameters
    body = target.parameters_read_per_pass - head
    # the body multiplies at the FP8 rate, the LM head (kept in BF16) at the BF16 rate
    expected = (body * 989 / 1979 + head) / (body + head)
    ratio = _verification_s("h100-sxm", 1.0, 2048) / _verification_s("h100-sxm", 2.0, 2048)
    assert ratio == pytest.approx(expected, rel=0.03)


@pytest.mark.parametrize("bytes_per_parameter", [1.0, 0.5])
def test_a_quantized_target_reads_its_lm_head_in_bf16(bytes_per_parameter: float) -> None:
    """llm-compressor's FP8 recipe quantizes Linear layers with ignore=["lm_head"]; GPTQ/AWQ keep it too."""
    hardware = HardwareConfig.model_validate("h100-sxm")
    target = TargetModelSpec.model_validate({"preset": "llama-3.1-8b", "bytes_per_parameter": bytes_per_parameter})
    head = target.lm_head_parameters
    weight_bytes = (target.parameters_read_per_pass - head) * bytes_per_parameter + head * 2
    cost = build_cost_model(hardware, target, None, CostModelConfig())
    expected_s = weight_bytes / hardware.gpu.effective_bandwidth_bytes_per_s
    assert cost.step_time(1, 0, 0.0).verification_s == pytest.approx(expected_s, rel=0.005)


def test_a_bf16_target_reads_every_weight_at_two_bytes() -> None:
    hardware = HardwareConfig.model_validate("h100-sxm")
    target = TargetModelSpec.model_validate("llama-3.1-8b")
    cost = build_cost_model(hardware, target, None, CostModelConfig())
    expected_s = target.parameters_read_per_pass * 2 / hardware.gpu.effective_bandwidth_bytes_per_s
    assert cost.step_time(1, 0, 0.0).verification_s == pytest.approx(expected_s, rel=0.005)


@pytest.mark.parametrize(("gpu", "bytes_per_parameter"), [("a100-80gb", 1.0), ("h100-sxm", 0.5)])
def test_fp8_without_fp8_cores_and_4_bit_weights_multiply_at_the_bf16_rate(
    gpu: str, bytes_per_parameter: float
) -> None:
    ratio = _verification_s(gpu, bytes_per_parameter, 4096) / _verification_s(gpu, 2.0, 4096)
    assert ratio == pytest.approx(1.0, rel=0.03)


def _baseline_tpot_ms(*overrides: str) -> float:
    arguments = ["simulate", str(A10), "--json", "--set", "workload.concurrency=189"]
    arguments += ["--set", "workload.num_requests=189"]
    for item in overrides:
        arguments += ["--set", item]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    return float(json.loads(result.stdout)["baseline_tpot_p50_ms"])


def test_simulated_fp8_checkpoint_decodes_faster_than_bf16_at_a_compute_bound_batch_on_an_h100_nvl() -> None:
    fp8 = _baseline_tpot_ms()
    bf16 = _baseline_tpot_ms("target_model.bytes_per_parameter=2.0")
    assert fp8 < 0.7 * bf16, (fp8, bf16)


def test_simulated_fp8_checkpoint_gains_only_bytes_on_an_a100() -> None:
    fp8 = _baseline_tpot_ms("hardware=a100-80gb")
    bf16 = _baseline_tpot_ms("hardware=a100-80gb", "target_model.bytes_per_parameter=2.0")
    assert fp8 > 0.85 * bf16, (fp8, bf16)

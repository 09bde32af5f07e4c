"""What the simulation runs on: the GPU and how many of them (by preset name or explicit).

Preset numbers come from vendor datasheets. The achievable fractions of bandwidth and compute are
nominal, not measurements: see ``spectune.cost``.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, GetJsonSchemaHandler, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from spectune.config._base import SpectuneModel
from spectune.config._hardware_presets import GPU_PRESETS, GpuPresetName
from spectune.config._preset_forms import expand_preset, schema_with_name_forms

__all__ = ["GPU_PRESET_NAMES", "GpuSpec", "HardwareConfig"]

GPU_PRESET_NAMES: tuple[str, ...] = tuple(GPU_PRESETS)


class GpuSpec(SpectuneModel):
    """One GPU: HBM bandwidth, dense BF16 tensor-core throughput, memory, and how much of each is reachable."""

    preset: GpuPresetName | None = Field(
        default=None, description=f"GPU preset that filled the fields not given: {', '.join(GPU_PRESETS)}."
    )
    name: str = Field(min_length=1, max_length=200, description="Display name.")
    hbm_bandwidth_bytes_per_s: float = Field(gt=0, description="Peak HBM bandwidth (bytes/s).")
    dense_bf16_flops: float = Field(gt=0, description="Peak dense (no sparsity) BF16 tensor throughput (FLOP/s).")
    dense_fp8_flops: float | None = Field(
        default=None,
        gt=0,
        description="Peak dense (no sparsity) FP8 tensor throughput (FLOP/s): what 1-byte (FP8) weights multiply at. "
        "None: the GPU has no FP8 tensor cores and FP8 weights are widened to BF16 for the product.",
    )
    memory_bytes: float = Field(gt=0, description="HBM capacity (bytes).")
    interconnect_bandwidth_bytes_per_s: float = Field(
        gt=0, description="GPU-to-GPU bandwidth per direction for tensor-parallel all-reduce (bytes/s)."
    )
    achievable_bandwidth_fraction: float = Field(
        default=0.8, gt=0, le=1, description="Fraction of peak HBM bandwidth that decode kernels reach (fraction)."
    )
    achievable_compute_fraction: float = Field(
        default=0.7, gt=0, le=1, description="Fraction of peak BF16 throughput that GEMMs reach (fraction)."
    )

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return schema_with_name_forms(core_schema, handler, GPU_PRESETS)

    @model_validator(mode="before")
    @classmethod
    def _fill_from_preset(cls, data: Any) -> Any:
        return expand_preset(data, GPU_PRESETS)

    @property
    def effective_bandwidth_bytes_per_s(self) -> float:
        """Bandwidth the roofline uses (bytes/s)."""
        return self.hbm_bandwidth_bytes_per_s * self.achievable_bandwidth_fraction

    @property
    def effective_flops(self) -> float:
        """Throughput the roofline uses (FLOP/s)."""
        return self.dense_bf16_flops * self.achievable_compute_fraction

    @property
    def effective_fp8_flops(self) -> float:
        """Throughput the roofline uses for the GEMMs of 1-byte weights (FLOP/s; the BF16 one without FP8 cores)."""
        peak = self.dense_fp8_flops if self.dense_fp8_flops is not None else self.dense_bf16_flops
        return peak * self.achievable_compute_fraction

    @property
    def ridge_point_flop_per_byte(self) -> float:
        """Arithmetic intensity above which a kernel is compute-bound (FLOP/byte)."""
        return self.effective_flops / self.effective_bandwidth_bytes_per_s


class HardwareConfig(SpectuneModel):
    """The GPUs of one deployment. A bare preset name (``hardware: h200``) means one such GPU."""

    gpu: GpuSpec = Field(description="The GPU model (a preset name, a preset with overrides, or explicit).")
    num_gpus: int = Field(
        default=1,
        ge=1,
        le=4096,
        description="GPUs serving the deployment (GPUs); a multiple of the target's tensor_parallel_size.",
    )
    allreduce_latency_s: float = Field(
        default=5e-6, ge=0, le=1e-2, description="Fixed latency of one tensor-parallel all-reduce (seconds)."
    )
    gpu_memory_utilization: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description="vLLM's --gpu-memory-utilization: the fraction of each GPU's memory vLLM may use; what "
        "weights leave of it holds the KV cache (fraction).",
    )

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return schema_with_name_forms(core_schema, handler, GPU_PRESETS, overrides=False)

    @model_validator(mode="before")
    @classmethod
    def _bare_gpu(cls, data: Any) -> Any:
        return {"gpu": data} if isinstance(data, str) else data

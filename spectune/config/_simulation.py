"""``kind: simulation``: one speculative config, simulated on one deployment and one workload."""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from spectune.config._base import RuleViolations, SpectuneModel, check_rules, notify
from spectune.config._deployment import deployment_problems
from spectune.config._gpu import HardwareConfig
from spectune.config._models import DrafterSpec, TargetModelSpec, default_drafter
from spectune.config._policy import SglangAdaptive
from spectune.config._profile import AcceptanceRates, BatchSizeBin
from spectune.config._speculative import MAX_NUM_SPECULATIVE_TOKENS, SpeculativeConfig, SpeculativeFields
from spectune.config._step_times import CostModelConfig
from spectune.config._vllm_rules import served_on_v1, simulation_refusals
from spectune.config._workload import WorkloadConfig, context_limit_problems

__all__ = [
    "PROFILE_RATE_KEYS",
    "AcceptanceSource",
    "SimulationDocument",
    "SimulationOptions",
    "drafter_as_configured",
    "drafter_override_problems",
    "dynamic_speculation_off_notice",
    "sglang_adaptive_problems",
]


# What a profile reference supplies; given inline beside one, they are an error (see ``_documents``).
PROFILE_RATE_KEYS = ("conditional_rates", "unconditional_rates", "bins")
_RATE_KEYS = {"conditional_rates", "unconditional_rates"}


class AcceptanceSource(AcceptanceRates):
    """How often the drafter's tokens are accepted: a profile file, or the rates inline.

    Positions past the last given rate repeat it. Rates per batch-size bin (from a calibrated profile
    or inline) apply when the simulated batch falls in a bin.
    """

    profile: str | None = Field(
        default=None,
        description="Path to a `kind: acceptance_profile` document (relative to this document), e.g. one "
        "written by `spectune calibrate`; its rates, bins and draft sampling are read from it.",
    )
    measured_with: Literal["greedy", "probabilistic"] = Field(
        default="greedy", description="Draft sampling under which the rates were measured (a profile says its own)."
    )
    measured_temperature: float | None = Field(
        default=None,
        ge=0.0,
        le=10.0,
        description="Sampling temperature of the measured traffic, if known (a profile says its own).",
    )
    bins: list[BatchSizeBin] | None = Field(
        default=None, description="Rates per range of running requests, used when the batch falls in one."
    )

    @model_validator(mode="before")
    @classmethod
    def _profile_read(cls, data: Any) -> Any:
        # The loader reads a referenced profile into the rates before validation (``_documents``); a
        # mapping validated directly cannot name one without its rates.
        if isinstance(data, dict) and isinstance(data.get("profile"), str) and not _RATE_KEYS & data.keys():
            raise RuleViolations(
                [
                    (
                        ("profile",),
                        "a profile is read when its document is loaded from a file "
                        "(spectune.config.load_document); a mapping validated directly needs its rates inline, "
                        f"got profile {data['profile']!r} alone",
                    )
                ]
            )
        return data

    def bin_index(self, batch_size: int) -> int | None:
        """Index in ``bins`` of the bin nearest ``batch_size`` running requests (on a log scale; the
        covering one if any), or None without bins."""
        bins = self.bins
        if not bins:
            return None

        def distance(bin_: BatchSizeBin) -> float:
            if bin_.min_running <= batch_size <= bin_.max_running:
                return 0.0
            edge = bin_.min_running if batch_size < bin_.min_running else bin_.max_running
            return abs(math.log(max(batch_size, 1)) - math.log(max(edge, 1)))

        return min(range(len(bins)), key=lambda index: distance(bins[index]))

    def rates_for_batch(self, batch_size: int) -> AcceptanceRates:
        """The bin nearest ``batch_size`` running requests (``bin_index``), else the overall rates.
        Acceptance tends to fall as the batch grows, so a bin measured near the simulated batch is a
        better guess than the pooled rates."""
        index = self.bin_index(batch_size)
        if index is None or not self.bins:
            return self
        chosen = self.bins[index]
        # a bin extrapolates past its positions by the source's rule
        return (
            chosen
            if chosen.extrapolation == self.extrapolation
            else chosen.model_copy(update={"extrapolation": self.extrapolation})
        )

    def confidence_auc_at(self, batch_size: int) -> float | None:
        """The confidence_auc that applies at ``batch_size`` running requests: its bin's (``rates_for_batch``),
        else the source's; None where neither sets it (the synthesized draft logits' own then applies)."""
        chosen = self.rates_for_batch(batch_size).confidence_auc
        return chosen if chosen is not None else self.confidence_auc


class SimulationOptions(SpectuneModel):
    """How the simulation runs (not what it simulates)."""

    kernel_backend: Literal["auto", "triton", "reference"] = Field(
        default="auto",
        description="Rejection sampling: 'triton' (the real kernels; on the CPU through Triton's interpreter, "
        "slow), 'reference' (their PyTorch twin), 'auto' (Triton on CUDA, the twin on the CPU).",
    )
    device: str = Field(default="auto", description="'auto', 'cpu', 'cuda' or 'cuda:N' for logits and kernels.")
    engine: Literal["auto", "step", "ahead"] = Field(
        default="auto",
        description="How the Triton kernels verify a step: 'step' (one call a step, over the rows of every "
        "simulation in lockstep), 'ahead' (calls that verify each request's next steps before its loop gets there, "
        "from counter-based draws, which only CUDA uses: far fewer calls), 'auto' (ahead on CUDA, step by step "
        "elsewhere). The numbers are the same, bit for bit; only the speed changes.",
    )
    cpu_threads: int = Field(
        default=1,
        ge=1,
        le=1024,
        description="PyTorch intra-op threads while simulating on the CPU (threads). One is fastest for the "
        "simulator's small per-step tensors and leaves the other cores to parallel study workers.",
    )
    max_steps: int = Field(default=1_000_000, ge=1, le=100_000_000, description="Stop after this many steps (steps).")
    baseline: bool = Field(default=True, description="Also simulate without speculation, for the speedup.")
    k_lookup_counts_prefills: bool = Field(
        default=False,
        description="Look up num_speculative_tokens_per_batch_size at the decoding plus the still-prefilling requests, "
        "as vLLM does before PR #51466: shows whether a table threshold near the batch size makes K thrash.",
    )
    bank_rows: int = Field(
        default=512,
        ge=16,
        le=65536,
        description="Calibrated logit rows per (position, temperature); greedy rates are reproduced to 1/bank_rows.",
    )
    lockstep_memory_gib: float | None = Field(
        default=None,
        gt=0,
        le=1_000_000,
        description="Memory (GiB) that simulations run side by side (lockstep: one rejection-sampling call a step "
        "over all their rows) may hold together in one process: logit banks and step buffers. Default: half the "
        "device's free memory when the simulation starts (on the CPU, a quarter of the available RAM), split between "
        "a study's --workers. A smaller budget runs the same points in smaller groups, with the same numbers.",
    )

    @field_validator("device")
    @classmethod
    def _device_name(cls, value: str) -> str:
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", value):
            raise ValueError(f"must be one of auto, cpu, cuda, cuda:N, got {value!r}")
        return value


class SimulationDocument(SpectuneModel):
    """``kind: simulation``: a speculative config (or none: plain decoding), the deployment, the workload and
    the acceptance."""

    kind: Literal["simulation"] = Field(description="Document kind.")
    name: str = Field(min_length=1, max_length=200, description="A short name for tables and reports.")
    seed: int = Field(default=0, ge=0, le=2**63 - 1, description="Seed of every random draw (same seed, same numbers).")
    speculative: SpeculativeConfig | None = Field(
        description="The speculative config to simulate (vLLM's fields), or null: plain decoding, speculation off "
        "(vLLM without --speculative-config), which takes no acceptance and no drafter."
    )
    acceptance: AcceptanceSource | None = Field(
        default=None,
        description="The drafter's acceptance; not needed with rejection_sample_method: synthetic, not allowed with "
        "speculative: null.",
    )
    workload: WorkloadConfig = Field(description="The traffic: arrivals, lengths, temperatures.")
    hardware: HardwareConfig = Field(description="The GPUs.")
    target_model: TargetModelSpec = Field(description="The served model.")
    drafter: DrafterSpec | None = Field(
        default=None,
        description="The drafter's size and shape; default: the preset for the method and target. Not allowed "
        "with speculative: null.",
    )
    cost_model: CostModelConfig = Field(default_factory=CostModelConfig, description="How step times are computed.")
    sglang_adaptive: SglangAdaptive | None = Field(
        default=None,
        description="SGLang's --speculative-adaptive with this --speculative-adaptive-config: per batch-size key, "
        "the drafting depths the server picks from at run time (EAGLE/EAGLE3 chains only; the initial depth is "
        "speculative.num_speculative_tokens). Null: the depth is fixed by the speculative config.",
    )
    simulation: SimulationOptions = Field(default_factory=SimulationOptions, description="How the simulation runs.")

    @model_validator(mode="after")
    def _fits_together(self, info: ValidationInfo) -> SimulationDocument:
        problems: list[tuple[tuple[str | int, ...], str]] = []
        spec = self.speculative
        if spec is None:
            problems += [
                (
                    (field,),
                    "given, but speculative is null (plain decoding: no drafter, no drafts to accept); remove "
                    f"{field} or give a speculative config",
                )
                for field in ("acceptance", "drafter")
                if getattr(self, field) is not None
            ]
        else:
            problems += [
                (("speculative", *path), message)
                for path, message in simulation_refusals(spec, MAX_NUM_SPECULATIVE_TOKENS)
            ]
            problems += drafter_override_problems(spec, self.drafter, self.target_model.tensor_parallel_size)
            if self.acceptance is None and spec.rejection_sample_method != "synthetic":
                problems.append(
                    (
                        ("acceptance",),
                        "required (a profile or per-position rates) unless speculative.rejection_sample_method "
                        "is 'synthetic'",
                    )
                )
            if self.drafter is not None and self.drafter.method != spec.method:
                problems.append(
                    (
                        ("drafter", "method"),
                        f"must match speculative.method ('{spec.method}'), got '{self.drafter.method}'",
                    )
                )
        problems += sglang_adaptive_problems(spec, self.sglang_adaptive)
        if not problems:
            problems += deployment_problems(self.hardware, self.target_model, self.effective_drafter())
        problems += context_problems(self.workload, self.target_model, [(("speculative",), spec)])
        if self.cost_model.method == "measured" and self.cost_model.step_times is not None:
            needed = {0}  # plain decoding
            if spec is not None:
                table = spec.num_speculative_tokens_per_batch_size if self.num_replicas == 1 else None  # off under DP
                needed = {spec.num_speculative_tokens, *(row[2] for row in table or ())}
                needed |= {0} if self.simulation.baseline else set()
                if spec.enable_adaptive_verification:  # verification at every width up to K (1 + admitted)
                    needed |= {0, spec.num_speculative_tokens}
                if self.sglang_adaptive is not None:
                    needed |= {step for slot in self.sglang_adaptive.slots.values() for step in slot.candidate_steps}
            gap = self.cost_model.step_times.k_coverage_problem(needed)
            if gap is not None:
                baseline_gap = (
                    spec is not None
                    and 0 in needed
                    and self.cost_model.step_times.num_speculative_tokens_measured()[0] > 0
                )
                problems.append(
                    (
                        ("cost_model", "step_times"),
                        gap + (" (K = 0 is the baseline; simulation.baseline: false skips it)" if baseline_gap else ""),
                    )
                )
        check_rules(problems)
        if self.num_replicas > 1 and spec is not None and spec.num_speculative_tokens_per_batch_size:
            notify(
                info,
                ("speculative", "num_speculative_tokens_per_batch_size"),
                dynamic_speculation_off_notice(self.num_replicas, spec.num_speculative_tokens),
            )
        served = served_on_v1(spec) if spec is not None else {}
        if spec is not None and served:
            # vLLM serves this config on its V1 runner (the speculative config's own notice says why): simulate that
            return self.model_copy(update={"speculative": spec.model_copy(update=served)})
        return self

    @property
    def num_replicas(self) -> int:
        """Data-parallel replicas: hardware.num_gpus over the target's tensor parallelism."""
        return self.hardware.num_gpus // self.target_model.tensor_parallel_size

    def effective_drafter(self) -> DrafterSpec | None:
        """The drafter given, or the preset for (method, target), as the speculative config runs it; None
        with speculation off."""
        if self.speculative is None:
            return None
        drafter = (
            self.drafter if self.drafter is not None else default_drafter(self.speculative.method, self.target_model)
        )
        return drafter_as_configured(self.speculative, drafter)


def sglang_adaptive_problems(
    speculative: SpeculativeConfig | None, adaptive: SglangAdaptive | None
) -> list[tuple[tuple[str | int, ...], str]]:
    """SGLang 0.5.23's rules for --speculative-adaptive (adaptive_unsupported_reason,
    sglang/srt/speculative/adaptive_spec_params.py:56-104) and what replaces what in spectune's document.

    spectune drafts chains, so SGLang's topk=1 rule always holds; the K table and vLLM's adaptive
    verification are other servers' policies that the slots replace."""
    if adaptive is None:
        return []
    field = ("sglang_adaptive",)
    if speculative is None:
        return [(field, "given, but speculative is null; SGLang's adaptive steps need an eagle or eagle3 config")]
    problems: list[tuple[tuple[str | int, ...], str]] = []
    if speculative.method not in ("eagle", "eagle3"):
        problems.append(
            (field, f"needs speculative.method eagle or eagle3 (SGLang: only EAGLE/EAGLE3), got '{speculative.method}'")
        )
    if speculative.enable_adaptive_verification:
        problems.append(
            (
                field,
                "not with speculative.enable_adaptive_verification (vLLM's policy, another server); choose one",
            )
        )
    if speculative.num_speculative_tokens_per_batch_size:
        problems.append(
            (
                field,
                "not with speculative.num_speculative_tokens_per_batch_size: the slots set the depth per batch size "
                "(SglangAdaptive.pinned turns a table into singleton slots)",
            )
        )
    return problems


def drafter_as_configured(speculative: SpeculativeConfig, drafter: DrafterSpec) -> DrafterSpec:
    """``drafter`` with the speculative config's own say: draft_tensor_parallel_size, parallel_drafting."""
    update: dict[str, Any] = {}
    if speculative.draft_tensor_parallel_size is not None:
        update["tensor_parallel_size"] = speculative.draft_tensor_parallel_size
    if speculative.parallel_drafting and drafter.drafting == "sequential":
        update["drafting"] = "parallel"
    return drafter.model_copy(update=update) if update else drafter


def drafter_override_problems(
    speculative: SpeculativeFields,
    drafter: DrafterSpec | None,
    target_tp: int,
    *,
    paths: tuple[str, str] = ("speculative", "drafter"),
) -> list[tuple[tuple[str | int, ...], str]]:
    """The speculative config's draft_tensor_parallel_size: 1 or the target's (vLLM's rule), and not at odds
    with an explicit drafter's tensor_parallel_size."""
    given = speculative.draft_tensor_parallel_size
    field = (paths[0], "draft_tensor_parallel_size")
    if given is None:
        return []
    if given not in (1, target_tp):
        return [(field, f"must be 1 or the target's tensor_parallel_size ({target_tp}) as vLLM requires, got {given}")]
    if drafter is None or drafter.tensor_parallel_size in (None, given):
        return []
    return [
        (
            field,
            f"disagrees with {paths[1]}.tensor_parallel_size ({drafter.tensor_parallel_size}); give one, got {given}",
        )
    ]


def context_problems(
    workload: WorkloadConfig,
    target_model: TargetModelSpec,
    speculative: list[tuple[tuple[str | int, ...], SpeculativeFields | None]],
) -> list[tuple[tuple[str | int, ...], str]]:
    """The workload's longest request against the target's context and each speculative max_model_len.

    vLLM refuses a speculative max_model_len above the target's (SpeculativeConfig's
    _maybe_override_draft_max_model_len), and a request longer than either limit cannot be served whole.
    """
    target_limit = target_model.max_model_len_tokens
    problems: list[tuple[tuple[str | int, ...], str]] = []
    limits = [] if target_limit is None else [("target_model.max_model_len_tokens", target_limit)]
    for at, spec in speculative:
        given = None if spec is None else spec.max_model_len
        if given is None:
            continue
        field = (*at, "max_model_len")
        if target_limit is not None and given > target_limit:
            problems.append(
                (field, f"must be <= target_model.max_model_len_tokens ({target_limit}) as vLLM requires, got {given}")
            )
        limits.append((".".join(map(str, field)), given))
    return problems + context_limit_problems(workload, limits)


def dynamic_speculation_off_notice(replicas: int, k: int) -> str:
    return (
        f"vLLM disables dynamic speculation under data parallelism ({replicas} replicas): every batch is "
        f"served, and simulated, with num_speculative_tokens = {k}"
    )

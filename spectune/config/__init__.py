"""Validated, frozen configuration documents and the conversions between acceptance forms.

All validation in spectune lives here; downstream code trusts these models.
"""

from spectune.config._base import RuleViolations, SpectuneModel, SpectuneNotice
from spectune.config._documents import (
    DOCUMENT_KINDS,
    DOCUMENT_SUFFIXES,
    LoadedDocument,
    find_documents,
    load_document,
    validate_source,
)
from spectune.config._extrapolation import EXTRAPOLATION_RULES, ExtrapolationRule, extend_conditional, fitted_decay
from spectune.config._hardware import (
    DRAFTER_PRESET_NAMES,
    GPU_PRESET_NAMES,
    TARGET_MODEL_PRESET_NAMES,
    DrafterSpec,
    DraftingMode,
    GpuSpec,
    HardwareConfig,
    TargetModelSpec,
    default_drafter,
    default_drafter_preset,
    deployment_problems,
    kv_cache_capacity_tokens,
)
from spectune.config._loader import parse_mapping_text, read_mapping
from spectune.config._overrides import apply_overrides, parse_override
from spectune.config._profile import (
    AcceptanceCounts,
    AcceptanceProfile,
    AcceptanceRates,
    BatchSizeBin,
    MeasuredAcceptance,
)
from spectune.config._rates import (
    MIN_ACCEPTANCE_DECAY_FACTOR,
    acceptance_length_to_rates,
    conditional_to_unconditional,
    decay_to_conditional_rates,
    mean_acceptance_length,
    mean_rate_to_decay,
    unconditional_to_conditional,
)
from spectune.config._schema import document_json_schema
from spectune.config._simulation import (
    AcceptanceSource,
    SimulationDocument,
    SimulationOptions,
    drafter_as_configured,
    drafter_override_problems,
    dynamic_speculation_off_notice,
)
from spectune.config._speculative import MAX_NUM_SPECULATIVE_TOKENS, METHODS, SpeculativeConfig
from spectune.config._step_times import (
    STEP_TIME_COLUMNS,
    RooflineFitRecord,
    CostModelConfig,
    StepTimePoint,
    StepTimeTable,
    read_step_time_table,
)
from spectune.config._study import CONSTRAINT_METRICS, SpeculativeBase, StudyCandidate, StudyDocument
from spectune.config._workload import (
    MAX_SEQUENCE_TOKENS,
    MAX_TEMPERATURES,
    MAX_TRACE_ROWS,
    LengthDistribution,
    LengthsCsv,
    TemperatureShare,
    WorkloadConfig,
)

__all__ = [
    "EXTRAPOLATION_RULES",
    "ExtrapolationRule",
    "extend_conditional",
    "fitted_decay",
    "AcceptanceSource",
    "SimulationDocument",
    "SimulationOptions",
    "AcceptanceCounts",
    "AcceptanceProfile",
    "AcceptanceRates",
    "BatchSizeBin",
    "CostModelConfig",
    "DRAFTER_PRESET_NAMES",
    "DOCUMENT_KINDS",
    "DOCUMENT_SUFFIXES",
    "DrafterSpec",
    "DraftingMode",
    "GPU_PRESET_NAMES",
    "GpuSpec",
    "HardwareConfig",
    "MAX_NUM_SPECULATIVE_TOKENS",
    "MeasuredAcceptance",
    "MAX_SEQUENCE_TOKENS",
    "MAX_TEMPERATURES",
    "MAX_TRACE_ROWS",
    "METHODS",
    "MIN_ACCEPTANCE_DECAY_FACTOR",
    "LengthDistribution",
    "LengthsCsv",
    "LoadedDocument",
    "RuleViolations",
    "SpeculativeConfig",
    "CONSTRAINT_METRICS",
    "SpeculativeBase",
    "StudyCandidate",
    "StudyDocument",
    "SpectuneModel",
    "STEP_TIME_COLUMNS",
    "RooflineFitRecord",
    "SpectuneNotice",
    "StepTimePoint",
    "StepTimeTable",
    "TARGET_MODEL_PRESET_NAMES",
    "TargetModelSpec",
    "TemperatureShare",
    "WorkloadConfig",
    "acceptance_length_to_rates",
    "apply_overrides",
    "conditional_to_unconditional",
    "decay_to_conditional_rates",
    "default_drafter",
    "default_drafter_preset",
    "deployment_problems",
    "drafter_as_configured",
    "drafter_override_problems",
    "dynamic_speculation_off_notice",
    "kv_cache_capacity_tokens",
    "document_json_schema",
    "find_documents",
    "load_document",
    "mean_acceptance_length",
    "mean_rate_to_decay",
    "parse_mapping_text",
    "parse_override",
    "read_mapping",
    "read_step_time_table",
    "unconditional_to_conditional",
    "validate_source",
]

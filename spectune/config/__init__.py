"""Validated, frozen configuration documents and the conversions between acceptance forms.

All validation in spectune lives here; downstream code trusts these models.
"""

from spectune.config._deployment import deployment_problems, kv_cache_capacity_tokens
from spectune.config._documents import DOCUMENT_KINDS, find_documents, load_document, validate_source
from spectune.config._extrapolation import extend_conditional
from spectune.config._gpu import HardwareConfig
from spectune.config._loader import parse_mapping_text, read_mapping
from spectune.config._metrics import (
    CSV_METRICS,
    OBJECTIVE_METRICS,
    STEP_SCALED_METRICS,
    Constraint,
    Objective,
    StudyMetrics,
    or_nan,
)
from spectune.config._models import DrafterSpec, TargetModelSpec, default_drafter
from spectune.config._overrides import apply_overrides
from spectune.config._policy import SglangAdaptive, SglangAdaptiveSlot, SlotParameters
from spectune.config._profile import DEFAULT_CONFIDENCE_AUC, AcceptanceProfile, AcceptanceRates
from spectune.config._rates import (
    acceptance_length_to_rates,
    conditional_to_unconditional,
    decay_to_conditional_rates,
    mean_acceptance_length,
    mean_rate_to_decay,
    unconditional_to_conditional,
)
from spectune.config._schema import document_json_schema
from spectune.config._simulation import AcceptanceSource, SimulationDocument, SimulationOptions
from spectune.config._speculative import (
    FIELDS_ADDED_FOR_VLLM_0_33,
    MAX_NUM_SPECULATIVE_TOKENS,
    SpeculativeConfig,
    default_num_speculative_tokens,
)
from spectune.config._step_times import STEP_TIME_COLUMNS, CostModelConfig, StepTimeTable, read_step_time_table
from spectune.config._study import DEFAULT_POLICIES, POLICY_RUNTIMES, StudyDocument, combo_label
from spectune.config._trtllm import TrtllmSpeculativeConfig, is_trtllm_options, load_trtllm_options
from spectune.config._vllm_rules import DEFAULT_VLLM_VERSION, VLLM_VERSIONS, unknown_vllm_version
from spectune.config._workload import LengthDistribution, WorkloadConfig

__all__ = [
    "AcceptanceProfile",
    "AcceptanceRates",
    "AcceptanceSource",
    "CSV_METRICS",
    "Constraint",
    "CostModelConfig",
    "DEFAULT_CONFIDENCE_AUC",
    "DEFAULT_POLICIES",
    "DEFAULT_VLLM_VERSION",
    "DOCUMENT_KINDS",
    "DrafterSpec",
    "FIELDS_ADDED_FOR_VLLM_0_33",
    "HardwareConfig",
    "LengthDistribution",
    "MAX_NUM_SPECULATIVE_TOKENS",
    "OBJECTIVE_METRICS",
    "Objective",
    "POLICY_RUNTIMES",
    "STEP_SCALED_METRICS",
    "STEP_TIME_COLUMNS",
    "SglangAdaptive",
    "SglangAdaptiveSlot",
    "SimulationDocument",
    "SimulationOptions",
    "SlotParameters",
    "SpeculativeConfig",
    "StepTimeTable",
    "StudyDocument",
    "StudyMetrics",
    "TargetModelSpec",
    "TrtllmSpeculativeConfig",
    "VLLM_VERSIONS",
    "WorkloadConfig",
    "acceptance_length_to_rates",
    "apply_overrides",
    "combo_label",
    "conditional_to_unconditional",
    "decay_to_conditional_rates",
    "default_drafter",
    "default_num_speculative_tokens",
    "deployment_problems",
    "document_json_schema",
    "extend_conditional",
    "find_documents",
    "is_trtllm_options",
    "kv_cache_capacity_tokens",
    "load_document",
    "load_trtllm_options",
    "mean_acceptance_length",
    "mean_rate_to_decay",
    "or_nan",
    "parse_mapping_text",
    "read_mapping",
    "read_step_time_table",
    "unconditional_to_conditional",
    "unknown_vllm_version",
    "validate_source",
]

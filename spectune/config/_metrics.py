"""The metrics a study keeps per simulation -- one typed record -- and the SLOs that bound them.

``StudyMetrics`` is the one list of metric names: each field is a ``SimulationResult`` field (same
name, same unit) whose metadata says its unit, whether ``trials.csv`` shows it, whether an SLO may
bound it and which objective it is. Every other list -- the keys of a trial's result attribute, the
CSV columns, the constraint metrics, the objectives -- is derived from it here. The rest of a
``SimulationResult`` (step shares, wall times of parts, the no-speculation baseline) is about the run,
not about the configuration, and a study does not keep it.

A study document writes an SLO as ``'METRIC <= NUMBER'``; it is parsed once, at validation, into a
``Constraint``.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, field_validator

from spectune.config._base import SpectuneModel

__all__ = [
    "BOUND_METRICS",
    "CSV_METRICS",
    "OBJECTIVE_METRICS",
    "STEP_SCALED_METRICS",
    "STUDY_METRICS",
    "Constraint",
    "MetricInfo",
    "Objective",
    "StudyMetrics",
    "or_nan",
    "parse_constraint",
]

Objective = Literal["throughput", "tpot_p99"]
MetricKind = Literal["float", "int", "bool", "floats"]
StepScaling = Literal["time", "rate"]


@dataclass(frozen=True)
class MetricInfo:
    """What a study does with one metric: its unit, and where it appears besides the trial's record."""

    unit: str
    kind: MetricKind = "float"
    csv: bool = False  # a column of trials.csv
    bound: bool = False  # an SLO may bound it ('METRIC <= NUMBER')
    objective: Objective | None = None  # the objective it is (maximised for throughput, minimised for latency)
    # How it moves when every decode step takes longer: in proportion ('time': latencies the steps bound),
    # inversely ('rate': throughputs), or not at all (None).
    step_scaling: StepScaling | None = None


def _metric(
    unit: str,
    kind: MetricKind = "float",
    *,
    csv: bool = False,
    bound: bool = False,
    objective: Objective | None = None,
    step_scaling: StepScaling | None = None,
) -> Any:
    return dataclasses.field(
        default=None, metadata={"metric": MetricInfo(unit, kind, csv, bound, objective, step_scaling)}
    )


@dataclass(frozen=True)
class StudyMetrics:
    """One simulation's metrics as a study keeps them (``SimulationResult`` fields; units in the names).

    None is a metric the simulation did not measure (a NaN percentile without finished requests, no
    drafts at K = 0) or an evaluator did not report. Throughput and the mean batch size are over the
    steady state; acceptance is in vLLM's units (the mean acceptance length counts the bonus token,
    ``acceptance_per_position`` is unconditional).
    """

    throughput_tokens_per_s: float | None = _metric(
        "tokens/s", csv=True, bound=True, objective="throughput", step_scaling="rate"
    )
    throughput_stderr_tokens_per_s: float | None = _metric("tokens/s", csv=True, step_scaling="rate")
    tpot_p50_ms: float | None = _metric("ms", csv=True, bound=True, step_scaling="time")
    tpot_p99_ms: float | None = _metric("ms", csv=True, bound=True, objective="tpot_p99", step_scaling="time")
    itl_p50_ms: float | None = _metric("ms", bound=True, step_scaling="time")
    itl_p99_ms: float | None = _metric("ms", csv=True, bound=True, step_scaling="time")
    ttft_p50_ms: float | None = _metric("ms", bound=True)
    ttft_p99_ms: float | None = _metric("ms", csv=True, bound=True)
    mean_acceptance_length: float | None = _metric("tokens", csv=True)
    acceptance_per_position: tuple[float, ...] | None = _metric("fraction", "floats")
    num_drafts: int | None = _metric("drafts", "int")
    num_draft_tokens: int | None = _metric("tokens", "int")
    num_accepted_tokens: int | None = _metric("tokens", "int")
    mean_batch_size: float | None = _metric("requests", csv=True)
    mean_step_ms: float | None = _metric("ms", step_scaling="time")
    num_requests: int | None = _metric("requests", "int")
    output_tokens: int | None = _metric("tokens", "int")
    simulated_steps: int | None = _metric("steps", "int")
    truncated: bool | None = _metric("", "bool")
    wall_time_s: float | None = _metric("s")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> StudyMetrics:
        """The kept metrics of ``SimulationResult.to_dict()``, or of a trial's stored result attribute.

        Other keys are ignored; a value of the wrong kind, a non-finite number or a missing key is None.
        """
        values: dict[str, Any] = {}
        for name, kind in _KINDS:
            value = data.get(name)
            # The common case first (a search reads every stored result each time it decides).
            if type(value) is float and kind == "float" and math.isfinite(value):
                values[name] = value
            elif type(value) is int and kind == "int":
                values[name] = value
            else:
                values[name] = _read(kind, value)
        return cls(**values)

    def to_attr(self) -> dict[str, Any]:
        """The JSON a trial stores (every field, in order; None for a metric not measured)."""
        return {name: list(value) if isinstance(value, tuple) else value for name, value in self.items()}

    def items(self) -> list[tuple[str, Any]]:
        return [(name, getattr(self, name)) for name in STUDY_METRICS]

    def value(self, name: str) -> float:
        """A numeric metric by name, NaN when not measured."""
        if name not in STUDY_METRICS or STUDY_METRICS[name].kind == "floats":
            raise KeyError(f"{name!r} is not a numeric study metric (one of {', '.join(NUMERIC_METRICS)})")
        value = getattr(self, name)
        return math.nan if value is None else float(value)


def or_nan(value: float | None) -> float:
    """A measured number, NaN when not measured."""
    return math.nan if value is None else float(value)


def _read(kind: MetricKind, value: Any) -> Any:
    if value is None:
        return None
    if kind == "bool":
        return value if isinstance(value, bool) else None
    if kind == "floats":
        if not isinstance(value, (list, tuple)) or not all(_is_number(v) for v in value):
            return None
        return tuple(float(v) for v in value)
    if not _is_number(value) or not math.isfinite(float(value)):
        return None
    if kind == "int":
        return int(value) if float(value).is_integer() else None
    return float(value)


def _is_number(value: Any) -> bool:
    return type(value) in (float, int) or (isinstance(value, numbers.Real) and not isinstance(value, bool))


STUDY_METRICS: dict[str, MetricInfo] = {f.name: f.metadata["metric"] for f in dataclasses.fields(StudyMetrics)}
_KINDS = tuple((name, info.kind) for name, info in STUDY_METRICS.items())
NUMERIC_METRICS = tuple(name for name, info in STUDY_METRICS.items() if info.kind != "floats")
CSV_METRICS = tuple(name for name, info in STUDY_METRICS.items() if info.csv)
BOUND_METRICS = tuple(name for name, info in STUDY_METRICS.items() if info.bound)
OBJECTIVE_METRICS: dict[Objective, str] = {
    info.objective: name for name, info in STUDY_METRICS.items() if info.objective
}
STEP_SCALED_METRICS: dict[str, StepScaling] = {
    name: info.step_scaling for name, info in STUDY_METRICS.items() if info.step_scaling
}

_OPERATORS: dict[str, Literal["<=", ">="]] = {"<=": "<=", ">=": ">="}
_CONSTRAINT = re.compile(r"^\s*([^\s<>=!]+)\s*(<=|>=|==|!=|<|>|=)\s*(\S+)\s*$")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


class Constraint(SpectuneModel):
    """An SLO: ``metric <= bound`` or ``metric >= bound`` on one of the study's metrics."""

    metric: str = Field(description=f"The bounded metric, one of {', '.join(BOUND_METRICS)} (unit in the name).")
    op: Literal["<=", ">="] = Field(description="'<=' (at most the bound) or '>=' (at least the bound).")
    bound: float = Field(description="The bound, in the metric's unit.")
    text: str | None = Field(
        default=None, exclude=True, description="As the document wrote it (the study's fingerprint hashes this text)."
    )

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, value: str) -> str:
        if value not in BOUND_METRICS:
            raise ValueError(f"must be one of {', '.join(BOUND_METRICS)}, got {value!r}")
        return value

    @property
    def label(self) -> str:
        """The canonical text, e.g. 'tpot_p99_ms <= 50' (Optuna's constraint name, the report's)."""
        return f"{self.metric} {self.op} {self.bound:g}"

    def violation(self, value: float) -> float:
        """How far ``value`` is outside the bound (<= 0 when satisfied); Optuna's constraint value."""
        if not math.isfinite(value):
            return math.inf
        return value - self.bound if self.op == "<=" else self.bound - value


def parse_constraint(text: str) -> Constraint:
    """``'METRIC <= NUMBER'`` or ``'METRIC >= NUMBER'`` as a ``Constraint``; ``ValueError`` says which part is wrong."""
    match = _CONSTRAINT.match(text)
    if match is None:
        raise ValueError(
            f"must look like 'METRIC <= NUMBER' or 'METRIC >= NUMBER' with METRIC one of {', '.join(BOUND_METRICS)}, "
            f"got {text!r}"
        )
    metric, op, number = match.groups()
    if metric not in BOUND_METRICS:
        raise ValueError(f"METRIC must be one of {', '.join(BOUND_METRICS)}, got {metric!r} (in {text!r})")
    if op not in _OPERATORS:
        raise ValueError(f"the operator must be '<=' or '>=', got {op!r} (in {text!r})")
    if not _NUMBER.fullmatch(number) or not math.isfinite(float(number)):
        raise ValueError(f"NUMBER must be a finite number, got {number!r} (in {text!r})")
    return Constraint(metric=metric, op=_OPERATORS[op], bound=float(number), text=text)

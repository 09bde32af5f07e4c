"""The cost-model config, and measured step-time tables (CSV or YAML) checked when the document loads.

A table holds points ``batch_size, num_speculative_tokens, step_time_ms``: the wall time of one
serving iteration at that batch size and K (K = 0 is plain decoding) -- the shape vLLM's
dynamic-speculation profiler and ``vllm bench`` sweeps produce. CSV: one header line naming the three
columns (any order), one point per line, ``#`` comment lines and blank lines skipped. YAML: a mapping
with ``points`` (a list of mappings with the three keys) and optional ``source``, ``notes`` and
``kind: step_time_table``. Every problem is reported with the table's file, line and column.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, GetJsonSchemaHandler, ValidationInfo, field_validator, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from spectune._files import read_bounded
from spectune.config._base import RuleViolations, SpectuneModel, check_rules, notify
from spectune.config._loader import MAX_DOCUMENT_BYTES, read_mapping
from spectune.config._preset_forms import schema_with_name_forms
from spectune.config._speculative import MAX_NUM_SPECULATIVE_TOKENS
from spectune.errors import DocumentError, Problem

__all__ = [
    "MIN_STEP_TIME_MS",
    "STEP_TIME_COLUMNS",
    "STEP_TIME_OPTIONAL_COLUMNS",
    "CostModelConfig",
    "RooflineFitRecord",
    "StepTimePoint",
    "StepTimeTable",
    "read_step_time_table",
]

STEP_TIME_COLUMNS = ("batch_size", "num_speculative_tokens", "step_time_ms")
# Written by 'spectune calibrate': the --max-concurrency that produced a row and, from repeats, its MAD.
STEP_TIME_OPTIONAL_COLUMNS = ("concurrency", "step_time_mad_ms")
_MAX_BATCH_SIZE = 1_000_000
_MAX_STEP_TIME_MS = 1e6
# No decode step is faster: it runs at least one kernel per layer and a sampler, and one kernel launch
# costs microseconds even from a CUDA graph. Smaller values are unit slips (seconds or microseconds in
# a millisecond column) or corruption, and would be read as speedups of hundreds of times.
MIN_STEP_TIME_MS = 0.01
_STEP_TIME_RANGE = (
    f"must be a number of milliseconds in [{MIN_STEP_TIME_MS:g}, {_MAX_STEP_TIME_MS:g}] "
    f"(no GPU decode step takes under {MIN_STEP_TIME_MS * 1000:g} microseconds)"
)
_MAX_POINTS = 10_000  # keeps the leave-one-out fit report under a second
_YAML_KEYS = ("kind", "points", "source", "notes")


class StepTimePoint(SpectuneModel):
    """One measured serving iteration."""

    batch_size: int = Field(ge=1, le=_MAX_BATCH_SIZE, description="Running requests in the step (requests).")
    num_speculative_tokens: int = Field(
        ge=0, le=MAX_NUM_SPECULATIVE_TOKENS, description="Draft tokens per request, K (tokens; 0 = plain decoding)."
    )
    step_time_ms: float = Field(
        ge=MIN_STEP_TIME_MS,
        le=_MAX_STEP_TIME_MS,
        description=f"Wall time of the whole step (milliseconds; at least {MIN_STEP_TIME_MS:g}, a physical floor).",
    )
    concurrency: int | None = Field(
        default=None, ge=1, le=_MAX_BATCH_SIZE, description="The bench's --max-concurrency behind the row (requests)."
    )
    step_time_mad_ms: float | None = Field(
        default=None,
        ge=0,
        le=_MAX_STEP_TIME_MS,
        description="Median absolute deviation of repeated runs (milliseconds).",
    )


class StepTimeTable(SpectuneModel):
    """Measured step times; each K needs at least two batch sizes, and no (batch size, K) appears twice."""

    file: str | None = Field(default=None, description="The table file the points were read from (None: inline).")
    source: str | None = Field(default=None, max_length=2000, description="Where the numbers come from.")
    notes: str | None = Field(default=None, max_length=4000, description="Free text.")
    points: list[StepTimePoint] = Field(min_length=2, max_length=_MAX_POINTS, description="The measured points.")

    @model_validator(mode="after")
    def _check_points(self) -> StepTimeTable:
        keys = [(p.batch_size, p.num_speculative_tokens) for p in self.points]
        check_rules([(("points", i), message) for i, message in _point_problems(keys, lambda i: f"points[{i}]")])
        return self

    def num_speculative_tokens_measured(self) -> list[int]:
        """The K values the table covers, ascending."""
        return sorted({p.num_speculative_tokens for p in self.points})

    def k_coverage_problem(self, needed: Iterable[int]) -> str | None:
        """Why the table cannot give step times for every K in ``needed`` (None when it can).

        K is interpolated between measured values, never extrapolated, so ``validate`` refuses what
        ``simulate`` would refuse at its first step.
        """
        measured = self.num_speculative_tokens_measured()
        outside = sorted(k for k in set(needed) if not measured[0] <= k <= measured[-1])
        if not outside:
            return None
        where = self.file or "the table"
        return (
            f"{where} measures K {measured[0]}..{measured[-1]}, but this document needs K {', '.join(map(str, outside))}; "
            "K is interpolated between measured values, never extrapolated: measure it"
        )


def _point_problems(keys: list[tuple[int, int]], where: Callable[[int], str]) -> list[tuple[int, str]]:
    """Duplicate (batch size, K) points and K values with fewer than two batch sizes, by point index.

    ``where(index)`` says where a point is, for messages ("line 7", "points[3]").
    """
    problems: list[tuple[int, str]] = []
    first: dict[tuple[int, int], int] = {}
    by_k: dict[int, list[int]] = {}
    for index, key in enumerate(keys):
        if key in first:
            problems.append(
                (
                    index,
                    f"duplicate point batch_size {key[0]}, num_speculative_tokens {key[1]} "
                    f"(first at {where(first[key])}); give each point once",
                )
            )
            continue
        first[key] = index
        by_k.setdefault(key[1], []).append(index)
    for k, indices in sorted(by_k.items()):
        if len(indices) < 2:
            problems.append(
                (
                    indices[0],
                    f"num_speculative_tokens {k} has 1 point (batch_size {keys[indices[0]][0]}); "
                    "each K needs >= 2 batch sizes to interpolate between",
                )
            )
    return problems


def _parse_value(column: str, raw: Any) -> tuple[Any, str | None]:
    """A cell's value, or an error message saying what is allowed and what was given."""
    shown = repr(raw) if isinstance(raw, str) else str(raw)
    if column in ("step_time_ms", "step_time_mad_ms"):
        value: Any = raw
        if isinstance(raw, str):
            try:
                value = float(raw.strip())
            except ValueError:
                return None, f"must be a number of milliseconds > 0, got {shown}"
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None, f"must be a number of milliseconds > 0, got {shown}"
        if column == "step_time_mad_ms":
            if math.isfinite(value) and 0 <= value <= _MAX_STEP_TIME_MS:
                return float(value), None
            return None, f"must be a number of milliseconds in [0, {_MAX_STEP_TIME_MS:g}], got {shown}"
        if not math.isfinite(value) or not MIN_STEP_TIME_MS <= value <= _MAX_STEP_TIME_MS:
            return None, f"{_STEP_TIME_RANGE}, got {shown}"
        return float(value), None
    low, high = (1, _MAX_BATCH_SIZE) if column in ("batch_size", "concurrency") else (0, MAX_NUM_SPECULATIVE_TOKENS)
    allowed = f"must be a whole number in [{low}, {high}], got {shown}"
    value = raw
    if isinstance(raw, str):
        try:
            value = float(raw.strip())
        except ValueError:
            return None, allowed
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None, allowed
    if not float(value).is_integer() or not low <= value <= high:
        return None, allowed
    return int(value), None


def _read_csv(text: str, file: str) -> tuple[list[tuple[int, dict[str, Any]]], list[Problem]]:
    lines = [
        (number, line)
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    wanted = ", ".join(STEP_TIME_COLUMNS)
    if not lines:
        return [], [Problem(file, None, "", f"no header line; expected the columns {wanted}")]
    header_line, header = lines[0]
    names = [name.strip() for name in next(csv.reader([header]))]
    problems = []
    allowed = ", ".join((*STEP_TIME_COLUMNS, *STEP_TIME_OPTIONAL_COLUMNS))
    for position, name in enumerate(names, start=1):
        if name not in STEP_TIME_COLUMNS + STEP_TIME_OPTIONAL_COLUMNS:
            problems.append(
                Problem(file, header_line, f"column {position}", f"unknown column {name!r}; allowed: {allowed}")
            )
        elif names.index(name) != position - 1:
            problems.append(Problem(file, header_line, f"column {position}", f"column {name!r} appears twice"))
    missing = [name for name in STEP_TIME_COLUMNS if name not in names]
    if missing:
        problems.append(
            Problem(
                file,
                header_line,
                "",
                f"missing column(s) {', '.join(missing)}; the header must name "
                f"{wanted}, got {', '.join(names) or 'nothing'}",
            )
        )
    if problems:
        return [], problems
    rows = []
    for number, line in lines[1:]:
        cells = next(csv.reader([line]))
        if len(cells) != len(names):
            header_names = ", ".join(names)
            problems.append(
                Problem(file, number, "", f"has {len(cells)} fields, the header has {len(names)} ({header_names})")
            )
            continue
        row = {}
        for position, (name, cell) in enumerate(zip(names, cells, strict=True), start=1):
            value, error = _parse_value(name, cell)
            if error:
                problems.append(Problem(file, number, f"column {position} ({name})", error))
            row[name] = value
        rows.append((number, row))
    return rows, problems


def _read_yaml(path: Path) -> tuple[list[tuple[int, dict[str, Any]]], dict[str, Any], list[Problem]]:
    source = read_mapping(path)
    file, data, positions = source.file, source.data, source.positions
    problems = [
        Problem(file, positions.line_of((key,), key=True), key, f"unknown field; allowed: {', '.join(_YAML_KEYS)}")
        for key in data
        if key not in _YAML_KEYS
    ]
    if data.get("kind", "step_time_table") != "step_time_table":
        line = positions.line_of(("kind",))
        problems.append(Problem(file, line, "kind", f"must be step_time_table, got {data['kind']!r}"))
    points = data.get("points")
    if not isinstance(points, list):
        got = "nothing" if points is None else type(points).__name__
        problems.append(
            Problem(
                file,
                positions.line_of(("points",)),
                "points",
                f"must be a list of {{{', '.join(STEP_TIME_COLUMNS)}}} mappings, got {got}",
            )
        )
        points = []
    rows = []
    for index, item in enumerate(points):
        where = f"points[{index}]"
        line = positions.line_of(("points", index))
        if not isinstance(item, dict):
            keys = ", ".join(STEP_TIME_COLUMNS)
            problems.append(Problem(file, line, where, f"must be a mapping with keys {keys}, got {item!r:.60}"))
            continue
        for key in item:
            if key not in STEP_TIME_COLUMNS:
                problems.append(
                    Problem(
                        file,
                        positions.line_of(("points", index, key), key=True),
                        f"{where}.{key}",
                        f"unknown column; allowed: {', '.join(STEP_TIME_COLUMNS)}",
                    )
                )
        row = {}
        for name in STEP_TIME_COLUMNS:
            if name not in item:
                problems.append(Problem(file, line, f"{where}.{name}", "required column is missing"))
                continue
            value, error = _parse_value(name, item[name])
            if error:
                problems.append(Problem(file, positions.line_of(("points", index, name)), f"{where}.{name}", error))
            row[name] = value
        rows.append((line or 0, row))
    extras = {key: data[key] for key in ("source", "notes") if isinstance(data.get(key), str)}
    return rows, extras, problems


def read_step_time_table(path: Path) -> StepTimeTable:
    """Read and check a CSV or YAML step-time table; raise ``DocumentError`` listing every problem."""
    file = str(path)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".yaml", ".yml"):
        raise DocumentError(
            [Problem(file, None, "", f"must be a .csv, .yaml or .yml file, got {suffix or 'no suffix'!r}")]
        )
    extras: dict[str, Any] = {}
    if suffix == ".csv":
        try:
            text = read_bounded(path, MAX_DOCUMENT_BYTES, expected="a CSV file").decode("utf-8-sig")
        except UnicodeDecodeError as err:
            raise DocumentError([Problem(file, None, "", f"not UTF-8 text (byte {err.start})")]) from None
        rows, problems = _read_csv(text, file)
    else:
        rows, extras, problems = _read_yaml(path)
    if problems:
        raise DocumentError(problems)
    keys = [(row["batch_size"], row["num_speculative_tokens"]) for _, row in rows]
    found = _point_problems(keys, lambda i: f"line {rows[i][0]}")
    problems = [Problem(file, rows[index][0], "", message) for index, message in found]
    if not 2 <= len(rows) <= _MAX_POINTS:
        count = f"must have 2 to {_MAX_POINTS} points (two batch sizes per K), got {len(rows)}"
        problems.append(Problem(file, None, "", count))
    if problems:
        raise DocumentError(problems)
    return StepTimeTable(file=file, points=[StepTimePoint(**row) for _, row in rows], **extras)


class RooflineFitRecord(SpectuneModel):
    """Where fitted roofline parameters come from and how well they reproduce what they were fitted to."""

    source: str = Field(max_length=2000, description="The log(s) fitted to.")
    num_windows: int = Field(ge=1, description="Decode windows fitted (count).")
    mean_relative_error: float = Field(ge=0, description="Mean |fitted - measured| / measured step time (fraction).")
    max_relative_error: float = Field(ge=0, description="Largest |fitted - measured| / measured step time (fraction).")


class CostModelConfig(SpectuneModel):
    """How step times are computed: a roofline from the hardware and model shapes, or a measured table."""

    method: Literal["roofline", "measured"] = Field(
        default="roofline",
        description="roofline: from bandwidth, FLOP/s and model shapes; measured: interpolate step_times.",
    )
    step_times: StepTimeTable | None = Field(
        default=None,
        description="measured: a path to a CSV/YAML table (relative to this document) or the table inline.",
    )
    step_times_context_tokens: float | None = Field(
        default=None,
        ge=0,
        le=1e8,
        description="measured: mean tokens per request in the KV cache while the table was measured (tokens); "
        "when given, the roofline's change with context is added to the table; otherwise the table holds at "
        "every context.",
    )
    overhead_s: float = Field(
        default=1e-3,
        ge=0,
        le=10,
        description="roofline: fixed time per step -- scheduling, input preparation, launches (seconds).",
    )
    draft_pass_overhead_s: float = Field(
        default=1e-4, ge=0, le=1, description="roofline: fixed time per neural draft pass (seconds)."
    )
    achievable_bandwidth_fraction: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="Fraction of peak HBM bandwidth the deployment's decode kernels reach, overriding the GPU's "
        "(fraction); fitted to a server log by 'spectune calibrate --fit-roofline'.",
    )
    fit: RooflineFitRecord | None = Field(
        default=None, description="How achievable_bandwidth_fraction and overhead_s were fitted (informational)."
    )
    zero_k_draft_cost: Literal["none", "draft_prefill", "all_draft_steps"] = Field(
        default="none",
        description="What a K = 0 row of a per-batch-size K table costs: 'none' (plain decoding, no drafter pass), "
        "'draft_prefill' (the drafter still runs one pass to keep its KV cache in sync: vLLM V1, and Model Runner V2 "
        "with PR #51575) or 'all_draft_steps' (every configured draft step runs and is thrown away: MRV2 before it).",
    )
    sampler: Literal["vllm", "spectune"] = Field(
        default="vllm",
        description="roofline: whose rejection sampler a step pays for -- 'vllm' (vLLM 0.33's measured times "
        "per method, interpolated in batch, K and vocabulary) or 'spectune' (spectune's kernels: one read "
        "of the logits at the GPU's bandwidth).",
    )

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return schema_with_name_forms(core_schema, handler, ["roofline"], overrides=False)

    @model_validator(mode="before")
    @classmethod
    def _bare_method(cls, data: Any) -> Any:
        return {"method": data} if isinstance(data, str) else data

    @field_validator("step_times", mode="before", json_schema_input_type=str | StepTimeTable | None)
    @classmethod
    def _read_table_file(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, str | Path):
            return value
        path = Path(value)
        base_dir = info.context.get("base_dir") if isinstance(info.context, dict) else None
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        try:
            return read_step_time_table(path)
        except DocumentError as err:
            raise RuleViolations([((), str(problem)) for problem in err.problems]) from None

    @model_validator(mode="after")
    def _check_method(self, info: ValidationInfo) -> CostModelConfig:
        problems: list[tuple[tuple[str | int, ...], str]] = []
        if self.method == "measured" and self.step_times is None:
            problems.append((("step_times",), "method 'measured' needs step_times (a table file), got none"))
        if self.method == "roofline":
            for name in ("step_times", "step_times_context_tokens"):
                if getattr(self, name) is not None:
                    problems.append(((name,), "only used with method: measured, got method: roofline"))
        check_rules(problems)
        if self.method == "measured":
            for name in ("overhead_s", "draft_pass_overhead_s"):
                if name in self.model_fields_set:
                    notify(
                        info,
                        (name,),
                        "does not change measured step times (they include it); it only shapes the split into phases",
                    )
            if self.step_times is not None and 0 not in self.step_times.num_speculative_tokens_measured():
                notify(
                    info,
                    ("step_times",),
                    "the table has no num_speculative_tokens 0 points, so plain decoding "
                    "(speculation off) cannot be costed",
                )
        return self

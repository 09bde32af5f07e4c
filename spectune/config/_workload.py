"""The workload: how requests arrive, how long they are, at which temperature they sample.

A workload is closed loop (``concurrency`` requests kept in flight: a new one starts when one ends) or
open loop (Poisson arrivals at ``arrival_rate_per_s``); either way at most ``max_num_seqs`` run at
once, as vLLM's flag of that name caps them. Prompt and output lengths are each fixed, drawn from a
distribution, or replayed in pairs from a CSV trace. The temperature is one value or a weighted mix
of a few values (acceptance is calibrated once per temperature, so the set is kept small).
``vocab_size`` is the vocabulary of the simulated logit rows: acceptance depends on how target and
draft distributions overlap, not on V, so a small V keeps CPU simulation fast.

The simulation document embeds this model; it is not a document kind of its own.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, PrivateAttr, Strict, Tag, ValidationInfo, model_validator

from spectune._files import read_bounded
from spectune.config._base import FieldPath, SpectuneModel, check_rules, notify
from spectune.errors import DocumentError

__all__ = [
    "MAX_SEQUENCE_TOKENS",
    "MAX_TEMPERATURES",
    "MAX_TRACE_ROWS",
    "LengthDistribution",
    "LengthsCsv",
    "TemperatureShare",
    "WorkloadConfig",
    "context_limit_problems",
]

# One million tokens of context is past every served model; beyond it a length is a typo.
MAX_SEQUENCE_TOKENS = 1_048_576
# Each temperature gets its own calibrated logit bank; a handful covers real traffic mixes.
MAX_TEMPERATURES = 8
MAX_TRACE_ROWS = 1_000_000
MAX_TRACE_BYTES = 64 * 1024 * 1024
_MAX_REPORTED_ROW_PROBLEMS = 10
_TRACE_COLUMNS = ("prompt_tokens", "output_tokens")

StrictInt = Annotated[int, Strict()]
StrictFloat = Annotated[float, Strict()]
_Rule = tuple[FieldPath, str]


class LengthDistribution(SpectuneModel):
    """Token counts drawn per request, rounded to whole tokens and clipped to [min_tokens, max_tokens]."""

    distribution: Literal["uniform", "normal", "lognormal"] = Field(
        description="'uniform': every whole count in [min_tokens, max_tokens] equally likely; 'normal' and "
        "'lognormal': mean_tokens and std_tokens are those of the lengths themselves (before clipping)."
    )
    mean_tokens: StrictFloat | None = Field(
        default=None, gt=0.0, le=MAX_SEQUENCE_TOKENS, description="Mean length (tokens); normal and lognormal only."
    )
    std_tokens: StrictFloat | None = Field(
        default=None,
        ge=0.0,
        le=MAX_SEQUENCE_TOKENS,
        description="Standard deviation of the length (tokens); normal and lognormal only.",
    )
    min_tokens: StrictInt = Field(
        default=1, ge=1, le=MAX_SEQUENCE_TOKENS, description="Shortest length; draws below are clipped up (tokens)."
    )
    max_tokens: StrictInt | None = Field(
        default=None,
        ge=1,
        le=MAX_SEQUENCE_TOKENS,
        description=f"Longest length; draws above are clipped down (tokens). Required for uniform; "
        f"default {MAX_SEQUENCE_TOKENS} otherwise.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> LengthDistribution:
        problems: list[_Rule] = []
        shaped = self.distribution in ("normal", "lognormal")
        for name in ("mean_tokens", "std_tokens"):
            if shaped and getattr(self, name) is None:
                problems.append(((name,), f"required for distribution '{self.distribution}'"))
            if not shaped and getattr(self, name) is not None:
                problems.append(
                    (
                        (name,),
                        f"only for distribution normal or lognormal (uniform is set by min_tokens and "
                        f"max_tokens), got {getattr(self, name)}",
                    )
                )
        if self.distribution == "uniform" and self.max_tokens is None:
            problems.append((("max_tokens",), "required for distribution 'uniform'"))
        upper = self.upper_tokens
        if upper < self.min_tokens:
            problems.append((("max_tokens",), f"must be >= min_tokens ({self.min_tokens}), got {upper}"))
        elif self.mean_tokens is not None and not self.min_tokens <= self.mean_tokens <= upper:
            problems.append(
                (
                    ("mean_tokens",),
                    f"must be in [min_tokens, max_tokens] = [{self.min_tokens}, {upper}], got {self.mean_tokens}",
                )
            )
        check_rules(problems)
        return self

    @property
    def upper_tokens(self) -> int:
        """``max_tokens``, or the global cap when it is not given."""
        return self.max_tokens if self.max_tokens is not None else MAX_SEQUENCE_TOKENS


class LengthsCsv(SpectuneModel):
    """A trace of (prompt, output) token counts, one request per CSV row, read and checked at load."""

    path: str = Field(
        min_length=1,
        max_length=4096,
        description="CSV file with columns prompt_tokens,output_tokens (whole tokens >= 1; a header row "
        "naming them is optional, other named columns are ignored). Relative paths are relative to the "
        "document's folder.",
    )
    order: Literal["sequential", "random"] = Field(
        default="sequential",
        description="'sequential': request i takes row i (rows are reused from the top when the trace is "
        "shorter than num_requests); 'random': rows drawn uniformly with replacement (seeded).",
    )
    _pairs: tuple[tuple[int, int], ...] = PrivateAttr(default=())

    @model_validator(mode="after")
    def _read_trace(self, info: ValidationInfo) -> LengthsCsv:
        context: Any = info.context
        base_dir = context.get("base_dir") if isinstance(context, dict) else None
        file = Path(self.path)
        if base_dir is not None and not file.is_absolute():
            file = Path(base_dir) / file
        text, problem = _read_trace_text(file)
        if problem is not None:
            check_rules([(("path",), problem)])
        pairs, row_problems = _parse_trace(text, str(file))
        check_rules([(("path",), message) for message in row_problems])
        self._pairs = pairs
        return self

    @property
    def pairs(self) -> tuple[tuple[int, int], ...]:
        """The trace's (prompt_tokens, output_tokens) rows, in file order."""
        return self._pairs


def _read_trace_text(file: Path) -> tuple[str, str | None]:
    try:
        raw = read_bounded(file, MAX_TRACE_BYTES, expected="a CSV file")
    except DocumentError as err:
        reason = err.problems[0].message
        return "", f"no such file: {file}" if reason == "no such file" else f"{file}: {reason}"
    try:
        return raw.decode("utf-8-sig"), None
    except UnicodeDecodeError as err:
        return "", f"{file}: not UTF-8 text (byte {err.start})"


def _parse_trace(text: str, file: str) -> tuple[tuple[tuple[int, int], ...], list[str]]:
    """Rows of a trace CSV as (prompt_tokens, output_tokens); problems as 'FILE:LINE: message'."""
    rows = [(number, row) for number, row in enumerate(csv.reader(io.StringIO(text)), start=1) if any(row)]
    if not rows:
        return (), [f"{file}: holds no rows; expected prompt_tokens,output_tokens per line"]
    columns = (0, 1)
    header = [cell.strip().lower() for cell in rows[0][1]]
    has_header = all(not cell.isdigit() for cell in header)
    if has_header:
        missing = [name for name in _TRACE_COLUMNS if name not in header]
        if missing:
            return (), [
                f"{file}:{rows[0][0]}: header must name columns {', '.join(_TRACE_COLUMNS)}; "
                f"missing {', '.join(missing)}, got {', '.join(header)}"
            ]
        columns = (header.index(_TRACE_COLUMNS[0]), header.index(_TRACE_COLUMNS[1]))
        rows = rows[1:]
    if len(rows) > MAX_TRACE_ROWS:
        return (), [f"{file}: has {len(rows)} rows; the limit is {MAX_TRACE_ROWS}"]
    if not rows:
        return (), [f"{file}: has a header but no rows"]
    pairs: list[tuple[int, int]] = []
    problems: list[str] = []
    width = len(header) if has_header else 2
    for number, row in rows:
        if len(row) != width:
            expected = "as many as the header" if has_header else "prompt_tokens,output_tokens"
            problems.append(f"{file}:{number}: expected {width} columns ({expected}), got {len(row)}")
            continue
        values = [_token_count(row[column]) for column in columns]
        for name, column, value in zip(_TRACE_COLUMNS, columns, values, strict=True):
            if value is None:
                problems.append(
                    f"{file}:{number}: {name} must be a whole number in [1, {MAX_SEQUENCE_TOKENS}], "
                    f"got {row[column].strip()!r}"
                )
        if None not in values:
            pairs.append((values[0], values[1]))  # type: ignore[arg-type]
    if len(problems) > _MAX_REPORTED_ROW_PROBLEMS:
        extra = len(problems) - _MAX_REPORTED_ROW_PROBLEMS
        problems = problems[:_MAX_REPORTED_ROW_PROBLEMS] + [f"{file}: ... and {extra} more bad rows"]
    return tuple(pairs), problems


def _token_count(cell: str) -> int | None:
    text = cell.strip()
    if not text.isdigit():
        return None
    value = int(text)
    return value if 1 <= value <= MAX_SEQUENCE_TOKENS else None


class TemperatureShare(SpectuneModel):
    """One sampling temperature of a mix and its share of the requests."""

    temperature: StrictFloat = Field(
        ge=0.0, le=10.0, description="Sampling temperature (dimensionless; 0 = greedy decoding)."
    )
    weight: StrictFloat = Field(
        gt=0.0,
        le=1e6,
        description="Relative share of requests at this temperature (any positive number; "
        "shares are divided by their sum).",
    )


def _length_tag(value: Any) -> str:
    # A mapping when validating, the model itself when serialising.
    return "length-distribution" if isinstance(value, dict | LengthDistribution) else "fixed-length"


def _temperature_tag(value: Any) -> str:
    return "temperature-mix" if isinstance(value, list) else "one-temperature"


# Tags carry a '-' so the error mapper keeps them out of dotted field names.
_FixedTokens = Annotated[StrictInt, Field(ge=1, le=MAX_SEQUENCE_TOKENS)]
TokenLength = Annotated[
    Annotated[_FixedTokens, Tag("fixed-length")] | Annotated[LengthDistribution, Tag("length-distribution")],
    Discriminator(_length_tag),
]
_OneTemperature = Annotated[StrictFloat, Field(ge=0.0, le=10.0)]
_TemperatureMix = Annotated[list[TemperatureShare], Field(min_length=1, max_length=MAX_TEMPERATURES)]
Temperature = Annotated[
    Annotated[_OneTemperature, Tag("one-temperature")] | Annotated[_TemperatureMix, Tag("temperature-mix")],
    Discriminator(_temperature_tag),
]


class WorkloadConfig(SpectuneModel):
    """The traffic a simulation serves: arrivals, request lengths, temperatures, simulated vocabulary."""

    concurrency: StrictInt | None = Field(
        default=None,
        ge=1,
        le=65_536,
        description="Closed loop: requests kept in flight; a new one starts as soon as one finishes "
        "(requests). Give this or arrival_rate_per_s, not both.",
    )
    arrival_rate_per_s: StrictFloat | None = Field(
        default=None,
        gt=0.0,
        le=1e6,
        description="Open loop: mean rate of Poisson arrivals (requests per second). Give this or "
        "concurrency, not both.",
    )
    max_num_seqs: StrictInt = Field(
        default=256,
        ge=1,
        le=65_536,
        description="Most requests running at once, as vLLM's --max-num-seqs (requests); later arrivals "
        "wait in the queue.",
    )
    max_num_batched_tokens: StrictInt = Field(
        default=8192,
        ge=1,
        le=1_048_576,
        description="Token budget of one engine step, as vLLM's --max-num-batched-tokens (tokens): decode "
        "tokens (B·(K+1)) first, then prefill chunks of waiting prompts.",
    )
    num_requests: StrictInt = Field(ge=1, le=1_000_000, description="Requests simulated in total (requests).")
    prompt_tokens: TokenLength | None = Field(
        default=None,
        description="Prompt length: a whole number of tokens, or a distribution {distribution, mean_tokens, "
        "std_tokens, min_tokens, max_tokens}. Required unless lengths_csv is given.",
    )
    output_tokens: TokenLength | None = Field(
        default=None,
        description="Output length (tokens generated per request, the first included): a whole number, or "
        "a distribution like prompt_tokens. Required unless lengths_csv is given.",
    )
    lengths_csv: LengthsCsv | None = Field(
        default=None,
        description="Replay (prompt_tokens, output_tokens) pairs from a CSV trace instead of giving "
        "prompt_tokens and output_tokens.",
    )
    temperature: Temperature = Field(
        description="Sampling temperature of every request (dimensionless, 0 = greedy), or a mix: a list of "
        f"{{temperature, weight}} entries (at most {MAX_TEMPERATURES} distinct temperatures).",
    )
    vocab_size: StrictInt = Field(
        default=4096,
        ge=128,
        le=262_144,
        description="Vocabulary of the simulated logit rows (tokens). Acceptance depends on the overlap of "
        "target and draft distributions, not on V; the smallest reproducible acceptance rate is about 1/V.",
    )

    @model_validator(mode="after")
    def _check_cross_field_rules(self, info: ValidationInfo) -> WorkloadConfig:
        problems: list[_Rule] = []
        if (self.concurrency is None) == (self.arrival_rate_per_s is None):
            got = "both" if self.concurrency is not None else "neither"
            problems.append(
                (
                    ("concurrency",),
                    f"give exactly one of concurrency (closed loop), arrival_rate_per_s (open loop); got {got}",
                )
            )
        if self.lengths_csv is not None:
            for name in ("prompt_tokens", "output_tokens"):
                if getattr(self, name) is not None:
                    problems.append(((name,), "give either lengths_csv or prompt_tokens and output_tokens, not both"))
        else:
            for name in ("prompt_tokens", "output_tokens"):
                if getattr(self, name) is None:
                    problems.append(((name,), "required unless lengths_csv is given"))
        if isinstance(self.temperature, list):
            seen: dict[float, int] = {}
            for i, share in enumerate(self.temperature):
                if share.temperature in seen:
                    problems.append(
                        (
                            ("temperature", i, "temperature"),
                            f"each temperature once; {share.temperature} is already entry {seen[share.temperature]}",
                        )
                    )
                seen.setdefault(share.temperature, i)
        check_rules(problems)
        self._advise(info)
        return self

    def _advise(self, info: ValidationInfo) -> None:
        if self.concurrency is not None and self.concurrency > self.max_num_seqs:
            notify(
                info,
                ("concurrency",),
                f"{self.concurrency} exceeds max_num_seqs ({self.max_num_seqs}); "
                f"at most {self.max_num_seqs} run at once, the rest wait in the queue",
            )
        if self.concurrency is not None and self.num_requests < self.concurrency:
            notify(info, ("num_requests",), f"{self.num_requests} requests never reach concurrency {self.concurrency}")
        csv_trace = self.lengths_csv
        if csv_trace is not None and csv_trace.order == "sequential" and self.num_requests > len(csv_trace.pairs):
            notify(
                info,
                ("lengths_csv", "path"),
                f"the trace has {len(csv_trace.pairs)} rows for "
                f"{self.num_requests} requests; rows are reused from the top",
            )

    @property
    def temperature_mix(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(distinct temperatures, their shares summing to 1), in the order given."""
        if not isinstance(self.temperature, list):
            return (self.temperature,), (1.0,)
        total = sum(share.weight for share in self.temperature)
        return (
            tuple(share.temperature for share in self.temperature),
            tuple(share.weight / total for share in self.temperature),
        )


def _largest(length: int | LengthDistribution | None, at: FieldPath) -> tuple[int, FieldPath, str]:
    if isinstance(length, LengthDistribution):
        if length.max_tokens is None:
            return length.upper_tokens, at, f"{length.distribution} draws without max_tokens reach"
        return length.max_tokens, at + ("max_tokens",), "max_tokens"
    return length or 0, at, "fixed at"


def context_limit_problems(
    workload: WorkloadConfig, limits: list[tuple[str, int]], *, at: FieldPath = ("workload",)
) -> list[tuple[FieldPath, str]]:
    """The workload's longest request (largest prompt plus largest output) against each context limit.

    ``limits`` pairs a limit's dotted field name with its value (tokens); the problem is located at the
    workload field that sets the longest prompt, since a request past the limit is one vLLM refuses.
    """
    if not limits:
        return []
    if workload.lengths_csv is not None:
        pairs = workload.lengths_csv.pairs
        row = max(range(len(pairs)), key=lambda i: sum(pairs[i]))
        prompt, output = pairs[row]
        field: FieldPath = at + ("lengths_csv", "path")
        what = f"trace row {row + 1} asks for {prompt} prompt + {output} output = {prompt + output} tokens"
    else:
        prompt, field, how = _largest(workload.prompt_tokens, at + ("prompt_tokens",))
        output, out_field, out_how = _largest(workload.output_tokens, at + ("output_tokens",))
        field = field if prompt >= output else out_field
        what = f"the longest request is {prompt + output} tokens (prompt {how} {prompt} + output {out_how} {output})"
    problems: list[tuple[FieldPath, str]] = []
    for name, limit in limits:
        if prompt + output > limit:
            problems.append((field, f"prompt + output must be <= {name} ({limit} tokens); {what}"))
    return problems

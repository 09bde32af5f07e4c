"""``kind: study``: which speculative configs to try, on which deployment and traffic, for what goal.

The deployment and traffic sections are exactly a simulation document's (``workload``, ``hardware``,
``target_model``, ``cost_model``, ``simulation``). Each candidate is a drafting method the user has:
a speculative-config base (method, model, ... -- never K, which the study searches), its acceptance
and optionally its drafter. The study tries every candidate with every verification rule and draft
sampling of ``search`` (combinations that cannot differ, such as ngram with probabilistic drafting,
are skipped, not errors), K from ``search.num_speculative_tokens`` plus K = 0 (speculation off), at
every batch size of ``schedule`` -- each simulated as a closed loop at that concurrency.

``search.policies`` says how the server varies K: a static K, a K table, vLLM's adaptive verification
(one K max, or a table of K max) or SGLang's adaptive steps. They need three *runtimes* of each combo
(none, vllm_adaptive, sglang_adaptive); a runtime a combo cannot serve is skipped with the reason.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, WithJsonSchema, field_serializer, field_validator, model_validator

from spectune._files import SAFE_NAME_RULE, is_safe_name
from spectune.config._base import RuleViolations, SpectuneModel, check_rules, notify
from spectune.config._deployment import deployment_problems
from spectune.config._gpu import HardwareConfig
from spectune.config._metrics import BOUND_METRICS, OBJECTIVE_METRICS, Constraint, Objective, parse_constraint
from spectune.config._models import DrafterSpec, TargetModelSpec, default_drafter
from spectune.config._simulation import AcceptanceSource, SimulationOptions, context_problems, drafter_override_problems
from spectune.config._speculative import (
    _DISTRIBUTION_FREE_METHODS,
    MAX_NUM_SPECULATIVE_TOKENS,
    SpeculativeConfig,
    SpeculativeFields,
)
from spectune.config._step_times import CostModelConfig
from spectune.config._vllm_rules import v1_fallback_reasons
from spectune.config._workload import WorkloadConfig
from spectune.errors import SpectuneError

__all__ = [
    "DEFAULT_POLICIES",
    "POLICY_RUNTIMES",
    "Policy",
    "RUNTIMES",
    "Runtime",
    "SpeculativeBase",
    "StudyCandidate",
    "StudyDocument",
    "combo_label",
]

FieldPath = tuple[str | int, ...]

_SEARCHED_FIELDS = {
    "num_speculative_tokens": "searched by the study: set search.num_speculative_tokens instead",
    "num_speculative_tokens_per_batch_size": "this table is what the study produces; remove it",
    "synthetic_acceptance_rate": "a study verifies real drafts; synthetic acceptance is for GPU benchmarks",
    "synthetic_acceptance_rates": "a study verifies real drafts; synthetic acceptance is for GPU benchmarks",
    "synthetic_acceptance_length": "a study verifies real drafts; synthetic acceptance is for GPU benchmarks",
    "enable_adaptive_verification": "searched by the study: add 'adaptive_verification' to search.policies instead",
}
Policy = Literal["static", "k_table", "adaptive_verification", "adaptive_verification_table", "sglang_adaptive"]
Runtime = Literal["none", "vllm_adaptive", "sglang_adaptive"]
# The runtime each policy's points are simulated with: a static K and a K table share their simulations
# (each bucket is simulated at one batch size), and so do both forms of adaptive verification.
POLICY_RUNTIMES: dict[str, Runtime] = {
    "static": "none",
    "k_table": "none",
    "adaptive_verification": "vllm_adaptive",
    "adaptive_verification_table": "vllm_adaptive",
    "sglang_adaptive": "sglang_adaptive",
}
RUNTIMES: tuple[Runtime, ...] = ("none", "vllm_adaptive", "sglang_adaptive")
# SGLang 0.5.23 runs --speculative-adaptive only for EAGLE/EAGLE3 (adaptive_spec_params.py:60-65).
_SGLANG_ADAPTIVE_METHODS = ("eagle", "eagle3")
# The defaults of list fields, typed as their fields are (a lambda's list would read as list[str]).
_DEFAULT_RULES: list[Literal["standard", "block"]] = ["standard"]
_DEFAULT_SAMPLINGS: list[Literal["greedy", "probabilistic"]] = ["greedy"]
_DEFAULT_OBJECTIVES: list[Literal["throughput", "tpot_p99"]] = ["throughput"]
DEFAULT_POLICIES: list[Policy] = ["k_table"]


class SpeculativeBase(SpeculativeFields):
    """A candidate's speculative config without K: method, model and the other vLLM fields.

    Setting ``rejection_sample_method`` or ``draft_sample_method`` here pins this candidate to that
    value instead of searching ``search.rejection_sample_methods`` / ``search.draft_sample_methods``.
    """

    num_speculative_tokens: None = Field(
        default=None, description="Not allowed here: K is searched (search.num_speculative_tokens)."
    )

    def config(
        self, num_speculative_tokens: int, rejection_sample_method: str, draft_sample_method: str
    ) -> SpeculativeConfig:
        """The config one point serves: these fields with K, the rule and the draft sampling.

        Built, not validated again: the study document checked every combination it tries (K within
        search.num_speculative_tokens, rules and samplings the method can use).
        """
        fields = dict(self) | {
            "num_speculative_tokens": num_speculative_tokens,
            "rejection_sample_method": rejection_sample_method,
            "draft_sample_method": draft_sample_method,
        }
        chosen = self.model_fields_set | {"num_speculative_tokens", "rejection_sample_method", "draft_sample_method"}
        return SpeculativeConfig.model_construct(_fields_set=chosen, **fields)

    @model_validator(mode="before")
    @classmethod
    def _no_searched_fields(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        problems: list[tuple[FieldPath, str]] = [
            ((key,), f"{why}, got {data[key]!r}") for key, why in _SEARCHED_FIELDS.items() if key in data
        ]
        if data.get("method") in ("custom_class", "extract_hidden_states"):
            problems.append(
                (("method",), f"'{data['method']}' validates for vLLM but is not simulated, so a study cannot try it")
            )
        rule = data.get("rejection_sample_method")
        if rule in ("synthetic", "fly"):
            why = "" if rule == "synthetic" else " (vLLM's lossy FLy rule validates but is not simulated)"
            problems.append(
                (
                    ("rejection_sample_method",),
                    "must be 'standard' or 'block' in a study (or left out to search "
                    f"search.rejection_sample_methods){why}, got '{rule}'",
                )
            )
        check_rules(problems)
        return data


class StudyCandidate(SpectuneModel):
    """A drafting method to try: its config base, its measured (or assumed) acceptance, its drafter."""

    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=60,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="Short name in tables and trial params (letters, digits, . _ -); default: the method.",
    )
    speculative: SpeculativeBase = Field(description="vLLM speculative-config fields without K (method, model, ...).")
    acceptance: AcceptanceSource = Field(description="The drafter's acceptance: a profile file or inline rates.")
    drafter: DrafterSpec | None = Field(
        default=None, description="The drafter's size and shape; default: the preset for the method and target."
    )

    @property
    def label(self) -> str:
        return self.name or self.speculative.method


class KRange(SpectuneModel):
    """The K values tried (K = 0, speculation off, is always tried as well)."""

    min: int = Field(default=1, ge=1, le=MAX_NUM_SPECULATIVE_TOKENS, description="Smallest K >= 1 tried (tokens).")
    max: int = Field(ge=1, le=MAX_NUM_SPECULATIVE_TOKENS, description="Largest K tried (tokens).")

    @model_validator(mode="after")
    def _ordered(self) -> KRange:
        if self.min > self.max:
            check_rules([(("min",), f"must be <= max ({self.max}), got {self.min}")])
        return self


class SearchSpace(SpectuneModel):
    """What varies besides the method: K, the verification rule, the draft sampling."""

    num_speculative_tokens: KRange = Field(description="K range {min, max}; K = 0 is always a candidate too.")
    rejection_sample_methods: list[Literal["standard", "block"]] = Field(
        default_factory=_DEFAULT_RULES.copy, min_length=1, max_length=2, description="Verification rules to try."
    )
    draft_sample_methods: list[Literal["greedy", "probabilistic"]] = Field(
        default_factory=_DEFAULT_SAMPLINGS.copy, min_length=1, max_length=2, description="Draft samplings to try."
    )
    policies: list[Policy] = Field(
        default_factory=DEFAULT_POLICIES.copy,
        min_length=1,
        max_length=5,
        description="How the server varies K, compared by the recommendation: 'static' (one K for every batch "
        "size), 'k_table' (one K per bucket: num_speculative_tokens_per_batch_size), 'adaptive_verification' "
        "(vLLM's enable_adaptive_verification under one K max), 'adaptive_verification_table' (a K max per "
        "bucket with adaptive verification on top), 'sglang_adaptive' (SGLang's --speculative-adaptive, "
        "candidate steps 1..K max per bucket; eagle/eagle3 only). Default: ['k_table'].",
    )

    @model_validator(mode="after")
    def _distinct(self) -> SearchSpace:
        problems = []
        for name in ("rejection_sample_methods", "draft_sample_methods", "policies"):
            values = getattr(self, name)
            if len(set(values)) != len(values):
                problems.append(((name,), f"must not repeat a value, got {values}"))
        if self.policies == ["sglang_adaptive"]:
            # The recommendation, vllm.json and measure.sh are vLLM's; SGLang's policy is compared with one.
            problems.append(
                (
                    ("policies",),
                    "must hold a vLLM policy too (static, k_table, adaptive_verification or "
                    "adaptive_verification_table): sglang_adaptive is compared with the vLLM recommendation, "
                    "got ['sglang_adaptive']",
                )
            )
        check_rules(problems)
        return self


class ScheduleBuckets(SpectuneModel):
    """The batch sizes the schedule is made of; each is simulated as a closed loop at that concurrency."""

    batch_sizes: list[int] = Field(
        min_length=1, max_length=32, description="Batch sizes (running requests), strictly increasing, each >= 1."
    )
    weights: list[float] | None = Field(
        default=None,
        description="Share of serving time spent near each batch size (positive, any scale); weights the "
        "aggregate and picks SGLang's single K. Default: equal.",
    )
    requests_per_batch_size: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="Simulate this many requests per unit of batch size (requests), capped at "
        "workload.num_requests: small batches reach a steady state with few requests, large ones need "
        "more. Default: workload.num_requests at every batch size.",
    )
    min_requests: int = Field(
        default=1,
        ge=1,
        le=1_000_000,
        description="With requests_per_batch_size: simulate at least this many requests (requests); small "
        "batch sizes verify few drafts per step and need more steps for the same precision.",
    )

    def num_requests(self, batch_size: int, cap: int) -> int:
        """Requests simulated at ``batch_size`` (at most ``cap``)."""
        if self.requests_per_batch_size is None:
            return cap
        return max(1, min(cap, max(self.min_requests, self.requests_per_batch_size * batch_size)))

    @model_validator(mode="after")
    def _consistent(self) -> ScheduleBuckets:
        problems: list[tuple[FieldPath, str]] = []
        for i, size in enumerate(self.batch_sizes):
            if size < 1:
                problems.append((("batch_sizes", i), f"must be >= 1, got {size}"))
            if i and size <= self.batch_sizes[i - 1]:
                problems.append(
                    (("batch_sizes", i), f"must be > {self.batch_sizes[i - 1]} (strictly increasing), got {size}")
                )
        if self.weights is not None:
            if len(self.weights) != len(self.batch_sizes):
                problems.append(
                    (
                        ("weights",),
                        f"must have one weight per batch size ({len(self.batch_sizes)}), got {len(self.weights)}",
                    )
                )
            problems += [(("weights", i), f"must be > 0, got {w}") for i, w in enumerate(self.weights) if not w > 0]
        check_rules(problems)
        return self


class StudyTrials(SpectuneModel):
    """The search budget and sampler; changing these does not change the study (a rerun may raise them)."""

    n_trials: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="Complete trials the study ends with (trials). Default: until the structured search "
        "converges, every point (exhaustive), or 25% of the space (tpe).",
    )
    sampler: Literal["auto", "structured", "exhaustive", "tpe"] = Field(
        default="auto",
        description="'structured' (screen combos, then K per batch size), 'exhaustive' (every point), 'tpe' "
        "(Optuna's TPE, seeded), 'auto' (exhaustive up to 64 points, else structured).",
    )
    keep_combos: int = Field(
        default=2, ge=1, le=64, description="Structured search: combos kept after screening at the main batch size."
    )
    refine_budget: float | None = Field(
        default=None,
        ge=0,
        le=100,
        description="Structured search: work that adaptive precision may add to separate results within noise "
        "that would change the recommendation (tie sets simulated again with 4x, then 16x the requests), as a "
        "share of the search's own work (simulated steps; 4x the requests is about 4x the steps); 0 turns it "
        "off. Default: 0.5.",
    )


class StudyDocument(SpectuneModel):
    """``kind: study``: candidates x verification rules x draft samplings x K x batch sizes, searched."""

    kind: Literal["study"] = Field(description="Document kind.")
    name: str = Field(
        min_length=1, max_length=100, json_schema_extra={"pattern": r"^[A-Za-z0-9_.-]+$"},
        description="Study name in the storage and default output folder runs/<name> (letters, digits, . _ -).",
    )  # fmt: skip
    seed: int = Field(default=0, ge=0, le=2**63 - 1, description="Seed of every simulation (same seed, same numbers).")
    workload: WorkloadConfig = Field(
        description="The traffic, as in a simulation document but without concurrency or arrival_rate_per_s: "
        "each batch size of schedule.batch_sizes is simulated as a closed loop at that concurrency."
    )
    hardware: HardwareConfig = Field(description="The GPUs.")
    target_model: TargetModelSpec = Field(description="The served model.")
    cost_model: CostModelConfig = Field(default_factory=CostModelConfig, description="How step times are computed.")
    simulation: SimulationOptions = Field(default_factory=SimulationOptions, description="How each simulation runs.")
    candidates: list[StudyCandidate] = Field(min_length=1, max_length=32, description="The drafting methods to try.")
    search: SearchSpace = Field(description="K range, verification rules and draft samplings to try.")
    schedule: ScheduleBuckets = Field(description="Batch sizes of the per-batch-size K schedule.")
    objectives: list[Objective] = Field(
        default_factory=_DEFAULT_OBJECTIVES.copy,
        min_length=1,
        max_length=2,
        description=f"'throughput' ({OBJECTIVE_METRICS['throughput']}, maximised), optionally then 'tpot_p99' "
        f"({OBJECTIVE_METRICS['tpot_p99']}, minimised) for a Pareto front; the recommendation maximises "
        "throughput within the constraints.",
    )
    constraints: list[Annotated[Constraint, WithJsonSchema({"type": "string"})]] = Field(
        default_factory=list,
        max_length=16,
        description=f"SLOs as 'METRIC <= NUMBER' or 'METRIC >= NUMBER', METRIC one of {', '.join(BOUND_METRICS)}.",
    )
    trials: StudyTrials = Field(default_factory=StudyTrials, description="Budget and sampler.")
    storage: str | None = Field(
        default=None,
        max_length=4096,
        description="Optuna storage: a journal file path (relative to this document) or a database URL "
        "(postgresql+psycopg://USER:PASSWORD@HOST/DB). Default: runs/<name>/study.journal. --storage overrides.",
    )

    @model_validator(mode="before")
    @classmethod
    def _closed_loop_per_bucket(cls, data: Any) -> Any:
        """The study sets the concurrency per bucket; a placeholder lets the workload model validate."""
        if not isinstance(data, dict) or not isinstance(data.get("workload"), dict):
            return data
        workload = data["workload"]
        given = [key for key in ("concurrency", "arrival_rate_per_s") if key in workload]
        if given:
            raise RuleViolations(
                [
                    (
                        ("workload", key),
                        f"set by the study: each of schedule.batch_sizes is simulated as a closed "
                        f"loop at that concurrency; remove it, got {workload[key]!r}",
                    )
                    for key in given
                ]
            )
        return {**data, "workload": {**workload, "concurrency": 1}}

    @field_validator("name")
    @classmethod
    def _one_folder_name(cls, name: str) -> str:
        """The name becomes the folder runs/<name>, so it must be exactly one safe path component."""
        if not is_safe_name(name):
            raise ValueError(f"must be one folder name (it names runs/<name>): {SAFE_NAME_RULE}; got {name!r}")
        return name

    @field_validator("constraints", mode="before")
    @classmethod
    def _parse_constraints(cls, values: Any) -> Any:
        """Each 'METRIC <= NUMBER' text becomes a ``Constraint``, once."""
        if not isinstance(values, list):
            return values
        parsed: list[Constraint] = []
        problems: list[tuple[FieldPath, str]] = []
        for i, value in enumerate(values):
            if isinstance(value, Constraint):
                parsed.append(value)
                continue
            if not isinstance(value, str):
                problems.append(
                    ((i,), f"a constraint is a string like 'tpot_p99_ms <= 50' (METRIC <= or >= NUMBER), got {value!r}")
                )
                continue
            try:
                parsed.append(parse_constraint(value))
            except ValueError as err:
                problems.append(((i,), str(err)))
        check_rules(problems)
        check_rules(_empty_intervals(parsed))
        return parsed

    @field_serializer("constraints")
    def _constraint_texts(self, constraints: list[Constraint]) -> list[str]:
        return [c.text if c.text is not None else c.label for c in constraints]

    @model_validator(mode="after")
    def _fits_together(self, info: ValidationInfo) -> StudyDocument:
        problems: list[tuple[FieldPath, str]] = []
        if self.objectives[0] != "throughput" or len(set(self.objectives)) != len(self.objectives):
            problems.append((("objectives",), f"must be [throughput] or [throughput, tpot_p99], got {self.objectives}"))
        labels = [c.label for c in self.candidates]
        for i, label in enumerate(labels):
            if label in labels[:i]:
                problems.append(
                    (("candidates", i, "name"), f"names must be distinct (give each a name), got {label!r} twice")
                )
        for i, size in enumerate(self.schedule.batch_sizes):
            if size > self.workload.max_num_seqs:
                problems.append(
                    (
                        ("schedule", "batch_sizes", i),
                        f"must be <= workload.max_num_seqs ({self.workload.max_num_seqs}), got {size}",
                    )
                )
        tp = self.target_model.tensor_parallel_size
        if self.hardware.num_gpus > tp and self.hardware.num_gpus % tp == 0:
            # A study's batch sizes and K table are one engine's; vLLM turns the per-batch-size K table off
            # under data parallelism, and replicas would split each batch size among themselves.
            problems.append(
                (
                    ("hardware", "num_gpus"),
                    f"a study tunes one engine: must equal target_model."
                    f"tensor_parallel_size ({tp}) (replicas serve the same table each, and vLLM disables the "
                    f"per-batch-size K table under data parallelism), got {self.hardware.num_gpus}",
                )
            )
        for i, candidate in enumerate(self.candidates):
            problems += self._candidate_problems(i, candidate)
        problems += context_problems(
            self.workload,
            self.target_model,
            [(("candidates", i, "speculative"), c.speculative) for i, c in enumerate(self.candidates)],
        )
        if not self.combinations():
            problems.append(
                (("search",), "no valid (method, rule, draft sampling) combination is left; see the skipped ones")
            )
        if self.cost_model.method == "measured" and self.cost_model.step_times is not None:
            k_range = self.search.num_speculative_tokens
            gap = self.cost_model.step_times.k_coverage_problem([0, *range(k_range.min, k_range.max + 1)])
            if gap is not None:
                problems.append((("cost_model", "step_times"), gap + " (a study always simulates K = 0 too)"))
        check_rules(problems)
        largest = self.schedule.batch_sizes[-1]
        requests = self.schedule.num_requests(largest, self.workload.num_requests)
        if requests < 2 * largest:
            notify(
                info,
                ("workload", "num_requests"),
                f"{requests} requests are few for batch size {largest} (the "
                f"closed loop barely reaches a steady state); simulate >= {2 * largest}",
            )
        return self

    def _candidate_problems(self, i: int, candidate: StudyCandidate) -> list[tuple[FieldPath, str]]:
        at: FieldPath = ("candidates", i)
        method = candidate.speculative.method
        if candidate.drafter is not None and candidate.drafter.method != method:
            return [
                (
                    at + ("drafter", "method"),
                    f"must match speculative.method ('{method}'), got '{candidate.drafter.method}'",
                )
            ]
        try:
            drafter = candidate.drafter if candidate.drafter is not None else default_drafter(method, self.target_model)
        except SpectuneError as err:
            return [(at + ("drafter",), f"required here: {err}")]
        tp = self.target_model.tensor_parallel_size
        problems = [
            (at + path, message)
            for path, message in drafter_override_problems(candidate.speculative, candidate.drafter, tp)
        ]
        for path, message in deployment_problems(self.hardware, self.target_model, drafter):
            problems.append((at + path if path[0] == "drafter" else path, message))
        return problems

    # --- the combinations the study tries ------------------------------------------------------

    def _combination_choices(self, candidate: StudyCandidate) -> tuple[list[str], list[str]]:
        pinned = candidate.speculative.model_fields_set
        rules = (
            [candidate.speculative.rejection_sample_method]
            if "rejection_sample_method" in pinned
            else self.search.rejection_sample_methods
        )
        samplings = (
            [candidate.speculative.draft_sample_method]
            if "draft_sample_method" in pinned
            else self.search.draft_sample_methods
        )
        return list(rules), list(samplings)

    def combinations(self) -> list[tuple[StudyCandidate, str, str]]:
        """(candidate, rule, draft sampling) triples tried by some runtime, in document order."""
        seen: dict[tuple[str, str, str], tuple[StudyCandidate, str, str]] = {}
        for (candidate, rule, sampling, _), reason in self._all_combinations():
            if reason is None:
                seen.setdefault((candidate.label, rule, sampling), (candidate, rule, sampling))
        return list(seen.values())

    def runtimes(self) -> list[Runtime]:
        """The runtimes ``search.policies`` needs, in ``RUNTIMES`` order."""
        needed = {POLICY_RUNTIMES[policy] for policy in self.search.policies}
        return [runtime for runtime in RUNTIMES if runtime in needed]

    def runtime_combinations(self) -> list[tuple[StudyCandidate, str, str, Runtime]]:
        """(candidate, rule, draft sampling, runtime) tried, in document order, runtimes innermost."""
        return [combo for combo, reason in self._all_combinations() if reason is None]

    def skipped_combinations(self) -> list[tuple[str, str]]:
        """('candidate/rule/sampling[/runtime]', why) for the combinations that cannot differ from another
        one or that the runtime's server cannot serve."""
        return [
            (combo_label(c.label, rule, sampling, runtime), reason)
            for (c, rule, sampling, runtime), reason in self._all_combinations()
            if reason
        ]

    def _all_combinations(self) -> list[tuple[tuple[StudyCandidate, str, str, Runtime], str | None]]:
        out = []
        runtimes = self.runtimes()
        for candidate in self.candidates:
            rules, samplings = self._combination_choices(candidate)
            method = candidate.speculative.method
            on_v1 = v1_fallback_reasons(candidate.speculative)
            for rule in rules:
                for sampling in samplings:
                    reason = None
                    if method in _DISTRIBUTION_FREE_METHODS and sampling == "probabilistic":
                        reason = f"'{method}' proposes tokens without a distribution"
                    elif method in _DISTRIBUTION_FREE_METHODS and rule == "block":
                        reason = f"'{method}' has no draft distribution; vLLM verifies it with 'standard'"
                    elif on_v1 and (rule == "block" or sampling == "probabilistic"):
                        reason = (
                            f"vLLM serves {on_v1[0][1]} on its V1 runner, as standard verification of one-hot drafts"
                        )
                    for runtime in runtimes:
                        why = reason or _runtime_problem(candidate.speculative, rule, sampling, runtime)
                        if reason is not None and runtime != runtimes[0]:
                            continue  # a combo that cannot differ is skipped once, under its own label
                        out.append(((candidate, rule, sampling, runtime), why))
        return out

    def candidate(self, label: str) -> StudyCandidate:
        """The candidate named ``label``."""
        for candidate in self.candidates:
            if candidate.label == label:
                return candidate
        raise KeyError(f"no candidate {label!r} in study {self.name!r}")


def combo_label(candidate: str, rule: str, sampling: str, runtime: str = "none") -> str:
    """'candidate/rule/sampling', with '/runtime' unless the runtime is 'none' (so labels, trial params and
    journals of studies made before runtimes read as they did)."""
    base = f"{candidate}/{rule}/{sampling}"
    return base if runtime == "none" else f"{base}/{runtime}"


def _runtime_problem(speculative: SpeculativeBase, rule: str, sampling: str, runtime: Runtime) -> str | None:
    """Why a runtime cannot serve a combo (the server's own rule), or None."""
    method = speculative.method
    if runtime == "vllm_adaptive" and speculative.use_local_argmax_reduction and method != "dspark":
        # vLLM 0.33.0 vllm/config/speculative.py refuses the pair for every method but dspark.
        return f"vLLM refuses enable_adaptive_verification with use_local_argmax_reduction for '{method}'"
    if runtime != "sglang_adaptive":
        return None
    if method not in _SGLANG_ADAPTIVE_METHODS:
        return f"SGLang's adaptive steps serve only eagle and eagle3, not '{method}'"
    if rule != "standard":
        return "SGLang has no block verification; its adaptive steps verify token by token ('standard')"
    if sampling != "greedy":
        return "SGLang's EAGLE chain drafts greedily; it has no probabilistic draft sampling"
    return None


def _empty_intervals(constraints: list[Constraint]) -> list[tuple[FieldPath, str]]:
    """A '>=' bound above a '<=' bound on one metric leaves no value that meets both: no trial could."""
    problems: list[tuple[FieldPath, str]] = []
    for i, upper in enumerate(constraints):
        if upper.op != "<=":
            continue
        for j, lower in enumerate(constraints):
            if lower.op == ">=" and lower.metric == upper.metric and lower.bound > upper.bound:
                problems.append(
                    (
                        (max(i, j),),
                        f"contradicts constraints[{min(i, j)}]: {upper.label!r} and {lower.label!r} leave no "
                        f"{upper.metric} that meets both (the '>=' bound must be at most the '<=' bound)",
                    )
                )
    return problems

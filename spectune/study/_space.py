"""The discrete space a study searches: batch-size buckets x (method, rule, sampling, runtime) combos x K.

A combo's *runtime* is what the server does with K each step: 'none' (K drafts verified, as a static K
or a K table serve them), 'vllm_adaptive' (vLLM's adaptive verification under K max) or
'sglang_adaptive' (SGLang's adaptive steps, candidates 1..K max). The study's ``policies`` say which
runtimes are searched and how the recommendation reads their points (``_policies``).

A *point* is one simulation: a combo at a K, served as a closed loop at one bucket's batch size.
K = 0 (speculation off) does not depend on the combo, so each bucket has exactly one K = 0 point,
shared by every combo: its ``combo`` is None. The space is plain data (JSON round-trip) so that a
finished study can be exported from its storage alone, without the document it was made from.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from spectune.config import Constraint, Objective, combo_label

__all__ = [
    "Candidate",
    "Combo",
    "Constraint",
    "OFF",
    "POLICY_LABELS",
    "Point",
    "REFINE_FACTOR",
    "StudySpace",
    "bucket_ranges",
]

OFF = "off"  # how a K = 0 point reads where a combo label would (keys, tables, trials.csv)
# A refinement simulates this many times the requests of the level below: the acceptance noise of a
# comparison (drafts per simulation) halves with each level.
REFINE_FACTOR = 4
# How the recommendation and the report name each policy.
POLICY_LABELS = {
    "static": "static K",
    "k_table": "the K table",
    "adaptive_verification": "adaptive verification",
    "adaptive_verification_table": "adaptive verification over a K table",
    "sglang_adaptive": "SGLang adaptive steps",
}


@dataclass(frozen=True)
class Candidate:
    """A drafting method the user has: a name and its speculative-config base (method, model, ...).

    ``speculative_base`` holds vLLM field names only and never K, the rule or the draft sampling.
    """

    name: str
    speculative_base: Mapping[str, Any]

    @property
    def method(self) -> str:
        return str(self.speculative_base["method"])


@dataclass(frozen=True)
class Combo:
    """What a server serves with one config: a candidate with one verification rule, one draft sampling
    and one runtime ('none', 'vllm_adaptive' or 'sglang_adaptive')."""

    candidate: str
    rejection_sample_method: str
    draft_sample_method: str
    runtime: str = "none"

    @property
    def label(self) -> str:
        """'candidate/rule/sampling[/runtime]': the combo's name in trial params and tables (no runtime
        part for 'none', so that studies made before runtimes keep their labels)."""
        return combo_label(self.candidate, self.rejection_sample_method, self.draft_sample_method, self.runtime)


@functools.total_ordering
@dataclass(frozen=True)
class Point:
    """One simulation: ``combo`` at K, at one bucket's batch size; ``combo`` is None exactly when K = 0.

    ``refinement`` r > 0 is the same configuration simulated again with ``REFINE_FACTOR ** r`` times
    the bucket's requests (adaptive precision): a separate simulation with its own result.
    ``confidence_auc``, set only on a point of adaptive verification, simulates it with that ranking
    quality of the acceptance estimate in place of the one its acceptance gives (``_sensitivity``): a
    separate simulation too, outside the space the search walks. Points sort by (batch size, label, K,
    refinement, confidence_auc).
    """

    batch_size: int
    combo: Combo | None
    num_speculative_tokens: int
    refinement: int = 0
    confidence_auc: float | None = None

    def __post_init__(self) -> None:
        if self.combo is not None and not isinstance(self.combo, Combo):
            raise TypeError(f"Point.combo must be a Combo or None (K = 0), got {self.combo!r}")
        if (self.combo is None) != (self.num_speculative_tokens == 0):
            raise ValueError(
                f"a point has no combo exactly when K = 0, got combo {self.combo} at K = {self.num_speculative_tokens}"
            )
        if self.confidence_auc is not None:
            if self.combo is None or self.combo.runtime != "vllm_adaptive":
                raise ValueError(
                    f"confidence_auc changes only adaptive verification's points, got it on {self.label} at K = "
                    f"{self.num_speculative_tokens}"
                )
            if not 0.5 <= self.confidence_auc <= 1.0:
                raise ValueError(f"confidence_auc must be in [0.5, 1], got {self.confidence_auc}")

    @classmethod
    def off(cls, batch_size: int, refinement: int = 0) -> Point:
        """A bucket's K = 0 point: speculation off, the same for every combo."""
        return cls(batch_size, None, 0, refinement)

    @property
    def label(self) -> str:
        """The combo's label, or 'off'."""
        return OFF if self.combo is None else self.combo.label

    @property
    def key(self) -> str:
        """The canonical identity used to spot duplicates across trials and workers."""
        key = f"bs={self.batch_size}|{self.label}|K={self.num_speculative_tokens}"
        if self.refinement:
            key += f"|requests x{self.requests_factor}"
        # Unset, it leaves every key as it was before the field existed.
        return f"{key}|confidence_auc={self.confidence_auc:g}" if self.confidence_auc is not None else key

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Point):
            return NotImplemented
        return self._order() < other._order()

    def _order(self) -> tuple[int, str, int, int, float]:
        auc = -1.0 if self.confidence_auc is None else self.confidence_auc
        return (self.batch_size, self.label, self.num_speculative_tokens, self.refinement, auc)

    @property
    def is_off(self) -> bool:
        return self.combo is None

    @property
    def requests_factor(self) -> int:
        """How many times the bucket's requests this simulation runs."""
        return REFINE_FACTOR**self.refinement

    @property
    def base(self) -> Point:
        """The same configuration at the bucket's own number of requests."""
        return replace(self, refinement=0) if self.refinement else self

    def refined(self, refinement: int) -> Point:
        return self if refinement == self.refinement else replace(self, refinement=refinement)


@dataclass(frozen=True)
class StudySpace:
    """Everything the search and the recommendation need to know about a study."""

    name: str
    candidates: tuple[Candidate, ...]
    combos: tuple[Combo, ...]
    batch_sizes: tuple[int, ...]
    min_num_speculative_tokens: int
    max_num_speculative_tokens: int
    max_batch_size: int
    batch_size_weights: tuple[float, ...] = ()
    objectives: tuple[Objective, ...] = ("throughput",)
    constraints: tuple[Constraint, ...] = ()
    policies: tuple[str, ...] = ("k_table",)
    skipped_combos: tuple[str, ...] = field(default=(), compare=False)
    # What the provenance marks and the measurement plan read from the document (``_provenance.study_context``).
    context: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        problems = []
        if not self.combos:
            problems.append("at least one valid (method, rule, sampling) combo is needed")
        if list(self.batch_sizes) != sorted(set(self.batch_sizes)) or not self.batch_sizes or self.batch_sizes[0] < 1:
            problems.append(f"batch_sizes must be distinct, sorted and >= 1, got {list(self.batch_sizes)}")
        if not 1 <= self.min_num_speculative_tokens <= self.max_num_speculative_tokens:
            problems.append(
                f"need 1 <= min K <= max K, got {self.min_num_speculative_tokens}..{self.max_num_speculative_tokens}"
            )
        if self.batch_sizes and self.max_batch_size < self.batch_sizes[-1]:
            problems.append(
                f"max_batch_size must be >= the largest batch size {self.batch_sizes[-1]}, got {self.max_batch_size}"
            )
        if self.batch_size_weights and len(self.batch_size_weights) != len(self.batch_sizes):
            problems.append("batch_size_weights must have one weight per batch size")
        labels = [c.label for c in self.combos]
        if len(set(labels)) != len(labels):
            problems.append(f"combo labels must be distinct, got {labels}")
        if problems:
            raise ValueError("; ".join(problems))

    # --- the points --------------------------------------------------------------------------

    @property
    def k_values(self) -> tuple[int, ...]:
        """Every K a curve has, K = 0 included, ascending."""
        return (0, *range(self.min_num_speculative_tokens, self.max_num_speculative_tokens + 1))

    @property
    def middle_k(self) -> int:
        """The middle of the K range searched (the upper one of two): where a search with nothing to go on starts."""
        return (self.min_num_speculative_tokens + self.max_num_speculative_tokens + 1) // 2

    @property
    def weights(self) -> tuple[float, ...]:
        """Share of serving time at each bucket (normalised; equal when not given)."""
        raw = self.batch_size_weights or tuple(1.0 for _ in self.batch_sizes)
        total = sum(raw)
        return tuple(w / total for w in raw)

    def point(self, batch_size: int, label: str, num_speculative_tokens: int) -> Point:
        """The point of the combo labelled ``label`` at K; every K = 0 point of a bucket is the same
        'off' point, whatever the label."""
        if num_speculative_tokens == 0:
            return Point.off(batch_size)
        return Point(batch_size, self.combo(label), num_speculative_tokens)

    def points(self) -> Iterator[Point]:
        """All distinct points: per bucket, the K = 0 point then every combo at every K >= 1."""
        for batch_size in self.batch_sizes:
            yield Point.off(batch_size)
            for combo in self.combos:
                for k in self.k_values[1:]:
                    yield Point(batch_size, combo, k)

    @property
    def size(self) -> int:
        return len(self.batch_sizes) * (1 + len(self.combos) * (len(self.k_values) - 1))

    def combo(self, label: str) -> Combo:
        for combo in self.combos:
            if combo.label == label:
                return combo
        raise KeyError(f"no combo {label!r} in study {self.name!r}")

    def runtime_combos(self, runtime: str) -> tuple[Combo, ...]:
        """The combos simulated with ``runtime``, in document order."""
        return tuple(c for c in self.combos if c.runtime == runtime)

    def candidate(self, name: str) -> Candidate:
        for candidate in self.candidates:
            if candidate.name == name:
                return candidate
        raise KeyError(f"no candidate {name!r} in study {self.name!r}")

    def representative_bucket(self) -> int:
        """Index of the most common bucket (largest weight); with equal weights, the lower median."""
        weights = self.weights
        top = max(weights)
        tied = [i for i, w in enumerate(weights) if w >= top - 1e-12]
        return tied[(len(tied) - 1) // 2]

    # --- persistence -------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["candidates"] = [{"name": c.name, "speculative_base": dict(c.speculative_base)} for c in self.candidates]
        data["constraints"] = [c.model_dump(mode="json") for c in self.constraints]
        data["context"] = dict(self.context)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StudySpace:
        return cls(
            name=data["name"],
            candidates=tuple(Candidate(c["name"], dict(c["speculative_base"])) for c in data["candidates"]),
            combos=tuple(Combo(**c) for c in data["combos"]),
            batch_sizes=tuple(data["batch_sizes"]),
            min_num_speculative_tokens=data["min_num_speculative_tokens"],
            max_num_speculative_tokens=data["max_num_speculative_tokens"],
            max_batch_size=data["max_batch_size"],
            batch_size_weights=tuple(data.get("batch_size_weights") or ()),
            objectives=tuple(data.get("objectives") or ("throughput",)),
            constraints=tuple(Constraint.model_validate(c) for c in data.get("constraints") or ()),
            policies=tuple(data.get("policies") or ("k_table",)),  # a study made before policies: its table
            skipped_combos=tuple(data.get("skipped_combos") or ()),
            context=dict(data.get("context") or {}),
        )


def bucket_ranges(batch_sizes: Sequence[int], max_batch_size: int) -> list[tuple[int, int]]:
    """Inclusive batch-size range each bucket stands for: contiguous from 1 to ``max_batch_size``.

    A boundary sits at the geometric midpoint of neighbouring buckets (step cost and acceptance
    change with log batch size, not linearly), so 8 and 32 split at 16.
    """
    ranges = []
    start = 1
    for i, batch_size in enumerate(batch_sizes):
        if i + 1 < len(batch_sizes):
            end = max(batch_size, min(batch_sizes[i + 1] - 1, math.floor(math.sqrt(batch_size * batch_sizes[i + 1]))))
        else:
            end = max_batch_size
        ranges.append((start, end))
        start = end + 1
    return ranges

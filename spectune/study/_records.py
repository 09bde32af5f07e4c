"""What a study knows, read back from its storage: evaluations, claims, failures.

Everything a worker decides comes from here -- nothing is cached outside the storage -- so a resumed
study, or a second worker on another machine, sees exactly what the first one knew. A trial
claims its point through its params (written to the storage the moment the sampler picks them)
and carries user attributes: its owner (host, pid) and the simulation result.
"""

from __future__ import annotations

import math
import os
import socket
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from spectune.config import StudyMetrics, or_nan
from spectune.errors import SpectuneError
from spectune.study._space import Point, StudySpace

__all__ = [
    "ATTR_CONFIDENCE_AUC",
    "ATTR_DUPLICATE_OF",
    "ATTR_INTERRUPTED",
    "ATTR_OWNER",
    "ATTR_REFINEMENT",
    "ATTR_RESULT",
    "ATTR_SINGLE_K",
    "Evaluation",
    "SearchState",
    "comparison_noise",
    "measured_step_noise",
    "evaluate_metrics",
    "as_metrics",
    "is_abandoned",
    "owner_attr",
    "point_attrs",
    "trial_metrics",
    "trial_point",
    "with_point_attrs",
]

ATTR_OWNER = "spectune.owner"
ATTR_RESULT = "spectune.result"  # the trial's StudyMetrics.to_attr()
ATTR_DUPLICATE_OF = "spectune.duplicate_of"
ATTR_REFINEMENT = "spectune.refinement"  # a point's refinement level (absent: 0), written before its params
ATTR_CONFIDENCE_AUC = "spectune.confidence_auc"  # a point's confidence_auc override (absent: none), likewise
# On a trial whose point only a single-K policy asked for (``structured_single_k_points``): its work does
# not widen the refinement budget. Absent on trials of studies made before it: their points count.
ATTR_SINGLE_K = "spectune.single_k"
# On a trial failed because its run was stopped (Ctrl-C), not by its point: it counts as no failure of
# the point, else three interruptions of one round would give its points up and the search, resumed,
# would silently go on without them.
ATTR_INTERRUPTED = "spectune.interrupted"
PARAM_BATCH_SIZE = "batch_size"
PARAM_COMBO = "combo"
PARAM_K = "num_speculative_tokens"

# spectune's storages create every trial with its owner (``_backends``); a trial without one was made
# elsewhere (an older spectune wrote the owner just after creating the trial). Such a trial this long
# after it started is taken as dead; after this its point is free again.
UNOWNED_GRACE = timedelta(seconds=15)
# A point whose simulation failed this often is given up (a deterministic failure would loop forever).
MAX_FAILURES_PER_POINT = 3


def _process_start(pid: int) -> str | None:
    """The kernel's start time of a process (Linux), to tell a pid from a later process reusing it."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]  # a zombie is dead; field 22 of stat is starttime


def owner_attr() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "started": _process_start(os.getpid())}


def _owner_alive(owner: Mapping[str, Any]) -> bool:
    pid = int(owner.get("pid", -1))
    if os.path.isdir("/proc/self"):
        started = _process_start(pid)
        return started is not None and (owner.get("started") is None or started == owner["started"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_abandoned(trial: FrozenTrial, now: datetime | None = None) -> bool:
    """A RUNNING trial whose process is gone: owned by a dead pid on this host, or never owned."""
    if trial.state != TrialState.RUNNING:
        return False
    owner = trial.user_attrs.get(ATTR_OWNER)
    if isinstance(owner, dict):
        return owner.get("host") == socket.gethostname() and not _owner_alive(owner)
    started = trial.datetime_start
    now = now or datetime.now()
    return started is not None and now - started > UNOWNED_GRACE


def trial_point(space: StudySpace, trial: FrozenTrial) -> Point | None:
    """The point a trial holds: its params, written as the sampler picks them (None until all three are)."""
    params = trial.params
    if not all(name in params for name in (PARAM_BATCH_SIZE, PARAM_COMBO, PARAM_K)):
        return None
    try:
        point = space.point(int(params[PARAM_BATCH_SIZE]), str(params[PARAM_COMBO]), int(params[PARAM_K]))
    except KeyError:
        raise SpectuneError(
            f"study {space.name!r}, trial {trial.number}: combo {params[PARAM_COMBO]!r} is not one of the study's "
            f"({', '.join(c.label for c in space.combos)}); the storage holds a trial this study did not make"
        ) from None
    return with_point_attrs(point, trial.user_attrs)


def point_attrs(point: Point) -> dict[str, Any]:
    """What a trial's params do not say of its point, as the user attributes that carry it (none for a
    plain point: trials of studies that never set them read the same)."""
    attrs: dict[str, Any] = {}
    if point.refinement:
        attrs[ATTR_REFINEMENT] = point.refinement
    if point.confidence_auc is not None:
        attrs[ATTR_CONFIDENCE_AUC] = point.confidence_auc
    return attrs


def with_point_attrs(point: Point, attrs: Mapping[str, Any]) -> Point:
    """The point of a trial's params completed by its user attributes (``point_attrs``)."""
    point = point.refined(int(attrs.get(ATTR_REFINEMENT, 0)))
    auc = attrs.get(ATTR_CONFIDENCE_AUC)
    return point if auc is None else replace(point, confidence_auc=float(auc))


def as_metrics(metrics: StudyMetrics | Mapping[str, Any]) -> StudyMetrics:
    """An evaluator's result as the study's record: a ``StudyMetrics``, or a mapping of its field names
    (``SimulationResult.to_dict()``, a stored result attribute, a test double's few metrics)."""
    return metrics if isinstance(metrics, StudyMetrics) else StudyMetrics.from_mapping(metrics)


def trial_metrics(trial: FrozenTrial) -> StudyMetrics | None:
    """The metrics a trial stored (None until it has)."""
    result = trial.user_attrs.get(ATTR_RESULT)
    return StudyMetrics.from_mapping(result) if isinstance(result, Mapping) else None


@dataclass(frozen=True)
class Evaluation:
    """One completed simulation, scored for the search.

    ``score`` ranks points: the throughput (tokens/s) when every SLO holds, else a negative number
    that grows with the (relative) violation, so any feasible point beats every infeasible one.
    ``stderr`` is the simulator's standard error of the throughput; ``noise`` the part of it that
    differs between points of one bucket, which is what a comparison between them has to beat (see
    ``comparison_noise``). ``zero_row_draft_ms`` is the drafter's pass added to each step when the
    K = 0 point stands for a 0 row of a combo's table (see ``_zero_row``).
    """

    point: Point
    trial_number: int
    metrics: StudyMetrics
    throughput: float
    stderr: float
    feasible: bool
    score: float
    noise: float
    zero_row_draft_ms: float = 0.0


def comparison_noise(metrics: StudyMetrics, throughput: float, stderr: float) -> float:
    """Standard error (tokens/s) of the part of a throughput that is not common to its bucket.

    Every point of a bucket simulates the same requests (same seed: same lengths, same arrivals), so
    the slow drift of the load over time -- most of the simulator's batch-means standard error --
    is shared and cancels when two points are compared. What is not shared is the randomness of
    acceptance: with unconditional per-position rates a_j (j = 1..K), the drafts accepted per step X
    have E[X] = sum a_j and E[X^2] = sum (2j - 1) a_j, and the throughput moves with the mean
    acceptance length L = 1 + E[X], so its standard error is throughput * sqrt(Var X / drafts) / L.
    Plain decoding (no drafts) has none. Never more than the simulator's own ``stderr``; without the
    counters (another evaluator), the ``stderr`` itself.
    """
    drafts = metrics.num_drafts
    if drafts is None:
        return stderr
    if drafts <= 0:
        return 0.0
    rates = metrics.acceptance_per_position
    length = or_nan(metrics.mean_acceptance_length)
    if not rates or not length > 0:
        return stderr
    mean = sum(rates)
    second = sum((2 * j + 1) * r for j, r in enumerate(rates))
    variance = max(second - mean * mean, 0.0)
    return min(stderr, throughput * math.sqrt(variance / drafts) / length)


def evaluate_metrics(
    space: StudySpace, point: Point, metrics: StudyMetrics | Mapping[str, Any], trial_number: int
) -> Evaluation:
    metrics = as_metrics(metrics)
    throughput = or_nan(metrics.throughput_tokens_per_s)
    stderr = or_nan(metrics.throughput_stderr_tokens_per_s)
    stderr = stderr if math.isfinite(stderr) else 0.0
    violation = 0.0
    for constraint in space.constraints:
        excess = constraint.violation(metrics.value(constraint.metric))
        if excess > 0:
            violation += excess / max(abs(constraint.bound), 1e-9)
    feasible = violation == 0.0 and math.isfinite(throughput)
    score = throughput if feasible else -1.0 - min(violation, 1e12)
    noise = comparison_noise(metrics, throughput, stderr) if math.isfinite(throughput) else stderr
    if math.isfinite(throughput):
        noise = math.hypot(noise, measured_step_noise(space, point, throughput))
    return Evaluation(point, trial_number, metrics, throughput, stderr, feasible, score, noise)


_MAD_TO_SIGMA = 1.4826  # the standard deviation a MAD estimates, for normal noise


def measured_step_noise(space: StudySpace, point: Point, throughput: float) -> float:
    """Standard error (tokens/s) a measured step-time table adds: its repeats' spread at the point's K.

    ``space.context["step_time_spread"]`` holds [batch size, K, MAD / median] per row of a table that
    ``spectune calibrate`` pooled from repeats. Throughput is inversely proportional to the step time,
    so the relative spread carries over; the nearest measured batch size of the point's K is used, or,
    for a K the table interpolates, the largest spread of the table. Without such a table: 0."""
    rows = space.context.get("step_time_spread")
    if not rows:
        return 0.0
    same_k = [(batch, spread) for batch, k, spread in rows if k == point.num_speculative_tokens]
    if same_k:
        _, spread = min(same_k, key=lambda row: abs(math.log(row[0] / point.batch_size)))
    else:
        spread = max(spread for _, _, spread in rows)
    return abs(throughput) * _MAD_TO_SIGMA * spread


# A completed trial never changes: its point and evaluation, read once a process (every decision of a
# round's trials reads every trial of the study). Storages hand out the same object for a finished
# trial each time, so the entry is kept by that object (held: no other can take its id) and the space.
_COMPLETED_CACHE_SIZE = 100_000
_completed_cache: dict[int, tuple[FrozenTrial, StudySpace, Point | None, Evaluation | None]] = {}


def _completed(space: StudySpace, trial: FrozenTrial) -> tuple[Point | None, Evaluation | None]:
    """A completed trial's point and evaluation (None without a point or metrics)."""
    cached = _completed_cache.get(id(trial))
    if cached is not None and cached[0] is trial and cached[1] is space:
        return cached[2], cached[3]
    point = trial_point(space, trial)
    metrics = trial_metrics(trial) if point is not None else None
    evaluation = None
    if point is not None and metrics is not None:
        evaluation = evaluate_metrics(space, point, metrics, trial.number)
    if len(_completed_cache) >= _COMPLETED_CACHE_SIZE:
        _completed_cache.clear()
    _completed_cache[id(trial)] = (trial, space, point, evaluation)
    return point, evaluation


@dataclass
class SearchState:
    """Per point: its evaluation (first completed trial), whether a live trial holds it, its failures; and
    the evaluated points that only a single-K policy asked for (``ATTR_SINGLE_K``)."""

    space: StudySpace
    completed: dict[Point, Evaluation] = field(default_factory=dict)
    single_k: set[Point] = field(default_factory=set)
    claimed: set[Point] = field(default_factory=set)
    failures: Counter[Point] = field(default_factory=Counter)
    num_complete_trials: int = 0
    num_live_trials: int = 0

    @classmethod
    def from_trials(
        cls, space: StudySpace, trials: Iterable[FrozenTrial], *, exclude_number: int | None = None
    ) -> SearchState:
        state = cls(space)
        now = datetime.now()
        for trial in sorted(trials, key=lambda t: t.number):
            if trial.number == exclude_number:
                continue
            if trial.state == TrialState.COMPLETE:
                state.num_complete_trials += 1
                point, evaluation = _completed(space, trial)
                if point is not None and evaluation is not None and point not in state.completed:
                    state.completed[point] = evaluation
                    if trial.user_attrs.get(ATTR_SINGLE_K):
                        state.single_k.add(point)
                continue
            point = trial_point(space, trial)
            if trial.state == TrialState.WAITING or (
                trial.state == TrialState.RUNNING and not is_abandoned(trial, now)
            ):
                state.num_live_trials += 1
                if point is not None:
                    state.claimed.add(point)
            elif (
                trial.state in (TrialState.FAIL, TrialState.RUNNING)
                and point is not None
                and not trial.user_attrs.get(ATTR_INTERRUPTED)
            ):
                state.failures[point] += 1
        state.claimed -= state.completed.keys()
        return state

    def is_free(self, point: Point) -> bool:
        """Not evaluated, not held by a live trial, not given up after repeated failures."""
        return point not in self.completed and point not in self.claimed and not self.is_given_up(point)

    def is_settled(self, point: Point) -> bool:
        """Evaluated or given up: its value (if any) will not change."""
        return point in self.completed or self.is_given_up(point)

    def is_given_up(self, point: Point) -> bool:
        """Failed too often to be proposed again."""
        return self.failures[point] >= MAX_FAILURES_PER_POINT

    def given_up(self) -> frozenset[Point]:
        """Every point failed too often to be proposed again."""
        return frozenset(p for p in self.failures if self.is_given_up(p))

    def free_points(self) -> list[Point]:
        return [p for p in self.space.points() if self.is_free(p)]

"""What a study evaluates, and what one asked trial needs before it is evaluated.

The ``Evaluator`` is the study's one extension point: it turns points into metrics. Before a trial's
point is evaluated the trial is *settled* against the study (``settle_trial``): the budget is the
number of COMPLETE trials the study should end with; workers check it before they ask for trials,
and two that ask at the same moment are sorted out here, in trial-number order: a trial that finds
the budget already filled by the trials numbered below it is pruned without simulating. So N
workers on a budget of B end with exactly B complete trials.

A point already evaluated is answered from storage; one that a live earlier trial holds (TPE proposes
repeats, and with many workers the first may still be running) waits for that trial's result. Either
way each point is simulated once.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from spectune.config import OBJECTIVE_METRICS, StudyMetrics
from spectune.study._polling import HOLDER_POLL_S
from spectune.study._records import (
    ATTR_DUPLICATE_OF,
    ATTR_RESULT,
    PARAM_BATCH_SIZE,
    PARAM_COMBO,
    PARAM_K,
    Evaluation,
    SearchState,
    is_abandoned,
    with_point_attrs,
)
from spectune.study._sampler import ATTR_NO_POINT_LEFT, wait_for_earlier_trials
from spectune.study._space import Point, StudySpace

__all__ = [
    "ATTR_SURPLUS",
    "Evaluator",
    "Metrics",
    "NO_POINT_LEFT",
    "Settled",
    "objective_values",
    "record_result",
    "settle_trial",
    "suggest_point",
]

Metrics = StudyMetrics | Mapping[str, Any]  # a mapping is read through ``StudyMetrics.from_mapping``
ATTR_SURPLUS = "spectune.surplus"
NO_POINT_LEFT = "every point of the space is evaluated or held by a running trial"
_CONSTRAINT_CAP = 1e12  # Optuna wants finite constraint values; a missing metric violates "infinitely"


class Evaluator(abc.ABC):
    """Turns a study's points into metrics. ``run_study`` gives each worker its own copy (so an
    evaluator must be picklable when ``workers > 1``) and, for every batch of trials the worker asks,
    calls ``evaluate_many(points)`` once with the points that need a simulation (never one already
    evaluated), so that a simulator can run them side by side. That is the whole interface.
    """

    @abc.abstractmethod
    def evaluate_many(self, points: Sequence[Point]) -> Sequence[Metrics]:
        """The metrics of each of ``points``, in their order."""


def suggest_point(space: StudySpace, trial: optuna.Trial) -> Point:
    """Ask the trial for its three params (the same distributions as ``search_space``)."""
    batch_size = trial.suggest_categorical(PARAM_BATCH_SIZE, list(space.batch_sizes))
    combo = trial.suggest_categorical(PARAM_COMBO, [c.label for c in space.combos])
    if space.min_num_speculative_tokens == 1:
        k = trial.suggest_int(PARAM_K, 0, space.max_num_speculative_tokens)
    else:
        k = trial.suggest_categorical(PARAM_K, list(space.k_values))
    return space.point(int(batch_size), str(combo), int(k))


def objective_values(space: StudySpace, metrics: StudyMetrics) -> list[float]:
    """Each objective's metric: throughput (tokens/s, maximised), then p99 TPOT (ms, minimised) when asked."""
    return [metrics.value(OBJECTIVE_METRICS[objective]) for objective in space.objectives]


@dataclass(frozen=True)
class Settled:
    """What an asked trial needs: ``pruned`` (why it ends without a result), else its ``point`` and
    ``known`` (the earlier evaluation that answers it; None: simulate the point)."""

    point: Point
    known: Evaluation | None = None
    pruned: str | None = None


def settle_trial(
    space: StudySpace, trial: optuna.Trial, *, budget: int | None, held: Mapping[Point, int] | None = None
) -> Settled:
    """Pick the trial's point (the sampler decides here) and settle it against the trials numbered below it.

    ``held``: points the caller's own earlier trials hold, unevaluated yet (a batch being asked); a
    trial that meets one of them is answered with that trial's result, not waited on."""
    storage = trial.study._storage
    point = suggest_point(space, trial)
    attrs = storage.get_trial_user_attrs(trial._trial_id)
    point = with_point_attrs(point, attrs)
    if attrs.get(ATTR_NO_POINT_LEFT):
        return Settled(point, pruned=NO_POINT_LEFT)
    earlier = wait_for_earlier_trials(trial.study, trial.number)
    if budget is not None and _filled(earlier) >= budget:
        trial.set_user_attr(ATTR_SURPLUS, True)
        return Settled(point, pruned=f"the budget of {budget} complete trials is already taken")
    if held and point in held:
        return Settled(point)  # evaluated once, in the same call as the trial that holds it
    state = SearchState.from_trials(space, earlier)
    known = state.completed.get(point)
    if known is None and point in state.claimed:
        known = _await_holder(trial.study, space, point, trial.number)
    return Settled(point, known)


def record_result(
    space: StudySpace, trial: optuna.Trial, metrics: StudyMetrics, duplicate_of: int | None
) -> list[float]:
    """Write the trial's result and constraints into storage; return its objective values (for ``tell``)."""
    if duplicate_of is not None:
        trial.set_user_attr(ATTR_DUPLICATE_OF, duplicate_of)
    trial.set_user_attr(ATTR_RESULT, metrics.to_attr())
    for constraint in space.constraints:
        violation = constraint.violation(metrics.value(constraint.metric))
        trial.set_constraint(constraint.label, min(violation, _CONSTRAINT_CAP))
    return objective_values(space, metrics)


def _await_holder(study: optuna.Study, space: StudySpace, point: Point, number: int) -> Evaluation | None:
    """An earlier live trial holds ``point`` (TPE proposed it again): wait for its result rather than
    simulate the point twice; None when that trial failed or died instead (then this one simulates)."""
    while True:
        time.sleep(HOLDER_POLL_S)
        earlier = [t for t in study.get_trials(deepcopy=False) if t.number < number]
        state = SearchState.from_trials(space, earlier)
        if point in state.completed:
            return state.completed[point]
        if point not in state.claimed:
            return None


def _filled(earlier: list[optuna.trial.FrozenTrial]) -> int:
    """Trials that count against the budget: complete, or running and alive (they will complete)."""
    return sum(
        1 for t in earlier if t.state == TrialState.COMPLETE or (t.state == TrialState.RUNNING and not is_abandoned(t))
    )

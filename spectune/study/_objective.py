"""One trial: take the sampler's point, check the budget, simulate (or reuse), record the result.

The budget is the number of COMPLETE trials the study should end with. Workers check it before they
ask for a trial; two that ask at the same moment are sorted out here, in trial-number order: a trial
that finds the budget already filled by the trials numbered below it is pruned without simulating.
So N workers on a budget of B end with exactly B complete trials.

A point already evaluated is answered from storage; one that a live earlier trial holds (TPE proposes
repeats, and with many workers the first may still be running) waits for that trial's result. Either
way each point is simulated once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import optuna
from optuna.trial import TrialState

from spectune.config import OBJECTIVE_METRICS, StudyMetrics
from spectune.study._records import (
    ATTR_DUPLICATE_OF,
    ATTR_REFINEMENT,
    ATTR_RESULT,
    PARAM_BATCH_SIZE,
    PARAM_COMBO,
    PARAM_K,
    Evaluation,
    SearchState,
    as_metrics,
    is_abandoned,
)
from spectune.study._sampler import ATTR_NO_POINT_LEFT, wait_for_earlier_trials
from spectune.study._space import Point, StudySpace

__all__ = ["ATTR_SURPLUS", "Evaluator", "StudyObjective", "objective_values", "suggest_point"]

Evaluator = Callable[[Point], StudyMetrics | Mapping[str, Any]]
"""Simulates one point; returns its ``StudyMetrics`` (or a mapping of their names, read through it)."""

ATTR_SURPLUS = "spectune.surplus"
_HOLDER_POLL_S = 0.1
_CONSTRAINT_CAP = 1e12  # Optuna wants finite constraint values; a missing metric violates "infinitely"


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


class StudyObjective:
    """The objective every worker runs; ``budget`` None means no limit (the strategy decides when to stop)."""

    def __init__(self, space: StudySpace, evaluator: Evaluator, *, budget: int | None) -> None:
        self.space = space
        self.evaluator = evaluator
        self.budget = budget

    def with_evaluator(self, evaluator: Evaluator) -> StudyObjective:
        """The same objective with another evaluator (a batch collector)."""
        return StudyObjective(self.space, evaluator, budget=self.budget)

    def __call__(self, trial: optuna.Trial) -> list[float]:
        storage = trial.study._storage
        point = suggest_point(self.space, trial)
        attrs = storage.get_trial_user_attrs(trial._trial_id)
        point = point.refined(int(attrs.get(ATTR_REFINEMENT, 0)))
        if attrs.get(ATTR_NO_POINT_LEFT):
            raise optuna.TrialPruned("every point of the space is evaluated or held by a running trial")
        earlier = wait_for_earlier_trials(trial.study, trial.number)
        if self.budget is not None and _filled(earlier) >= self.budget:
            trial.set_user_attr(ATTR_SURPLUS, True)
            raise optuna.TrialPruned(f"the budget of {self.budget} complete trials is already taken")
        state = SearchState.from_trials(self.space, earlier)
        known = state.completed.get(point)
        if known is None and point in state.claimed:
            known = _await_holder(trial.study, self.space, point, trial.number)
        if known is not None:
            trial.set_user_attr(ATTR_DUPLICATE_OF, known.trial_number)
            metrics = known.metrics
        else:
            metrics = as_metrics(self.evaluator(point))
        trial.set_user_attr(ATTR_RESULT, metrics.to_attr())
        for constraint in self.space.constraints:
            violation = constraint.violation(metrics.value(constraint.metric))
            trial.set_constraint(constraint.label, min(violation, _CONSTRAINT_CAP))
        return objective_values(self.space, metrics)


def _await_holder(study: optuna.Study, space: StudySpace, point: Point, number: int) -> Evaluation | None:
    """An earlier live trial holds ``point`` (TPE proposed it again): wait for its result rather than
    simulate the point twice; None when that trial failed or died instead (then this one simulates)."""
    while True:
        time.sleep(_HOLDER_POLL_S)
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

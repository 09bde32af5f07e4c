"""The Optuna sampler of a study: the strategy that picks the next point, and the order that keeps
workers from picking the same one.

Call order (Optuna's): the storage creates the trial with its owner (host, pid) already recorded
(``_backends``), so that a trial of a dead process can be told from a live one (``before_trial``
stamps a trial that lacks one, made on another storage); at the first ``suggest_*`` of the objective,
``infer_relative_search_space`` then ``sample_relative`` pick all three params at once.

No two workers pick the same point because decisions are taken in trial-number order: trial n
waits until every live trial numbered below n holds its point (its params are in the storage; that
takes milliseconds, or as long as a starved process takes) and then picks a point none of them
holds. The wait has no time limit: it ends when each earlier trial holds its point, finishes, or
is found dead (its owner's process gone on this host; on a database, its heartbeat stale). Trial numbers are handed out
atomically by every Optuna storage, so this holds for local processes on a journal file and for
machines sharing a PostgreSQL database alike.

Strategies: ``structured`` (see ``_structured``), ``exhaustive`` (every point once, bucket by
bucket, then those of ``_sensitivity``), ``tpe`` (Optuna's seeded ``TPESampler`` over the same three
params; it may propose a point already evaluated, which the objective answers from storage instead of
simulating again).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, Literal

from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.exceptions import ExperimentalWarning
from optuna.samplers import BaseSampler, TPESampler
from optuna.storages import fail_stale_trials
from optuna.storages._heartbeat import is_heartbeat_enabled
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from spectune.study._polling import (
    STALE_CHECK_S,
    WAIT_FIRST_POLL_S,
    WAIT_JOURNAL_LONGEST_POLL_S,
    WAIT_LONGEST_POLL_S,
)
from spectune.study._records import (
    ATTR_OWNER,
    ATTR_SINGLE_K,
    PARAM_BATCH_SIZE,
    PARAM_COMBO,
    PARAM_K,
    SearchState,
    is_abandoned,
    owner_attr,
    point_attrs,
    trial_point,
)
from spectune.study._sensitivity import sensitivity_points
from spectune.study._space import Point, StudySpace
from spectune.study._storage import reads_are_cheap
from spectune.study._structured import REFINE_BUDGET, structured_next_point, structured_single_k_points

__all__ = [
    "ATTR_NO_POINT_LEFT",
    "SpectuneSampler",
    "Strategy",
    "exhaustive_points",
    "poll_intervals",
    "search_space",
    "wait_for_earlier_trials",
]

Strategy = Literal["structured", "exhaustive", "tpe"]
ATTR_NO_POINT_LEFT = "spectune.no_point_left"


def search_space(space: StudySpace) -> dict[str, BaseDistribution]:
    """The three params every trial has. K is an integer range when it is 0..max, else categorical."""
    if space.min_num_speculative_tokens == 1:
        k_distribution: BaseDistribution = IntDistribution(0, space.max_num_speculative_tokens)
    else:
        k_distribution = CategoricalDistribution(space.k_values)
    return {
        PARAM_BATCH_SIZE: CategoricalDistribution(space.batch_sizes),
        PARAM_COMBO: CategoricalDistribution([combo.label for combo in space.combos]),
        PARAM_K: k_distribution,
    }


def params_of(space: StudySpace, point: Point) -> dict[str, Any]:
    combo = point.combo or space.combos[0]  # K = 0: any combo is the same point
    return {PARAM_BATCH_SIZE: point.batch_size, PARAM_COMBO: combo.label, PARAM_K: point.num_speculative_tokens}


def poll_intervals(first: float = WAIT_FIRST_POLL_S, longest: float = WAIT_LONGEST_POLL_S) -> Iterator[float]:
    """Seconds to sleep between the polls of a wait: ``first``, doubling up to ``longest``."""
    delay = first
    while True:
        yield delay
        delay = min(2 * delay, longest)


def wait_for_earlier_trials(study: Study, number: int) -> list[FrozenTrial]:
    """Trials numbered below ``number``, once each live one holds its point.

    No deadline: giving up on a slow (starved) earlier trial let this one pick the point it was about
    to take. A dead one stops counting as live (``is_abandoned``; on a database, Optuna's stale
    heartbeat, checked here too since every worker may be waiting)."""
    delays = poll_intervals(longest=WAIT_JOURNAL_LONGEST_POLL_S if reads_are_cheap(study) else WAIT_LONGEST_POLL_S)
    heartbeat = is_heartbeat_enabled(study._storage)
    next_stale_check = time.monotonic()
    while True:
        earlier = [t for t in study.get_trials(deepcopy=False) if t.number < number]
        undecided = [
            t
            for t in earlier
            if t.state == TrialState.RUNNING
            and not is_abandoned(t)
            and not all(name in t.params for name in (PARAM_BATCH_SIZE, PARAM_COMBO, PARAM_K))
        ]
        if not undecided:
            return earlier
        if heartbeat and time.monotonic() >= next_stale_check:
            next_stale_check = time.monotonic() + STALE_CHECK_S
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ExperimentalWarning)
                fail_stale_trials(study)
        time.sleep(next(delays))


def exhaustive_points(state: SearchState) -> list[Point]:
    """The exhaustive search's free points: the space's, in order; once all of them are settled, the
    points that show how adaptive verification moves with a ``confidence_auc`` nothing measures (``_sensitivity``)."""
    free = state.free_points()
    if free or any(not state.is_settled(point) for point in state.space.points()):
        return free
    return [point for point in sensitivity_points(state.space, state.completed) if state.is_free(point)]


def exhaustive_next_point(state: SearchState) -> Point | None:
    return next(iter(exhaustive_points(state)), None)


class SpectuneSampler(BaseSampler):
    """Proposes one (batch size, combo, K) point per trial with the chosen strategy."""

    def __init__(
        self,
        space: StudySpace,
        strategy: Strategy,
        *,
        seed: int,
        keep_combos: int = 2,
        refine_budget: float = REFINE_BUDGET,
    ) -> None:
        self.space = space
        self.strategy = strategy
        self.keep_combos = keep_combos
        self.refine_budget = refine_budget
        self._tpe = TPESampler(seed=seed) if strategy == "tpe" else None

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        if ATTR_OWNER not in trial.user_attrs:  # spectune's storages record it at creation
            study._storage.set_trial_user_attr(trial._trial_id, ATTR_OWNER, owner_attr())
        if self._tpe is not None:
            self._tpe.before_trial(study, trial)

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        if self._tpe is not None:
            return self._tpe.infer_relative_search_space(study, trial)
        return search_space(self.space)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if self._tpe is not None:
            return self._tpe.sample_relative(study, trial, search_space)
        if not search_space:
            return {}
        earlier = wait_for_earlier_trials(study, trial.number)
        later_holders = [
            t for t in study.get_trials(deepcopy=False) if t.number > trial.number and trial_point(self.space, t)
        ]
        state = SearchState.from_trials(self.space, [*earlier, *later_holders])
        if self.strategy == "structured":
            search: dict[str, Any] = {"keep_combos": self.keep_combos, "refine_budget": self.refine_budget}
            point = structured_next_point(state, **search)
            if point is not None and point in structured_single_k_points(state, **search):
                study._storage.set_trial_user_attr(trial._trial_id, ATTR_SINGLE_K, True)
        else:
            point = exhaustive_next_point(state)
        if point is None:
            # Every point is evaluated or held: the objective sees this mark and stops without simulating.
            study._storage.set_trial_user_attr(trial._trial_id, ATTR_NO_POINT_LEFT, True)
            point = next(iter(self.space.points()))
        for name, value in point_attrs(point).items():  # before the params: whoever sees those sees these
            study._storage.set_trial_user_attr(trial._trial_id, name, value)
        return params_of(self.space, point)

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        if self._tpe is not None:
            return self._tpe.sample_independent(study, trial, param_name, param_distribution)
        raise RuntimeError(f"spectune's sampler samples {param_name!r} only together with the other params")

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None) -> None:
        if self._tpe is not None:
            self._tpe.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        if self._tpe is not None:
            self._tpe.reseed_rng()

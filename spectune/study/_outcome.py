"""A study read back from its storage: every trial, the best evaluation per point, the recommendation.

This is what ``spectune study show`` prints and ``spectune export`` renders; it needs only the
storage (the space travels in the study's user attributes), not the document.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from spectune.config import StudyMetrics
from spectune.errors import SpectuneError
from spectune.study._objective import ATTR_SURPLUS
from spectune.study._recommendation import Recommendation, recommend
from spectune.study._records import ATTR_DUPLICATE_OF, ATTR_OWNER, Evaluation, SearchState, trial_metrics, trial_point
from spectune.study._sampler import exhaustive_points
from spectune.study._space import Point, StudySpace
from spectune.study._storage import (
    ATTR_DOCUMENT_SHA256,
    ATTR_SEARCH,
    ATTR_SIMULATOR_VERSION,
    close_storage,
    describe_storage,
    open_storage,
    open_study,
    study_space,
)
from spectune.study._structured import structured_converged

__all__ = ["StudyOutcome", "TrialRecord", "load_outcome", "outcome_of"]


@dataclass(frozen=True)
class TrialRecord:
    """One trial as the report and trials.csv show it."""

    number: int
    state: str
    point: Point | None
    metrics: StudyMetrics | None
    duplicate_of: int | None
    surplus: bool
    worker: str | None
    started: datetime | None
    duration_s: float | None


@dataclass(frozen=True)
class StudyOutcome:
    """Everything known about a study: its space, its trials, per-point evaluations, the recommendation."""

    space: StudySpace
    storage_label: str
    trials: tuple[TrialRecord, ...]
    completed: dict[Point, Evaluation]
    recommendation: Recommendation | None
    document_sha256: str | None
    simulator_version: str | None
    search_unfinished: bool = False  # the search still needs points (a budget or a Ctrl-C stopped it)

    @property
    def unfinished_trials(self) -> int:
        """Trials the storage holds as RUNNING or WAITING: a run is in progress (or died mid-trial)."""
        return sum(1 for t in self.trials if t.state in ("RUNNING", "WAITING"))

    @property
    def partial_note(self) -> str | None:
        """Why the recommendation may still change, or None when every trial has ended and the search is done."""
        if self.unfinished_trials:
            return (
                f"PARTIAL: the study is unfinished ({self.unfinished_trials} trial(s) running or waiting in its "
                "storage); this recommendation may change when they end — export again after the run"
            )
        if self.search_unfinished:
            return (
                "PARTIAL: the study is unfinished (its search stopped before it had every point it needs: "
                "--n-trials ran out or the run was stopped); this recommendation may change — resume it with "
                "`spectune study run` (no --n-trials, or a larger one), then export again"
            )
        return None

    @property
    def num_evaluations(self) -> int:
        """Simulations actually run (complete trials that did not reuse an earlier result)."""
        return sum(1 for t in self.trials if t.state == "COMPLETE" and t.duplicate_of is None)


def _record(space: StudySpace, trial: FrozenTrial) -> TrialRecord:
    owner = trial.user_attrs.get(ATTR_OWNER)
    duration = trial.duration.total_seconds() if trial.duration is not None else None
    return TrialRecord(
        number=trial.number,
        state=trial.state.name,
        point=trial_point(space, trial),
        metrics=trial_metrics(trial),
        duplicate_of=trial.user_attrs.get(ATTR_DUPLICATE_OF),
        surplus=bool(trial.user_attrs.get(ATTR_SURPLUS)),
        worker=f"{owner.get('host')}:{owner.get('pid')}" if isinstance(owner, dict) else None,
        started=trial.datetime_start,
        duration_s=duration,
    )


def outcome_of(study: optuna.Study, *, storage_label: str) -> StudyOutcome:
    space = study_space(study)
    trials = study.get_trials(deepcopy=False)
    state = SearchState.from_trials(space, trials)
    return StudyOutcome(
        space=space,
        storage_label=storage_label,
        trials=tuple(_record(space, t) for t in sorted(trials, key=lambda t: t.number)),
        completed=state.completed,
        recommendation=recommend(space, state.completed),
        document_sha256=study.user_attrs.get(ATTR_DOCUMENT_SHA256),
        simulator_version=study.user_attrs.get(ATTR_SIMULATOR_VERSION),
        search_unfinished=_search_unfinished(study.user_attrs.get(ATTR_SEARCH), state),
    )


def _search_unfinished(settings: Any, state: SearchState) -> bool:
    """Whether the search would still ask for points; False where the study does not say how it searched
    (run before ``ATTR_SEARCH`` was recorded) and for TPE, whose budget is its only end."""
    if not isinstance(settings, dict):
        return False
    strategy, keep_combos, refine_budget = (settings.get(k) for k in ("strategy", "keep_combos", "refine_budget"))
    if strategy == "exhaustive":
        return bool(exhaustive_points(state))
    if strategy != "structured" or not isinstance(keep_combos, int) or not isinstance(refine_budget, int | float):
        return False
    return not structured_converged(state, keep_combos=keep_combos, refine_budget=float(refine_budget))


def load_outcome(storage: str, name: str) -> StudyOutcome:
    """Read a study (finished or not) from a journal file path or a database URL."""
    if "://" not in storage and not Path(storage).is_file():
        raise SpectuneError(f"--storage: no journal file at {storage} (run the study first, or pass --storage URL)")
    opened = open_storage(storage)
    try:
        return outcome_of(open_study(opened, name), storage_label=describe_storage(storage))
    finally:
        close_storage(opened)

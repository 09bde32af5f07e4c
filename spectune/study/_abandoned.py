"""Trials whose worker is gone, failed so that their points are proposed again.

A trial is gone when its owner's process has died on this host (``is_abandoned``), when its heartbeat
has lapsed on a database (Optuna's check), or when this very process had to leave it RUNNING (a
batch whose FAIL write was refused too: a full disk; ``disown_trials``).
"""

from __future__ import annotations

import warnings
from datetime import datetime

import optuna
from optuna.storages import fail_stale_trials
from optuna.storages._heartbeat import is_heartbeat_enabled
from optuna.trial import TrialState

from spectune.study._records import is_abandoned

__all__ = ["disown_trials", "fail_abandoned_trials"]

# Trials this process created and could not end (their FAIL refused too: a full disk), by study name,
# number and start (another storage may hold a study of that name). Their owner is alive -- this
# process -- so no other run would ever fail them; the next run here does.
_DISOWNED: set[tuple[str, int, datetime | None]] = set()


def disown_trials(study: optuna.Study, trial_ids: list[int]) -> None:
    """Leave the trials ``trial_ids``, RUNNING in storage, to the next ``fail_abandoned_trials``."""
    for trial_id in trial_ids:
        trial = study._storage.get_trial(trial_id)
        _DISOWNED.add((study.study_name, trial.number, trial.datetime_start))


def fail_abandoned_trials(study: optuna.Study) -> int:
    """Mark RUNNING trials of dead processes FAIL (their points are proposed again), and the ones this
    process disowned; on a database, Optuna's stale-heartbeat check too (which retries where asked:
    ``retry_failed_trials``), as ``optimize`` runs it before each trial. Return how many (not counting
    the stale ones)."""
    if is_heartbeat_enabled(study._storage):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            fail_stale_trials(study)
    failed = 0
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        key = (study.study_name, trial.number, trial.datetime_start)
        if is_abandoned(trial) or key in _DISOWNED:
            try:
                study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
            except RuntimeError:
                continue  # finished meanwhile
            _DISOWNED.discard(key)
            failed += 1
    return failed

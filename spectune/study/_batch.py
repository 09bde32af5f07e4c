"""One batch of trials, by Optuna's ask and tell: ask each trial in turn and settle its point, evaluate
every point that needs a simulation in one call (the simulator runs them side by side), tell each result.

The trials are asked one after another in one thread, so each picks its point after the one before
it holds its own (the no-duplicate order ``_sampler`` keeps between workers holds within a batch
too). A trial answered without a simulation (pruned, or a point already evaluated) is told at once.
On a database with heartbeats, the batch records its trials' heartbeats itself (Optuna's ``optimize``
does this around its objective; ask/tell leaves it to the caller), so a worker that dies mid-batch has
its trials failed by the others after the grace period, and retried.

A batch that cannot finish (the evaluator raised, a storage write was refused, Ctrl-C) ends every
trial it has not told FAIL and raises; where even that write is refused (a full disk), the trials
are left to ``disown_trials``, so that the next run in this process fails them, never waits on them.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import optuna
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.trial import TrialState

from spectune.study._abandoned import disown_trials
from spectune.study._objective import NO_POINT_LEFT, Evaluator, Settled, record_result, settle_trial
from spectune.study._records import ATTR_INTERRUPTED, as_metrics
from spectune.study._space import Point, StudySpace

__all__ = ["BatchRun", "run_batch"]


@dataclass(frozen=True)
class BatchRun:
    """What a batch did: the trials it completed, and whether any found no point left to take."""

    completed: int
    no_point_left: bool


def run_batch(
    study: optuna.Study, space: StudySpace, evaluator: Evaluator, size: int, *, budget: int | None
) -> BatchRun:
    """Ask ``size`` trials, evaluate their points in one ``evaluate_many`` call, tell their results.

    The caller fails dead workers' trials first (``fail_abandoned_trials``, stale heartbeats included)."""
    asked: list[tuple[optuna.Trial, Settled]] = []
    untold: dict[int, optuna.Trial] = {}
    completed = no_point = 0
    with _heartbeats(study) as beat:
        try:
            held: dict[Point, int] = {}  # point -> the first trial of the batch that simulates it
            for _ in range(size):
                trial = _ask(study)
                untold[trial.number] = trial
                beat(trial._trial_id)
                settled = settle_trial(space, trial, budget=budget, held=held)
                if settled.pruned is not None:
                    no_point += settled.pruned == NO_POINT_LEFT
                    _tell(study, trial, None, untold)
                elif settled.known is not None:
                    known = settled.known
                    _tell(study, trial, record_result(space, trial, known.metrics, known.trial_number), untold)
                    completed += 1
                else:
                    held.setdefault(settled.point, trial.number)
                    asked.append((trial, settled))
            points = list(held)
            metrics = list(evaluator.evaluate_many(points)) if points else []
            if len(metrics) != len(points):
                raise RuntimeError(f"the evaluator returned {len(metrics)} results for {len(points)} points")
            results = {point: as_metrics(m) for point, m in zip(points, metrics, strict=True)}
            for trial, settled in asked:
                holder = held[settled.point]
                duplicate_of = None if holder == trial.number else holder
                _tell(study, trial, record_result(space, trial, results[settled.point], duplicate_of), untold)
                completed += 1
        except BaseException as error:
            _fail_untold(study, list(untold.values()), interrupted=isinstance(error, KeyboardInterrupt))
            raise
    return BatchRun(completed, no_point_left=no_point > 0)


def _ask(study: optuna.Study) -> optuna.Trial:
    with warnings.catch_warnings():
        # Optuna warns that heartbeats are meant for ``optimize``: this batch records them itself.
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used", category=UserWarning)
        return study.ask()


def _tell(
    study: optuna.Study, trial: optuna.Trial, values: list[float] | None, untold: dict[int, optuna.Trial]
) -> None:
    """Tell a trial COMPLETE with ``values`` (None: PRUNED), logged as ``optimize`` logs it."""
    if values is None:
        study.tell(trial, state=TrialState.PRUNED)
    else:
        study.tell(trial, values)
        study._log_completed_trial(values, trial.number, trial.params)
    del untold[trial.number]


def _fail_untold(study: optuna.Study, trials: list[optuna.Trial], *, interrupted: bool) -> None:
    """End the trials a batch that cannot finish has not told, FAIL (``interrupted``: marked as stopped by
    Ctrl-C, no failure of their points); hand the ones whose write is refused too to ``disown_trials``
    (their owner, this process, is alive, so nothing else would fail them)."""
    refused = []
    for trial in trials:
        try:
            if interrupted:
                trial.set_user_attr(ATTR_INTERRUPTED, True)
            study.tell(trial, state=TrialState.FAIL)
        except Exception:  # noqa: BLE001 -- the batch's own error is the one raised
            refused.append(trial._trial_id)
    if refused:
        with contextlib.suppress(Exception):  # as above: the batch's own error is the one raised
            disown_trials(study, refused)


@contextlib.contextmanager
def _heartbeats(study: optuna.Study) -> Iterator[Callable[[int], None]]:
    """A function that starts recording a trial's heartbeat (at once, then every interval) until the
    block ends; it does nothing where the storage keeps no heartbeats (a journal)."""
    storage = study._storage
    interval = storage.get_heartbeat_interval() if isinstance(storage, BaseHeartbeat) else None
    if not isinstance(storage, BaseHeartbeat) or interval is None:
        yield lambda trial_id: None
        return
    trial_ids: list[int] = []
    lock, stop = threading.Lock(), threading.Event()

    def beat(trial_id: int) -> None:
        storage.record_heartbeat(trial_id)
        with lock:
            trial_ids.append(trial_id)

    def keep_beating() -> None:
        while not stop.wait(interval):
            with lock:
                ids = list(trial_ids)
            for trial_id in ids:
                with contextlib.suppress(Exception):  # a lapse the next beat makes up; the batch reports real errors
                    storage.record_heartbeat(trial_id)

    thread = threading.Thread(target=keep_beating, name="spectune-heartbeat", daemon=True)
    thread.start()
    try:
        yield beat
    finally:
        stop.set()
        thread.join()

"""Trials whose points are evaluated in one call: a batch that will never fill can be abandoned."""

import threading

import optuna
import pytest

from spectune.study import _runner
from spectune.study._batch import BatchCollector


def test_abandoning_a_batch_wakes_the_trials_waiting_for_it():
    evaluated = []
    collector = BatchCollector(3, lambda point: evaluated.append(point) or 1.0)
    outcomes = []

    def trial(point):
        try:
            outcomes.append(collector(point))
        except RuntimeError as err:
            outcomes.append(str(err))

    waiting = [threading.Thread(target=trial, args=(p,)) for p in ("a", "b")]  # the third never comes
    for thread in waiting:
        thread.start()
    collector.abandon()
    for thread in waiting:
        thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in waiting)
    assert evaluated == [] and len(outcomes) == 2 and all("interrupted" in o for o in outcomes)
    collector.leave()  # a late arrival evaluates nothing
    assert evaluated == []


class _Objective:
    """Each trial's point is its number; the batch evaluator returns 1.0 for each."""

    evaluator = staticmethod(lambda point: 1.0)

    def with_evaluator(self, collector):
        return lambda trial: collector(trial.number)


def test_a_ctrl_c_before_every_trial_of_a_batch_has_started_stops_the_batch(monkeypatch):
    """The Ctrl-C (KeyboardInterrupt in the calling thread) lands while the second of three trial threads
    starts: it reaches the caller, and the first trial, which waits for a batch that will never fill,
    fails instead of waiting for ever."""
    started: list[threading.Thread] = []

    class InterruptedOnTheSecondStart(threading.Thread):
        def start(self):
            if started:
                raise KeyboardInterrupt
            started.append(self)
            super().start()

    monkeypatch.setattr(_runner.threading, "Thread", InterruptedOnTheSecondStart)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study()
    with pytest.raises(KeyboardInterrupt):
        _runner._run_trials(study, _Objective(), 3, [])
    started[0].join(timeout=10)
    assert not started[0].is_alive()
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL]


def test_a_batch_of_trials_is_evaluated_in_one_call():
    calls = []

    class Evaluator:
        def __call__(self, point):
            raise AssertionError("the batch is evaluated in one call")

        def evaluate_many(self, points):
            calls.append(sorted(points))
            return [1.0] * len(points)

    objective = _Objective()
    objective.evaluator = Evaluator()
    study = optuna.create_study()
    _runner._run_trials(study, objective, 3, [])
    assert calls == [[0, 1, 2]] and [t.value for t in study.trials] == [1.0, 1.0, 1.0]


def test_a_users_error_in_a_batch_reaches_the_caller_as_it_is():
    """A simulation that refuses its input (a SpectuneError: a located message for the user) fails the
    batch's trials with that message, and the caller gets it as a SpectuneError, not as a bug."""
    from spectune.errors import SpectuneError

    def refuse(point):
        raise SpectuneError("workload.prompt_tokens: needs more KV cache than one replica holds")

    objective = _Objective()
    objective.evaluator = refuse
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study()
    with pytest.raises(SpectuneError, match="workload.prompt_tokens: needs more KV cache"):
        _runner._run_trials(study, objective, 3, [])
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL] * 3

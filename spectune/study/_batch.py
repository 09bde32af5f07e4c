"""Evaluating several trials' points in one call (the simulator runs them in lockstep).

A worker that has several points to evaluate runs that many trials at once, each in its own thread
(``study.optimize(n_trials=1)`` in each): each trial is asked, picks and holds its point and
is told its result as usual (so resume, heartbeats, budgets and the no-duplicate order between workers
are what they are for one trial), but the objective's evaluator is a ``BatchCollector``: a trial that
needs a simulation hands its point in and waits; once every trial of the batch has either handed a
point in or finished without one, the last to arrive evaluates all the points in one call and wakes
the others with their results.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from spectune.config import StudyMetrics
from spectune.errors import SpectuneError
from spectune.study._space import Point

__all__ = ["BatchCollector", "BatchEvaluator", "evaluate_batch"]

Metrics = StudyMetrics | Mapping[str, Any]  # what an evaluator returns (see ``_objective.Evaluator``)
BatchEvaluator = Callable[[Sequence[Point]], Sequence[Metrics]]


def evaluate_batch(evaluator: Callable[[Point], Metrics], points: Sequence[Point]) -> list[Metrics]:
    """``evaluator.evaluate_many(points)`` where the evaluator has it (one lockstep call), else one by one."""
    many = getattr(evaluator, "evaluate_many", None)
    if many is not None:
        return list(many(points))
    return [evaluator(point) for point in points]


class BatchCollector:
    """Collects the points of ``size`` concurrent trials and evaluates them together.

    Every trial thread must end with ``leave()`` (in a ``finally``); ``__call__(point)`` is the
    evaluator the objective calls, and blocks until the batch is evaluated.
    """

    def __init__(self, size: int, evaluator: Callable[[Point], Metrics]) -> None:
        self.size = size
        self.evaluator = evaluator
        self._lock = threading.Condition()
        self._arrived = 0
        self._points: list[Point] = []
        self._results: list[Metrics] | None = None
        self._error: BaseException | None = None
        self._local = threading.local()

    def __call__(self, point: Point) -> Metrics:
        with self._lock:
            index = len(self._points)
            self._points.append(point)
            self._local.submitted = True
            self._arrive()
            while self._results is None and self._error is None:
                self._lock.wait()
            if isinstance(self._error, SpectuneError):  # the user's to fix (a located message), not a bug
                raise SpectuneError(str(self._error)) from self._error
            if self._error is not None:
                raise RuntimeError(
                    f"evaluating a batch of {len(self._points)} points failed: {self._error}"
                ) from self._error
            assert self._results is not None  # the wait above ends on results or an error
            return self._results[index]

    def leave(self) -> None:
        """This trial's thread is done with the batch (whether or not it handed a point in)."""
        with self._lock:
            if getattr(self._local, "submitted", False):
                return
            self._arrive()

    def abandon(self) -> None:
        """The batch will not fill (the run is being interrupted): the trials waiting for it fail now."""
        with self._lock:
            if self._results is None and self._error is None:
                self._error = RuntimeError("the run was interrupted before the batch filled")
                self._lock.notify_all()

    def _arrive(self) -> None:
        """Count an arrival (lock held); the last one evaluates the batch."""
        self._arrived += 1
        if self._arrived < self.size or self._error is not None:
            return
        try:
            self._results = evaluate_batch(self.evaluator, self._points) if self._points else []
        except BaseException as err:  # noqa: BLE001 -- every waiting trial fails with it
            self._error = err
        self._lock.notify_all()

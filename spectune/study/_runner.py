"""Running a study: one or many worker processes on one storage, until the budget or the search ends.

A worker loops: read the study's state from storage, stop if the budget is filled or the strategy
has nothing left to do, else run a batch of trials (``_batch``: asked, evaluated in one call, told). ``workers=N`` starts N such processes on this machine;
on many machines, start ``spectune study run`` on each with the same ``--storage`` URL. Whatever
stops a run (Ctrl-C, SIGKILL, a crash), running it again resumes: trials left RUNNING by dead
processes are failed and their points proposed again; completed points are never simulated again.
"""

from __future__ import annotations

import functools
import math
import multiprocessing
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import optuna
from optuna.storages import BaseStorage
from optuna.trial import TrialState

from spectune._spawn import WorkerPool, start_workers, workers_error
from spectune.errors import SpectuneError
from spectune.study._abandoned import fail_abandoned_trials
from spectune.study._batch import run_batch
from spectune.study._objective import Evaluator
from spectune.study._polling import DECIDE_AGAIN_S, IDLE_JOURNAL_POLL_S, WORKER_RESULT_POLL_S
from spectune.study._records import SearchState
from spectune.study._sampler import SpectuneSampler, Strategy, exhaustive_points
from spectune.study._space import StudySpace
from spectune.study._storage import (
    StudyFingerprint,
    close_storage,
    describe_storage,
    open_storage,
    open_study,
    prepare_study,
    reads_are_cheap,
    record_search,
)
from spectune.study._structured import (
    REFINE_BUDGET,
    structured_converged,
    structured_next_point,
    structured_next_points,
)

__all__ = [
    "BATCH_POINTS",
    "EXHAUSTIVE_LIMIT",
    "StudyProgress",
    "StudyRun",
    "resolve_strategy",
    "run_study",
    "_worker_main",
]

StrategyChoice = Literal["auto", "structured", "exhaustive", "tpe"]
EXHAUSTIVE_LIMIT = 64  # 'auto' searches every point of spaces up to this size
BATCH_POINTS = 16  # points a worker evaluates in one lockstep call (memory: simulation.lockstep_memory_gib)
TPE_DEFAULT_SHARE = 0.25  # tpe has no natural end: without --n-trials it runs this share of the space


@dataclass(frozen=True)
class StudyProgress:
    """What a progress bar shows: complete trials of ``total`` (None: until the search converges)."""

    complete: int
    total: int | None
    failed: int


@dataclass(frozen=True)
class StudyRun:
    """What one ``run_study`` call did: the strategy it used and the trials it completed."""

    strategy: Strategy
    completed_trials: int


@dataclass(frozen=True)
class _WorkerSpec:
    space: StudySpace
    evaluator: Evaluator
    storage: str
    strategy: Strategy
    n_trials: int | None
    seed: int
    keep_combos: int
    optuna_verbosity: int
    refine_budget: float = REFINE_BUDGET
    workers: int = 1  # worker processes on this machine: a batch is a worker's share of the free points


def resolve_strategy(space: StudySpace, choice: StrategyChoice) -> Strategy:
    if choice == "auto":
        return "exhaustive" if space.size <= EXHAUSTIVE_LIMIT else "structured"
    return choice


def run_study(
    space: StudySpace,
    evaluator: Evaluator,
    fingerprint: StudyFingerprint,
    *,
    storage: str | BaseStorage,
    strategy: StrategyChoice = "auto",
    n_trials: int | None = None,
    workers: int = 1,
    seed: int = 0,
    keep_combos: int = 2,
    refine_budget: float = REFINE_BUDGET,
    progress: Callable[[StudyProgress], None] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    device: str = "cpu",
    pool: WorkerPool | None = None,
) -> StudyRun:
    """Create or resume the study and run it to its end.

    ``n_trials``: the number of COMPLETE trials the study should hold when done (a resumed study runs
    only the rest). None: every point (exhaustive), until converged (structured), or 25 % of the
    space (tpe). ``evaluator`` must be picklable when ``workers > 1``. ``should_stop`` is asked
    between trials (a graceful Ctrl-C): every worker, in this process or in its own, finishes its
    running trial and stops. ``device``: the device each worker process opens before its first trial
    (a document's ``simulation.device``; ``_spawn``). ``pool``: the ``workers`` processes, already started
    (``start_workers(workers, device)``, so that their start-up overlapped the caller's), which the caller
    closes; None: this starts and closes its own. ``storage``: a journal path or database URL, or a storage
    already opened by ``open_storage`` (or a wrapper of one), which runs in this process only (workers
    = 1) and which the caller closes.
    """
    refusal = workers_error(workers)
    if refusal is not None:
        raise SpectuneError(refusal)
    if n_trials is not None and n_trials < 1:
        raise SpectuneError(f"--n-trials: must be >= 1, got {n_trials}")
    if pool is not None and len(pool.processes) != workers:
        raise ValueError(f"a pool of {len(pool.processes)} workers for a run of {workers}")
    if not isinstance(storage, str) and workers != 1:
        raise ValueError("a storage object runs the study in this process only: give its path or URL for workers > 1")
    resolved = resolve_strategy(space, strategy)
    if resolved == "tpe" and n_trials is None:
        n_trials = max(1, math.ceil(TPE_DEFAULT_SHARE * space.size))
    spec = _WorkerSpec(
        space,
        evaluator,
        storage if isinstance(storage, str) else "",
        resolved,
        n_trials,
        seed,
        keep_combos,
        optuna.logging.get_verbosity(),
        refine_budget,
        workers,
    )
    total = n_trials if n_trials is not None else (space.size if resolved == "exhaustive" else None)
    if isinstance(storage, str):
        opened, label = open_storage(storage, retry_failed_trials=resolved == "tpe"), describe_storage(storage)
    else:
        opened, label = storage, "the given storage"
    try:
        study = prepare_study(opened, space, fingerprint, storage_label=label)
        record_search(study, resolved, keep_combos=keep_combos, refine_budget=refine_budget)
        fail_abandoned_trials(study)
        report = _progress_reporter(study, total, progress)
        if workers == 1:
            completed = _worker_loop(spec, 0, study, on_trial=report, keep_going=lambda: not should_stop())
        else:
            completed = _run_processes(spec, device, pool, on_poll=report, should_stop=should_stop)
        report()
    finally:
        if isinstance(storage, str):
            close_storage(opened)
    return StudyRun(resolved, completed)


def _progress_reporter(
    study: optuna.Study, total: int | None, progress: Callable[[StudyProgress], None] | None
) -> Callable[[], None]:
    def report() -> None:
        if progress is None:
            return
        trials = study.get_trials(deepcopy=False)
        complete = sum(1 for t in trials if t.state == TrialState.COMPLETE)
        failed = sum(1 for t in trials if t.state == TrialState.FAIL)
        progress(StudyProgress(complete, total, failed))

    return report


def _worker_loop(
    spec: _WorkerSpec,
    index: int,
    study: optuna.Study,
    on_trial: Callable[[], None] | None = None,
    keep_going: Callable[[], bool] = lambda: True,
) -> int:
    """Run trials until the study is done (or ``keep_going`` says stop); return how many this worker completed."""
    study.sampler = SpectuneSampler(
        spec.space,
        spec.strategy,
        seed=spec.seed + index,
        keep_combos=spec.keep_combos,
        refine_budget=spec.refine_budget,
    )
    completed = 0
    idle_prunes = 0
    waiting_on: tuple[tuple[int, TrialState, int], ...] | None = None  # the trials' progress when told to wait
    decide_again_at = 0.0
    idle_poll = (
        IDLE_JOURNAL_POLL_S if reads_are_cheap(study) else DECIDE_AGAIN_S
    )  # a database: no more often than it decides
    while keep_going():
        if waiting_on is not None and time.monotonic() < decide_again_at:
            # Deciding costs milliseconds; looking whether any trial moved costs microseconds, so an idle
            # worker looks often and decides only when one did (a round's next points wait ~IDLE_JOURNAL_POLL_S).
            if _progress(study.get_trials(deepcopy=False)) == waiting_on:
                time.sleep(idle_poll)
                continue
        fail_abandoned_trials(study)  # a worker that died meanwhile (on this host) frees its point
        trials = study.get_trials(deepcopy=False)
        state = SearchState.from_trials(spec.space, trials)
        decision = _next_action(spec, state)
        if decision == "stop":
            return completed
        if decision == "wait" or idle_prunes >= 3:
            idle_prunes = 0
            waiting_on, decide_again_at = _progress(trials), time.monotonic() + DECIDE_AGAIN_S
            time.sleep(idle_poll)
            continue
        waiting_on = None
        batch = run_batch(study, spec.space, spec.evaluator, _batch_size(spec, state), budget=spec.n_trials)
        completed += batch.completed
        if batch.completed:
            idle_prunes = 0
        elif batch.no_point_left:
            idle_prunes += 1
        if on_trial is not None:
            on_trial()
    return completed


def _progress(trials: list[optuna.trial.FrozenTrial]) -> tuple[tuple[int, TrialState, int], ...]:
    """What a worker's decision follows, cheaply: each trial's number, state and params held."""
    return tuple((t.number, t.state, len(t.params)) for t in trials)


def _batch_size(spec: _WorkerSpec, state: SearchState) -> int:
    """Trials a worker runs at once, their points evaluated in one lockstep call: its share (one of
    ``spec.workers``) of the points free now, at most BATCH_POINTS and what the budget leaves. The
    free points are every point the structured search needs now (the steps no other step waits
    for), or the exhaustive search's free points of the batch size it reaches next (it goes bucket
    by bucket). Sharing them out runs a round's simulations in parallel processes rather than one
    after another in one engine: a member's serving loop is host work, and lockstep groups split by
    verification rule anyway. TPE decides each point from the results before it: one at a time."""
    if spec.strategy == "structured":
        free = len(structured_next_points(state, keep_combos=spec.keep_combos, refine_budget=spec.refine_budget))
    elif spec.strategy == "exhaustive":
        points = exhaustive_points(state)
        free = sum(1 for p in points if p.batch_size == points[0].batch_size) if points else 1
    else:
        return 1
    size = min(-(-free // spec.workers), BATCH_POINTS)
    if spec.n_trials is not None:
        size = min(size, spec.n_trials - state.num_complete_trials - state.num_live_trials)
    return max(size, 1)


def _next_action(spec: _WorkerSpec, state: SearchState) -> Literal["run", "wait", "stop"]:
    if spec.n_trials is not None:
        if state.num_complete_trials >= spec.n_trials:
            return "stop"
        if state.num_complete_trials + state.num_live_trials >= spec.n_trials:
            return "wait"  # the others' running trials may still fail and leave work
    if spec.strategy == "tpe":
        return "run"
    search: dict[str, Any] = {"keep_combos": spec.keep_combos, "refine_budget": spec.refine_budget}
    if spec.strategy == "structured" and spec.n_trials is None and structured_converged(state, **search):
        return "stop"
    has_free = (
        structured_next_point(state, **search) is not None
        if spec.strategy == "structured"
        else bool(exhaustive_points(state))
    )
    if has_free:
        return "run"
    return "wait" if state.claimed else "stop"  # a held point comes free again if its trial fails


def _worker_main(spec: _WorkerSpec, index: int, results: multiprocessing.Queue, keep_going: Callable[[], bool]) -> None:  # type: ignore[type-arg]
    """A worker process's work (``_spawn`` runs it once its imports are done): trials on its own storage
    connection with its own sampler (seeded seed + index) until the study is done or ``keep_going``
    says stop (it ends its running trial first)."""
    optuna.logging.set_verbosity(spec.optuna_verbosity)
    try:
        opened = open_storage(spec.storage, retry_failed_trials=spec.strategy == "tpe")
        try:
            completed = _worker_loop(spec, index, open_study(opened, spec.space.name), keep_going=keep_going)
        finally:
            close_storage(opened)
        results.put((index, "ok", completed))
    except SpectuneError as err:
        results.put((index, "user-error", str(err)))
    except BaseException as err:  # noqa: BLE001 -- reported to the parent, which raises it
        results.put((index, "error", f"{type(err).__name__}: {err}"))


def _run_processes(
    spec: _WorkerSpec,
    device: str,
    pool: WorkerPool | None,
    on_poll: Callable[[], None],
    should_stop: Callable[[], bool],
) -> int:
    workers = pool if pool is not None else start_workers(spec.workers, device)
    workers.begin(functools.partial(_worker_main, spec))
    processes, results = workers.processes, workers.results
    finished: dict[int, tuple[str, object]] = {}
    try:
        while len(finished) < len(processes):
            if should_stop():
                workers.stop.set()  # each worker ends its running trial, reports and exits
            try:
                index, status, payload = results.get(timeout=WORKER_RESULT_POLL_S)
                finished[index] = (status, payload)
            except queue.Empty:
                pass
            on_poll()
            failure = next(((i, s, p) for i, (s, p) in finished.items() if s != "ok"), None)
            if failure is not None:
                raise (
                    SpectuneError(str(failure[2]))
                    if failure[1] == "user-error"
                    else RuntimeError(f"worker {failure[0]}: {failure[2]}")
                )
            for i, process in enumerate(processes):
                if i not in finished and not process.is_alive() and process.exitcode not in (0, None):
                    time.sleep(WORKER_RESULT_POLL_S)  # its last message may still be in the queue
                    if results.empty():
                        raise SpectuneError(
                            f"worker {i} died (exit code {process.exitcode}); run the study again to resume it"
                        )
        return sum(int(payload) for _, payload in finished.values())  # type: ignore[call-overload]
    finally:
        workers.close()

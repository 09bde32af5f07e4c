"""Running studies on a journal file: budgets, resuming, refusing changed documents, many workers, SIGKILL
(exhaustive and structured).

The evaluator is the closed-form test double (``study_doubles``): these tests are about storage and
sampler mechanics, not about simulation.
"""

import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from study_doubles import (
    HALTED,
    EnvironmentEvaluator,
    GatedEvaluator,
    HeldPointEvaluator,
    MeetingEvaluator,
    SyntheticEvaluator,
    fingerprint,
    make_space,
)

from spectune.errors import SpectuneError
from spectune.study import load_outcome, run_study
from spectune.study._records import ATTR_OWNER
from spectune.study._runner import BATCH_POINTS
from spectune.study._sampler import search_space
from spectune.study._storage import open_storage

HERE = Path(__file__).resolve().parent


def _completed_points(outcome):
    return [t.point for t in outcome.trials if t.state == "COMPLETE"]


def test_budget_is_exact_and_a_rerun_with_more_budget_keeps_every_trial(tmp_path):
    space = make_space()
    storage = str(tmp_path / "s.journal")
    run_study(space, SyntheticEvaluator(), fingerprint(), storage=storage, strategy="structured", n_trials=10)
    first = load_outcome(storage, space.name)
    assert sum(t.state == "COMPLETE" for t in first.trials) == 10
    run_study(space, SyntheticEvaluator(), fingerprint(), storage=storage, strategy="structured", n_trials=15)
    second = load_outcome(storage, space.name)
    points = _completed_points(second)
    assert len(points) == 15 and len(set(points)) == 15
    kept = {t.number: t.metrics for t in second.trials}
    assert all(kept[t.number] == t.metrics for t in first.trials)


def test_structured_run_without_budget_stops_when_converged_and_a_rerun_adds_nothing(tmp_path):
    space = make_space(batch_sizes=(1, 4, 16, 64, 256), max_k=8)
    storage = str(tmp_path / "s.journal")
    calls = tmp_path / "calls.log"
    evaluator = SyntheticEvaluator(call_log=str(calls))
    first = run_study(space, evaluator, fingerprint(), storage=storage)
    assert first.strategy == "structured"  # auto: 5 x 41 > 64 points
    outcome = load_outcome(storage, space.name)
    evaluations = outcome.num_evaluations
    assert evaluations == first.completed_trials == len(calls.read_text().splitlines()) <= 0.3 * space.size
    assert run_study(space, evaluator, fingerprint(), storage=storage).completed_trials == 0
    assert load_outcome(storage, space.name).num_evaluations == evaluations
    assert len(calls.read_text().splitlines()) == evaluations


def test_auto_searches_a_small_space_exhaustively_once(tmp_path):
    space = make_space(batch_sizes=(1, 64), max_k=3, methods=("eagle3",))
    storage = str(tmp_path / "s.journal")
    assert space.size <= 64
    assert run_study(space, SyntheticEvaluator(), fingerprint(), storage=storage).strategy == "exhaustive"
    points = _completed_points(load_outcome(storage, space.name))
    assert sorted(points) == sorted(space.points())


class _BatchRecorder(SyntheticEvaluator):
    """Records the batches ``evaluate_many`` is given (the lockstep path) and refuses single calls."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list] = []

    def evaluate_many(self, points):
        self.batches.append(list(points))
        return [SyntheticEvaluator.__call__(self, p) for p in points]

    def __call__(self, point):
        raise AssertionError("an exhaustive study evaluates its points in batches")


def test_the_exhaustive_search_evaluates_a_batch_size_s_points_together_once_each(tmp_path):
    space = make_space(batch_sizes=(1, 64), max_k=3, methods=("eagle3",))
    evaluator = _BatchRecorder()
    run_study(space, evaluator, fingerprint(), storage=str(tmp_path / "s.journal"), strategy="exhaustive")
    evaluated = [p for batch in evaluator.batches for p in batch]
    assert sorted(evaluated) == sorted(space.points())  # every point once
    assert all(len({p.batch_size for p in batch}) == 1 for batch in evaluator.batches)
    assert max(len(batch) for batch in evaluator.batches) == min(BATCH_POINTS, space.size // len(space.batch_sizes))
    outcome = load_outcome(str(tmp_path / "s.journal"), space.name)
    assert sorted(_completed_points(outcome)) == sorted(space.points())


def test_a_changed_document_or_simulator_is_refused(tmp_path):
    space = make_space(batch_sizes=(8,), max_k=2)
    storage = str(tmp_path / "s.journal")
    run_study(space, SyntheticEvaluator(), fingerprint("v1"), storage=storage, n_trials=2)
    with pytest.raises(SpectuneError, match=r"made from a different version of this document .* new name"):
        run_study(space, SyntheticEvaluator(), fingerprint("v2"), storage=storage, n_trials=3)
    other_simulator = dict(fingerprint("v1"), simulator_version="double-2")
    with pytest.raises(SpectuneError, match="simulated with simulator version 'double-1', this is 'double-2'"):
        run_study(space, SyntheticEvaluator(), other_simulator, storage=storage, n_trials=3)
    assert sum(t.state == "COMPLETE" for t in load_outcome(storage, space.name).trials) == 2


def test_a_running_trial_of_a_dead_process_is_failed_and_its_point_run_again(tmp_path):
    space = make_space(batch_sizes=(8,), max_k=2, methods=("eagle3",))
    storage = str(tmp_path / "s.journal")
    run_study(space, SyntheticEvaluator(), fingerprint(), storage=storage, n_trials=1)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    study = optuna.load_study(study_name=space.name, storage=open_storage(storage))
    orphan = study.ask()
    study._storage.set_trial_user_attr(orphan._trial_id, ATTR_OWNER, {"host": os.uname().nodename, "pid": dead.pid})
    params = {"batch_size": 8, "combo": "eagle3/standard/greedy", "num_speculative_tokens": 1}
    for name, distribution in search_space(space).items():
        study._storage.set_trial_param(
            orphan._trial_id, name, distribution.to_internal_repr(params[name]), distribution
        )
    run_study(space, SyntheticEvaluator(), fingerprint(), storage=storage)
    outcome = load_outcome(storage, space.name)
    assert outcome.trials[orphan.number].state == "FAIL"
    points = _completed_points(outcome)
    assert sorted(points) == sorted(space.points()) and len(points) == len(set(points))


def test_two_local_workers_share_the_study_without_duplicates(tmp_path):
    space = make_space(batch_sizes=(1, 32), max_k=3)
    storage = str(tmp_path / "s.journal")
    calls = tmp_path / "calls.log"
    # Each worker's first batch is its share of the first bucket's 16 points, so both have one to evaluate.
    (tmp_path / "met").mkdir()
    evaluator = MeetingEvaluator(str(tmp_path / "met"), parties=2)
    evaluator.call_log = str(calls)
    run = run_study(
        space,
        evaluator,
        fingerprint(),
        storage=storage,
        strategy="exhaustive",
        workers=2,
    )
    assert run.completed_trials == space.size
    outcome = load_outcome(storage, space.name)
    points = _completed_points(outcome)
    assert sorted(points) == sorted(space.points())
    simulated = Counter(line.split()[1] for line in calls.read_text().splitlines())
    assert max(simulated.values()) == 1
    assert len({t.worker for t in outcome.trials if t.state == "COMPLETE"}) == 2


def test_workers_racing_for_the_last_budget_slots_end_with_the_exact_budget(tmp_path):
    space = make_space(batch_sizes=(1, 8, 64), max_k=4)
    storage = str(tmp_path / "s.journal")
    run_study(
        space,
        SyntheticEvaluator(delay_s=0.02),
        fingerprint(),
        storage=storage,
        strategy="structured",
        n_trials=7,
        workers=3,
    )
    outcome = load_outcome(storage, space.name)
    points = _completed_points(outcome)
    assert len(points) == 7 and len(set(points)) == 7


def test_tpe_runs_its_budget_and_answers_repeated_points_from_storage(tmp_path):
    space = make_space(batch_sizes=(8,), max_k=3, methods=("ngram",))
    storage = str(tmp_path / "s.journal")
    calls = tmp_path / "calls.log"
    run_study(
        space, SyntheticEvaluator(call_log=str(calls)), fingerprint(), storage=storage, strategy="tpe", n_trials=12
    )
    outcome = load_outcome(storage, space.name)
    complete = [t for t in outcome.trials if t.state == "COMPLETE"]
    assert len(complete) == 12
    simulated = calls.read_text().splitlines()
    assert len(simulated) == len(set(simulated)) == outcome.num_evaluations <= space.size  # 5 points only
    assert any(t.duplicate_of is not None for t in complete)


_KILLED_RUN = """
import sys
sys.path.insert(0, {here!r})
from study_doubles import HaltingEvaluator, fingerprint, make_space
from spectune.study import run_study
if __name__ == "__main__":  # worker processes are spawned and import this module
    run_study(make_space(batch_sizes=(1, 8, 64), max_k=4), HaltingEvaluator({after}, call_log={calls!r}),
              fingerprint(), storage={storage!r}, strategy={strategy!r}, workers={workers})
"""


def _start_killable_run(tmp_path: Path, strategy: str, workers: int, after: int) -> subprocess.Popen[bytes]:
    """A study in its own process group, evaluated by ``HaltingEvaluator(after)``, its stdout a pipe that
    every process of the run holds; returns once one of them halts (its first line), the study partly
    done and a batch held mid-trial."""
    calls, storage = tmp_path / "calls.log", tmp_path / "s.journal"
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent(
            _KILLED_RUN.format(
                here=str(HERE), after=after, calls=str(calls), storage=str(storage), workers=workers, strategy=strategy
            )
        )
    )
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, start_new_session=True)
    assert process.stdout is not None
    line = process.stdout.readline()  # EOF instead: every process ended without halting
    if line != HALTED:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise AssertionError(f"the study ended (exit code {process.returncode}) before a worker halted: {line!r}")
    return process


def _until_every_process_is_gone(process: subprocess.Popen[bytes]) -> None:
    """EOF on the run's stdout: the run and every worker, which hold its write end, have exited."""
    process.communicate()  # reads to EOF, then closes the pipe and reaps the run


def _kill_mid_run(tmp_path: Path, strategy: str, workers: int, after: int):
    """SIGKILL a study's process group once a worker has evaluated ``after`` points and holds its next batch;
    (the outcome just after the kill, the call log)."""
    process = _start_killable_run(tmp_path, strategy, workers, after)
    os.killpg(process.pid, signal.SIGKILL)  # the run and its workers, mid-trial
    _until_every_process_is_gone(process)
    assert process.returncode == -signal.SIGKILL
    return load_outcome(str(tmp_path / "s.journal"), make_space(batch_sizes=(1, 8, 64), max_k=4).name), (
        tmp_path / "calls.log"
    )


@pytest.mark.parametrize("workers", [1, 2])
def test_sigkill_mid_structured_search_then_rerun_loses_nothing_and_ends_as_an_uninterrupted_run(tmp_path, workers):
    space = make_space(batch_sizes=(1, 8, 64), max_k=4)
    before, calls = _kill_mid_run(tmp_path, "structured", workers, after=8)
    storage = str(tmp_path / "s.journal")
    complete_before = {t.number: (t.point, t.metrics) for t in before.trials if t.state == "COMPLETE"}
    assert len(complete_before) >= 8

    run_study(
        space,
        SyntheticEvaluator(call_log=str(calls)),
        fingerprint(),
        storage=storage,
        strategy="structured",
        workers=workers,
    )
    after = load_outcome(storage, space.name)
    assert all(
        after.trials[n].state == "COMPLETE" and (after.trials[n].point, after.trials[n].metrics) == kept
        for n, kept in complete_before.items()
    )
    points = _completed_points(after)
    assert len(points) == len(set(points))
    assert not [t for t in after.trials if t.state == "RUNNING" and t.point is not None]
    simulated = Counter(line.split()[1] for line in calls.read_text().splitlines())
    # Only what the kill interrupted: not the halted batch (held before its simulations), another worker's.
    assert sum(n - 1 for n in simulated.values()) <= (workers - 1) * BATCH_POINTS
    # Every decision is a function of the stored results: the resumed search ends where one never killed
    # does (with two workers, a point one of them took may have stopped mattering by the time it is done).
    whole = str(tmp_path / "whole.journal")
    run_study(space, SyntheticEvaluator(), fingerprint(), storage=whole, strategy="structured")
    uninterrupted = load_outcome(whole, space.name)
    expected = set(_completed_points(uninterrupted))
    assert set(points) == expected if workers == 1 else set(points) >= expected
    assert after.recommendation.schedule == uninterrupted.recommendation.schedule
    assert after.recommendation.combo == uninterrupted.recommendation.combo


@pytest.mark.parametrize("workers", [1, 2])
def test_sigkill_mid_study_then_rerun_keeps_every_completed_trial_and_runs_nothing_twice(tmp_path, workers):
    space = make_space(batch_sizes=(1, 8, 64), max_k=4)
    storage = str(tmp_path / "s.journal")
    before, calls = _kill_mid_run(tmp_path, "exhaustive", workers, after=6)
    complete_before = {t.number: (t.point, t.metrics) for t in before.trials if t.state == "COMPLETE"}
    assert 6 <= len(complete_before) < space.size

    run_study(space, SyntheticEvaluator(call_log=str(calls)), fingerprint(), storage=storage, strategy="exhaustive")
    after = load_outcome(storage, space.name)
    assert all(
        after.trials[n].state == "COMPLETE" and (after.trials[n].point, after.trials[n].metrics) == kept
        for n, kept in complete_before.items()
    )
    points = _completed_points(after)
    assert sorted(points) == sorted(space.points()) and len(points) == len(set(points))
    # (a trial killed in the milliseconds between its creation and its owner stamp holds no point and
    # is failed by the next run once it is 15 s old)
    assert not [t for t in after.trials if t.state == "RUNNING" and t.point is not None]
    # Only points whose simulation the kill interrupted were simulated twice: one batch per worker at most
    # (a worker evaluates the free points of one batch size together, up to BATCH_POINTS).
    simulated = Counter(line.split()[1] for line in calls.read_text().splitlines())
    batch = min(BATCH_POINTS, max(sum(1 for p in space.points() if p.batch_size == b) for b in space.batch_sizes))
    assert sum(n - 1 for n in simulated.values()) <= (workers - 1) * batch  # the halted batch: never simulated


def test_workers_stop_by_themselves_when_their_run_is_killed(tmp_path):
    space = make_space(batch_sizes=(1, 8, 64), max_k=4)
    process = _start_killable_run(tmp_path, "exhaustive", workers=2, after=1)
    os.kill(process.pid, signal.SIGKILL)  # the run only: its workers are orphaned
    _until_every_process_is_gone(process)  # returns only if the orphans stop
    done = sum(t.state == "COMPLETE" for t in load_outcome(str(tmp_path / "s.journal"), space.name).trials)
    # An orphan that went on would finish the study; each stops after two batches at most (its first and
    # the held one the run's death lets go), of at most 11 points (its share of a bucket's 21 free points).
    assert 0 < done < space.size


def _stop_after(simulations: int, calls: Path, gate: Path) -> Callable[[], bool]:
    """A ``should_stop`` that says stop once ``calls`` logs ``simulations``, and opens the ``GatedEvaluator``'s
    ``gate`` at the ask after (the parent asks at every poll and tells the workers at once): a batch held
    at the gate is then its worker's last."""
    asked: list[bool] = []

    def stop() -> bool:
        if asked:
            gate.touch()
        elif calls.exists() and len(calls.read_text().splitlines()) >= simulations:
            asked.append(True)
        return bool(asked)

    return stop


@pytest.mark.parametrize("workers", [1, 2])
def test_a_graceful_stop_keeps_the_study_resumable(tmp_path, workers):
    space = make_space(batch_sizes=(1, 8, 64), max_k=4, methods=("eagle3",))  # 51 points
    storage = str(tmp_path / "s.journal")
    calls, gate = tmp_path / "calls.log", tmp_path / "stopped"
    stopped = run_study(
        space, GatedEvaluator(str(gate), call_log=str(calls)), fingerprint(), storage=storage,
        strategy="exhaustive", workers=workers, should_stop=_stop_after(3, calls, gate),
    )  # fmt: skip
    kept = {t.number: t.metrics for t in load_outcome(storage, space.name).trials if t.state == "COMPLETE"}
    assert stopped.completed_trials == len(kept) < space.size
    rest = run_study(space, SyntheticEvaluator(), fingerprint(), storage=storage, strategy="exhaustive")
    after = load_outcome(storage, space.name)
    points = [t.point for t in after.trials if t.state == "COMPLETE"]
    assert sorted(points) == sorted(space.points()) and rest.completed_trials == space.size - len(kept)
    assert all(after.trials[n].metrics == metrics for n, metrics in kept.items())


def test_tpe_with_many_workers_simulates_each_point_once(tmp_path):
    space = make_space(batch_sizes=(8,), max_k=3, methods=("ngram",))  # 5 points, 12 trials: TPE repeats points
    storage = str(tmp_path / "s.journal")
    calls = tmp_path / "calls.log"
    run_study(
        space,
        HeldPointEvaluator(space, storage, str(tmp_path / "held"), n_trials=12, call_log=str(calls)),
        fingerprint(),
        storage=storage,
        strategy="tpe",
        n_trials=12,
        workers=3,
    )
    outcome = load_outcome(storage, space.name)
    assert sum(t.state == "COMPLETE" for t in outcome.trials) == 12
    simulated = [line.split()[1] for line in calls.read_text().splitlines()]
    assert len(simulated) == len(set(simulated)) == outcome.num_evaluations


def test_a_graceful_stop_lets_every_worker_finish_its_running_trial(tmp_path):
    space = make_space(batch_sizes=(1, 8, 64), max_k=4, methods=("eagle3",))
    storage = str(tmp_path / "s.journal")
    calls = tmp_path / "calls.log"  # a line per simulation
    gate = tmp_path / "stopped"  # a worker's second batch waits for it: the stop comes while batches run

    stopped = run_study(
        space, GatedEvaluator(str(gate), call_log=str(calls)), fingerprint(), storage=storage, strategy="exhaustive",
        workers=2, should_stop=_stop_after(2, calls, gate),
    )  # fmt: skip
    trials = load_outcome(storage, space.name).trials
    assert Counter(t.state for t in trials) == {"COMPLETE": stopped.completed_trials}  # none killed mid-trial
    share = -(-sum(1 for p in space.points() if p.batch_size == 1) // 2)  # a batch: a worker's half of a bucket
    assert 2 <= stopped.completed_trials <= 2 * 2 * share < space.size  # at most two batches a worker


def test_a_trial_stores_every_kept_metric_in_the_records_order(tmp_path):
    from spectune.config._metrics import STUDY_METRICS

    space = make_space(batch_sizes=(8,), max_k=2, methods=("ngram",))
    storage = str(tmp_path / "s.journal")
    run_study(space, SyntheticEvaluator(), fingerprint(), storage=storage, strategy="exhaustive")
    trials = optuna.load_study(study_name=space.name, storage=open_storage(storage)).get_trials()
    stored = [t.user_attrs["spectune.result"] for t in trials]
    assert len(stored) == space.size and all(list(result) == list(STUDY_METRICS) for result in stored)
    # The double reports throughput and TPOT only; what it does not measure is stored as null, not left out.
    assert all(r["throughput_tokens_per_s"] > 0 and r["num_drafts"] is None for r in stored)


def test_each_local_worker_takes_its_share_of_the_points_free_now():
    """A round's free points are spread over the workers (each runs its share in lockstep), not all
    taken by the first worker to look while the others wait."""
    from dataclasses import replace

    from spectune.study._records import SearchState
    from spectune.study._runner import _batch_size, _WorkerSpec
    from spectune.study._structured import structured_next_points

    space = make_space(batch_sizes=(1, 8, 32, 128), max_k=6)
    state = SearchState.from_trials(space, [])
    free = len(structured_next_points(state, keep_combos=2))
    assert free >= 4  # the first round holds several points
    spec = _WorkerSpec(space, SyntheticEvaluator(), "unused", "structured", None, 0, 2, 0)
    assert _batch_size(spec, state) == min(free, BATCH_POINTS)
    assert _batch_size(replace(spec, workers=2), state) == -(-free // 2)
    assert _batch_size(replace(spec, workers=free), state) == 1
    assert _batch_size(replace(spec, workers=4 * free), state) == 1
    exhaustive = replace(spec, strategy="exhaustive", workers=3)
    bucket = sum(1 for p in space.points() if p.batch_size == 1)
    assert _batch_size(exhaustive, state) == min(-(-bucket // 3), BATCH_POINTS)


def test_worker_processes_run_with_the_environment_their_parent_set_before_the_study(tmp_path, monkeypatch):
    # A child that imports Triton reads TRITON_INTERPRET from its environment, which the CLI sets
    # after reading the document and before the study starts its workers.
    monkeypatch.setenv("SPECTUNE_TEST_STARTER", str(tmp_path))
    space = make_space(batch_sizes=(1,), max_k=1, methods=("eagle3",))
    storage = str(tmp_path / "s.journal")
    run = run_study(space, EnvironmentEvaluator(), fingerprint(), storage=storage, strategy="exhaustive", workers=2)
    assert run.completed_trials == space.size  # every trial ran in a worker with the variable set (else it raises)
    assert len({t.worker for t in load_outcome(storage, space.name).trials}) >= 1


def test_a_completed_trials_evaluation_is_read_once_and_never_taken_for_another_trials():
    # Every decision reads every trial; a completed trial's evaluation is kept by the trial object, so
    # a trial alike in number and params but another object (another study, another storage) is read
    # anew, and so is the same trial under another space.
    from dataclasses import replace

    from optuna.distributions import CategoricalDistribution, IntDistribution

    from spectune.study._records import ATTR_RESULT, PARAM_BATCH_SIZE, PARAM_COMBO, PARAM_K, SearchState

    space = make_space(batch_sizes=(8,), max_k=2, methods=("ngram",))
    point = next(p for p in space.points() if p.num_speculative_tokens == 1)
    combos = [c.label for c in space.combos]

    def completed(throughput: float) -> optuna.trial.FrozenTrial:
        return optuna.trial.create_trial(
            params={PARAM_BATCH_SIZE: 8, PARAM_COMBO: point.combo.label, PARAM_K: 1},
            distributions={
                PARAM_BATCH_SIZE: CategoricalDistribution([8]),
                PARAM_COMBO: CategoricalDistribution(combos),
                PARAM_K: IntDistribution(0, 2),
            },
            values=[throughput],
            user_attrs={ATTR_RESULT: {"throughput_tokens_per_s": throughput, "throughput_stderr_tokens_per_s": 1.0}},
        )

    first, second = completed(100.0), completed(200.0)
    assert first.number == second.number and first._trial_id == second._trial_id  # alike but for their results
    assert SearchState.from_trials(space, [first]).completed[point].throughput == 100.0
    assert SearchState.from_trials(space, [second]).completed[point].throughput == 200.0
    assert SearchState.from_trials(space, [first]).completed[point].throughput == 100.0
    bound = replace(space, constraints=())  # another space object: read anew
    assert SearchState.from_trials(bound, [first]).completed[point].throughput == 100.0

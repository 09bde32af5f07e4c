"""A structured study stopped and resumed recommends what a fresh one does, and is searched as thoroughly.

A search's decisions are a pure function of the storage, but a round's points are all decided on the
results known when the round began: where ``--n-trials`` cuts a round, the resumed search decides the
rest with the cut round's results in hand, so its path may differ from a fresh run's (a refinement that
fits the budget earlier, a combo it then need not follow), by a few points either way. What must not
differ is the recommendation, tie sets and precision included, and that the search converged.

A trial that a Ctrl-C interrupts is failed (it is re-run on resume); it must not count as a failure of
its point, of which three give the point up: three interrupted resumes of one round gave up every point
of that round, and the search went on without them, with nothing said.
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import optuna
import pytest
from study_doubles import SyntheticEvaluator, fingerprint, make_space
from typer.testing import CliRunner

from spectune.cli import app
from spectune.errors import SpectuneError
from spectune.export._artefacts import recommended_yaml
from spectune.study import load_outcome, run_study
from spectune.study._outcome import StudyOutcome
from spectune.study._records import SearchState
from spectune.study._space import Point, StudySpace
from spectune.study._storage import close_storage, open_storage
from spectune.study._structured import structured_converged

DATA = Path(__file__).parent / "data"
runner = CliRunner()


def _recommendation(outcome: StudyOutcome) -> str:
    """recommended.yaml less its first line (the number of simulations, which is the path's)."""
    return recommended_yaml(outcome).split("\n", 1)[1]


def _complete_points(outcome: StudyOutcome) -> list[Point]:
    return [t.point for t in outcome.trials if t.state == "COMPLETE"]


def _final_state(journal: Path, space: StudySpace) -> SearchState:
    storage = open_storage(str(journal))
    try:
        trials = optuna.load_study(study_name=space.name, storage=storage).get_trials(deepcopy=False)
        return SearchState.from_trials(space, trials)
    finally:
        close_storage(storage)


# (space, seeds, the stops to try: None, every one): the small space's seed 2 and the default space's
# seed 0 are cases whose resumed path differs from the fresh one, by fewer and by more simulations.
_STOP_CASES = [
    ({"batch_sizes": (1, 8, 32), "max_k": 4}, (0, 2, 5), None),
    ({}, (0,), range(20, 34)),
]


@pytest.mark.parametrize(("shape", "seeds", "stops"), _STOP_CASES, ids=["3x4", "4x6"])
def test_a_structured_study_stopped_after_any_trial_and_resumed_recommends_what_a_fresh_one_does(
    tmp_path, shape, seeds, stops
):
    space = make_space(name="stops", **shape)
    search = {"strategy": "structured", "keep_combos": 2, "refine_budget": 0.5}
    sizes: set[str] = set()
    for seed in seeds:
        evaluator = SyntheticEvaluator(seed=seed, noise=0.01)
        fresh_journal = tmp_path / f"fresh-{seed}.journal"
        run_study(space, evaluator, fingerprint(), storage=str(fresh_journal), **search)  # type: ignore[arg-type]
        fresh = load_outcome(str(fresh_journal), space.name)
        fresh_points = _complete_points(fresh)
        for stop in stops or range(1, len(fresh_points)):
            journal = tmp_path / f"stopped-{seed}-{stop}.journal"
            run_study(space, evaluator, fingerprint(), storage=str(journal), n_trials=stop, **search)  # type: ignore[arg-type]
            run_study(space, evaluator, fingerprint(), storage=str(journal), **search)  # type: ignore[arg-type]
            resumed = load_outcome(str(journal), space.name)
            points = _complete_points(resumed)
            where = f"seed {seed}, stopped after {stop} of {len(fresh_points)}"
            assert points[:stop] == fresh_points[:stop], where  # the stopped run is the fresh run's start
            assert len(points) == len(set(points)), where  # nothing simulated twice
            assert _recommendation(resumed) == _recommendation(fresh), where  # tie sets and precision too
            assert structured_converged(_final_state(journal, space), keep_combos=2, refine_budget=0.5), where
            if set(points) != set(fresh_points):
                sizes.add("fewer" if len(points) < len(fresh_points) else "more")
            journal.unlink()
    # 3x4, seed 2, cut after screening: the resumed search refines the tie with a third combo before
    # following it, drops it and skips its walk (25 simulations where the fresh run takes 29). 4x6, seed 0,
    # cut after 23: the pipelined walk starts batch size 128 from batch size 32's best so far, K 6, where the
    # fresh run, deciding a round later, starts from K 5: one more probe (39 where the fresh run takes 38).
    assert sizes == ({"fewer"} if shape else {"more"})


def test_the_journal_written_before_ask_tell_resumes_to_the_points_of_a_fresh_structured_run(tmp_path):
    """The 14-trial journal resumes with 9 simulations to 23; a fresh *structured* run takes the same 23
    points (the 63 of a fresh run was ``sampler: auto``, which searches a 63-point space exhaustively)."""
    space = make_space(name="main-eef4777", batch_sizes=(1, 8, 32), max_k=4)
    journal = tmp_path / "resumed.journal"
    shutil.copy(DATA / "structured-14-trials-eef4777.journal", journal)
    run_study(space, SyntheticEvaluator(), fingerprint(), storage=str(journal), strategy="structured")
    fresh_journal = tmp_path / "fresh.journal"
    run_study(space, SyntheticEvaluator(), fingerprint(), storage=str(fresh_journal), strategy="structured")
    resumed, fresh = load_outcome(str(journal), space.name), load_outcome(str(fresh_journal), space.name)
    assert sorted(_complete_points(resumed)) == sorted(_complete_points(fresh))
    assert len(_complete_points(fresh)) == 23
    assert _recommendation(resumed) == _recommendation(fresh)
    auto = run_study(space, SyntheticEvaluator(), fingerprint(), storage=str(tmp_path / "auto.journal"))
    assert (auto.strategy, auto.completed_trials) == ("exhaustive", 63)


class _InterruptedAtBatch(SyntheticEvaluator):
    """Raises KeyboardInterrupt (a second Ctrl-C) when asked for its ``at``-th batch, as the CLI does."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.batches = at, 0

    def evaluate_many(self, points: Sequence[Point]) -> list[dict[str, object]]:
        self.batches += 1
        if self.batches == self.at:
            raise KeyboardInterrupt
        return super().evaluate_many(points)


def test_three_ctrl_c_in_one_round_leave_its_points_to_the_resumed_search(tmp_path):
    space = make_space(name="interrupted", batch_sizes=(1, 8, 32), max_k=4)
    journal = tmp_path / "study.journal"
    for at in (2, 1, 1):  # the first run's second round, then that same round first on each resume
        with pytest.raises(KeyboardInterrupt):
            run_study(space, _InterruptedAtBatch(at), fingerprint(), storage=str(journal), strategy="structured")
    failed = [t.point for t in load_outcome(str(journal), space.name).trials if t.state == "FAIL"]
    assert len(failed) == 3 * len(set(failed)) > 0  # the same round's points, interrupted three times
    state = _final_state(journal, space)
    assert not state.given_up(), sorted(p.key for p in state.given_up())
    assert sum(state.failures.values()) == 0  # an interrupted trial is no failure of its point
    run_study(space, SyntheticEvaluator(), fingerprint(), storage=str(journal), strategy="structured")
    fresh_journal = tmp_path / "fresh.journal"
    run_study(space, SyntheticEvaluator(), fingerprint(), storage=str(fresh_journal), strategy="structured")
    resumed, fresh = load_outcome(str(journal), space.name), load_outcome(str(fresh_journal), space.name)
    assert sorted(_complete_points(resumed)) == sorted(_complete_points(fresh))
    assert _recommendation(resumed) == _recommendation(fresh)


class _HeldUntilStopped(SyntheticEvaluator):
    """Announces in ``folder`` each batch it starts, and never ends one: only a stop ends the run."""

    def __init__(self, folder: str) -> None:
        super().__init__()
        self.folder = folder

    def evaluate_many(self, points: Sequence[Point]) -> list[dict[str, object]]:
        Path(self.folder, str(os.getpid())).touch()
        while True:
            time.sleep(0.01)


@pytest.mark.slow
def test_three_stops_at_once_of_two_workers_in_one_round_leave_its_points_to_the_resumed_search(tmp_path):
    """A second Ctrl-C with ``--workers`` ends the run at once (the parent's KeyboardInterrupt, raised here
    by ``should_stop``) and terminates the workers mid-batch: their trials were left to die, RUNNING, and
    counted as failures of their points."""
    space = make_space(name="stopped-workers", batch_sizes=(1, 8, 32), max_k=4)
    journal = tmp_path / "study.journal"
    for attempt in range(3):
        started = tmp_path / f"started-{attempt}"
        started.mkdir()

        def stop_at_once(started: Path = started) -> bool:
            if any(started.iterdir()):  # a worker is in its batch
                raise KeyboardInterrupt
            return False

        with pytest.raises(KeyboardInterrupt):
            run_study(
                space, _HeldUntilStopped(str(started)), fingerprint(), storage=str(journal), strategy="structured",
                workers=2, should_stop=stop_at_once,
            )  # fmt: skip
    stopped = [t.point for t in load_outcome(str(journal), space.name).trials if t.state in ("FAIL", "RUNNING")]
    assert stopped and max(stopped.count(p) for p in stopped) == 3  # the same points, stopped three times
    state = _final_state(journal, space)
    assert not state.given_up(), sorted(p.key for p in state.given_up())
    assert sum(state.failures.values()) == 0
    run_study(space, SyntheticEvaluator(), fingerprint(), storage=str(journal), strategy="structured")
    fresh_journal = tmp_path / "fresh.journal"
    run_study(space, SyntheticEvaluator(), fingerprint(), storage=str(fresh_journal), strategy="structured")
    resumed, fresh = load_outcome(str(journal), space.name), load_outcome(str(fresh_journal), space.name)
    assert sorted(_complete_points(resumed)) == sorted(_complete_points(fresh))


class _FailingAtBatch(SyntheticEvaluator):
    """Raises a simulation error on its first batch: a real failure of the batch's points."""

    def evaluate_many(self, points: Sequence[Point]) -> list[dict[str, object]]:
        raise RuntimeError("the simulation failed")


def test_a_point_whose_simulation_fails_three_times_is_still_given_up(tmp_path):
    space = make_space(name="failing", batch_sizes=(8,), max_k=3)
    journal = tmp_path / "study.journal"
    for _ in range(3):
        with pytest.raises(RuntimeError):
            run_study(space, _FailingAtBatch(), fingerprint(), storage=str(journal), strategy="structured")
    assert _final_state(journal, space).given_up()


def test_cli_a_structured_study_stopped_by_n_trials_and_resumed_recommends_what_a_fresh_one_does(tmp_path, tiny_study):
    document = tmp_path / "tiny.yaml"
    document.write_text(tiny_study(max_k=3))
    run = ["study", "run", str(document), "--sampler", "structured", "--no-progress"]
    fresh = runner.invoke(app, [*run, "--out", str(tmp_path / "fresh")])
    assert fresh.exit_code == 0, fresh.output
    stopped = runner.invoke(app, [*run, "--out", str(tmp_path / "resumed"), "--n-trials", "3"])
    assert stopped.exit_code == 0 and "PARTIAL" in stopped.output, stopped.output
    resumed = runner.invoke(app, [*run, "--out", str(tmp_path / "resumed")])
    assert resumed.exit_code == 0, resumed.output
    assert "new in this run" in resumed.output and "PARTIAL" not in resumed.output
    fresh_yaml = (tmp_path / "fresh" / "recommended.yaml").read_text()
    resumed_yaml = (tmp_path / "resumed" / "recommended.yaml").read_text()
    assert resumed_yaml.split("\n", 1)[1] == fresh_yaml.split("\n", 1)[1]


def _complete_count(journal: Path, name: str) -> int:
    try:
        return sum(t.state == "COMPLETE" for t in load_outcome(str(journal), name).trials)
    except SpectuneError:
        return 0


@pytest.mark.slow
def test_cli_ctrl_c_twice_in_the_same_round_three_times_then_a_resume_simulates_every_point(tmp_path, tiny_study):
    """Each attempt presses Ctrl-C twice once a round is running; one whose round ends before the second
    press just ends early, and the next attempt interrupts the next round. Three interrupted trials of one
    point gave it up before; now the resume simulates all 8 points."""
    document = tmp_path / "tiny.yaml"
    # Simulations of seconds, so that the second Ctrl-C lands in the round the first one found running.
    document.write_text(
        tiny_study(max_k=3)
        .replace("num_requests: 8", "num_requests: 400")
        .replace("requests_per_batch_size: 3", "requests_per_batch_size: 100")
    )
    out = tmp_path / "out"
    storage = out / "study.journal"
    command = [sys.executable, "-m", "spectune", "study", "run", str(document), "--out", str(out), "--no-progress"]
    fails: dict[str, int] = {}
    for _ in range(12):
        if max(fails.values(), default=0) >= 3:
            break
        earlier = len(load_outcome(str(storage), "tiny").trials) if storage.exists() else 0
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        try:
            while process.poll() is None:  # until a trial of this run holds its point: its round runs
                if storage.exists():
                    outcome = load_outcome(str(storage), "tiny")
                    if any(t.state == "RUNNING" and t.number >= earlier for t in outcome.trials):
                        break
                time.sleep(0.05)
            process.send_signal(signal.SIGINT)
            for line in iter(process.stderr.readline, ""):
                if line.startswith("stopping after"):
                    break
            process.send_signal(signal.SIGINT)
            process.communicate(timeout=240)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        fails = {}
        for trial in load_outcome(str(storage), "tiny").trials:
            if trial.state == "FAIL" and trial.point is not None:
                fails[trial.point.key] = fails.get(trial.point.key, 0) + 1
    assert max(fails.values(), default=0) >= 3, fails  # the precondition: one point interrupted three times
    assert _complete_count(storage, "tiny") < 8
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert _complete_count(storage, "tiny") == 8, result.stdout

"""Many workers on one study in PostgreSQL: a real server on loopback, four worker processes.

The server is the machine's PostgreSQL (Debian's postgresql-15: initdb and pg_ctl), started in a
temporary folder as a non-root user (PostgreSQL refuses to run as root; CI runs as root, so the
server runs as the 'postgres' user through runuser). SPECTUNE_TEST_POSTGRES_URL points the test at
an existing server instead. Skipped, with the reason, only when neither is available.
"""

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
from race_doubles import accepted_count, race_two_documents
from study_doubles import SyntheticEvaluator, fingerprint, make_space

from spectune.study import load_outcome, run_study
from spectune.study._storage import close_storage, open_storage

HERE = Path(__file__).resolve().parent
pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def _find_binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres_url():
    if os.environ.get("SPECTUNE_TEST_POSTGRES_URL"):
        yield os.environ["SPECTUNE_TEST_POSTGRES_URL"]
        return
    initdb, pg_ctl = _find_binary("initdb"), _find_binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip(
            "PostgreSQL's initdb/pg_ctl not found (apt-get install postgresql) and SPECTUNE_TEST_POSTGRES_URL not set"
        )
    prefix: list[str] = []
    owner = None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip(
                "running as root and there is no 'postgres' user to run the server as (PostgreSQL refuses root)"
            )
        prefix = ["runuser", "-u", "postgres", "--"]
    folder = tempfile.mkdtemp(prefix="spectune-pg-")
    if owner is not None:
        os.chown(folder, owner.pw_uid, owner.pw_gid)
    data = os.path.join(folder, "data")
    port = _free_port()
    run = lambda *args: subprocess.run([*prefix, *args], check=True, capture_output=True, text=True)  # noqa: E731
    try:
        run(initdb, "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")
        options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60"
        run(pg_ctl, "-D", data, "-o", options, "-l", os.path.join(folder, "server.log"), "-w", "start")
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", data, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


_WORKER = """
import sys
sys.path.insert(0, {here!r})
import optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
from study_doubles import SyntheticEvaluator, fingerprint, make_space
from spectune.study import run_study
if __name__ == "__main__":
    run_study(make_space(name={name!r}, batch_sizes=(1, 8, 64), max_k=4), SyntheticEvaluator(delay_s=0.05),
              fingerprint(), storage={url!r}, strategy="structured", n_trials=40)
"""


def test_four_worker_processes_fill_a_40_trial_budget_exactly_without_duplicates(postgres_url, tmp_path):
    name = f"pg-{os.getpid()}"
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(_WORKER.format(here=str(HERE), name=name, url=postgres_url)))
    workers = [subprocess.Popen([sys.executable, str(script)], stderr=subprocess.PIPE, text=True) for _ in range(4)]
    errors = [w.communicate(timeout=300)[1] for w in workers]
    assert [w.returncode for w in workers] == [0, 0, 0, 0], errors
    outcome = load_outcome(postgres_url, name)
    complete = [t for t in outcome.trials if t.state == "COMPLETE"]
    assert len(complete) == 40
    points = [t.point for t in complete]
    assert len(set(points)) == 40 and set(points) <= set(make_space(batch_sizes=(1, 8, 64), max_k=4).points())
    per_worker = Counter(t.worker for t in complete)
    assert len(per_worker) == 4, per_worker  # every process took part
    assert outcome.recommendation is not None


_STARVED_WORKER = """
import sys
sys.path.insert(0, {here!r})
from race_doubles import run_starved_worker
if __name__ == "__main__":
    run_starved_worker({url!r}, {name!r}, int(sys.argv[1]), 40)
"""


def run_starved_workers(storage: str, name: str, tmp_path: Path) -> tuple[list[subprocess.Popen], list[str]]:
    """Four workers on one 40-trial budget, each claim delayed; worker 0 starts first and holds its
    first trial unclaimed (``race_doubles.SlowClaims``); the others start once it holds it."""
    script = tmp_path / "starved.py"
    script.write_text(textwrap.dedent(_STARVED_WORKER.format(here=str(HERE), url=storage, name=name)))
    start = lambda i: subprocess.Popen(  # noqa: E731
        [sys.executable, str(script), str(i)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    first = start(0)
    line = first.stdout.readline()
    assert line.startswith("holding trial"), (line, first.communicate(timeout=60))
    workers = [first, *(start(i) for i in (1, 2, 3))]
    try:
        errors = [w.communicate(timeout=240)[1] for w in workers]
    finally:
        for w in workers:
            w.kill()  # a hung worker (as before ownership at creation) must not outlive the test
    return workers, errors


def check_starved_run(storage: str, name: str, workers: list[subprocess.Popen], errors: list[str]) -> None:
    assert [w.returncode for w in workers] == [0, 0, 0, 0], errors
    outcome = load_outcome(storage, name)
    complete = [t for t in outcome.trials if t.state == "COMPLETE"]
    assert len(complete) == 40
    points = [t.point for t in complete]
    assert len(set(points)) == 40, Counter(points).most_common(3)
    assert not [t for t in outcome.trials if t.state == "FAIL"]  # no live trial was failed by another worker
    owners = {t.worker.rsplit(":", 1)[1] for t in complete if t.worker}
    assert str(workers[0].pid) in owners  # the starved worker's held trial completed


def test_four_starved_workers_fill_a_40_trial_budget_with_40_distinct_points(postgres_url, tmp_path):
    name = f"pg-starved-{os.getpid()}-{tmp_path.name}"
    workers, errors = run_starved_workers(postgres_url, name, tmp_path)
    check_starved_run(postgres_url, name, workers, errors)


def test_two_documents_started_at_one_instant_on_one_postgres_study_one_is_refused(postgres_url):
    for attempt in range(10):
        storage_name = f"raced-{os.getpid()}-{attempt}"
        verdicts = race_two_documents(postgres_url, name=storage_name)
        assert accepted_count(verdicts) == 1, (attempt, verdicts)
        refused = next(v for v in verdicts if v != "accepted")
        assert "was made from a different version of this document" in refused


_KILLED_ELSEWHERE = """
import socket
import sys
import threading
sys.path.insert(0, {here!r})
import optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
# Its trials look like another machine's: on this host, a dead owner's pid would free them without heartbeats.
socket.gethostname = lambda: "another-machine"
from study_doubles import SyntheticEvaluator, fingerprint, make_space
from spectune.study import run_study


class Stalls(SyntheticEvaluator):
    def evaluate_many(self, points):
        print("evaluating", ",".join(p.key for p in points), flush=True)
        threading.Event().wait()  # until the test kills this process


if __name__ == "__main__":
    run_study(make_space(name={name!r}, batch_sizes=(1, 8, 64), max_k=4), Stalls(), fingerprint(),
              storage={url!r}, strategy="structured", n_trials=12)
"""


@pytest.mark.timeout(120)
def test_a_worker_killed_mid_batch_on_another_machine_has_its_trials_failed_by_heartbeat_and_retried(
    postgres_url, tmp_path
):
    name = f"pg-killed-{os.getpid()}"
    script = tmp_path / "stalls.py"
    script.write_text(textwrap.dedent(_KILLED_ELSEWHERE.format(here=str(HERE), name=name, url=postgres_url)))
    worker = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = worker.stdout.readline()  # printed once every trial of its first batch holds its point
        assert line.startswith("evaluating "), (line, worker.communicate(timeout=60))
    finally:
        worker.kill()
        worker.communicate()  # reaps it and closes its pipes
    held = set(line.split(" ", 1)[1].strip().split(","))
    space = make_space(name=name, batch_sizes=(1, 8, 64), max_k=4)
    running = [t for t in load_outcome(postgres_url, name).trials if t.state == "RUNNING"]
    assert {t.point.key for t in running} == held and running

    grace_s = 2
    opened = open_storage(postgres_url, heartbeat_interval_s=1, grace_period_s=grace_s)
    try:
        # Only a heartbeat older than the grace period marks a trial dead: the killed worker's last one
        # is at least this old once this wait ends (a wait for time itself, not for another process).
        time.sleep(grace_s + 1)
        calls = tmp_path / "calls.log"
        run_study(
            space,
            SyntheticEvaluator(call_log=str(calls)),
            fingerprint(),
            storage=opened,
            strategy="structured",
            n_trials=12,
        )
    finally:
        close_storage(opened)
    trials = {t.number: t for t in load_outcome(postgres_url, name).trials}
    assert all(trials[t.number].state == "FAIL" for t in running)  # failed by their stale heartbeats
    complete = [t for t in trials.values() if t.state == "COMPLETE"]
    assert len(complete) == 12 and len({t.point for t in complete}) == 12
    assert held <= {t.point.key for t in complete}  # their points retried (the search still needed them)

"""The worker pool: started before its work is known, handed it later, closed whether or not it began;
forked from a server that imported the study's libraries once, spawned where that server's environment
is not the one asked for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from spectune import _spawn
from spectune._spawn import start_workers


def _report_pid(index: int, results, keep_going) -> None:  # a worker's work: say who ran it
    results.put((index, "ok", os.getpid()))


def test_workers_started_before_their_work_run_it_once_each_when_it_comes():
    pool = start_workers(2, "cpu")
    try:
        pool.wait_started()
        assert all(process.is_alive() for process in pool.processes)  # waiting: no work was given yet
        assert pool.results.empty()
        pool.begin(_report_pid)
        reports = sorted(pool.results.get(timeout=120) for _ in pool.processes)
    finally:
        pool.close()
    assert [index for index, _, _ in reports] == [0, 1]
    assert {pid for _, _, pid in reports} == {process.pid for process in pool.processes}


def test_a_pool_closed_before_its_work_came_leaves_no_process():
    pool = start_workers(2, "cpu")
    pool.close()
    assert not any(process.is_alive() for process in pool.processes)
    assert pool.results.empty()


def _exit_slowly(index: int, results, keep_going) -> None:  # a worker's work: report, then linger in its exit
    from multiprocessing.util import Finalize

    def linger() -> None:  # runs in the interpreter's exit, as the queues' own finalizers do
        results.put((index, "exiting", os.getpid()))
        while True:  # until the parent's close terminates it
            time.sleep(0.01)

    Finalize(None, linger, exitpriority=100)
    results.put((index, "ok", os.getpid()))


def test_closing_workers_whose_work_is_over_prints_no_traceback(capfd):
    pool = start_workers(1, "cpu")
    try:
        pool.begin(_exit_slowly)
        statuses = [pool.results.get(timeout=120)[1] for _ in range(2)]  # the work's report, then its exit's
    finally:
        pool.close()
    assert statuses == ["ok", "exiting"]  # the terminate landed inside the worker's exit
    assert not any(process.is_alive() for process in pool.processes)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err


def _report_parent_and_environment(index: int, results, keep_going) -> None:
    preloaded = [name for name in _spawn.PRELOAD if name in sys.modules]
    results.put((index, "ok", (os.getppid(), os.environ.get("SPECTUNE_TEST_POOL"), preloaded)))


def _pool_reports() -> None:
    """Two pools of one worker, the second under a changed environment; print what each worker saw."""
    reports = []
    for value in (None, "changed"):
        if value is not None:
            os.environ["SPECTUNE_TEST_POOL"] = value
        pool = start_workers(1, "cpu")
        try:
            pool.begin(_report_parent_and_environment)
            reports.append(pool.results.get(timeout=120)[2])
        finally:
            pool.close()
    print(json.dumps({"me": os.getpid(), "reports": reports}))


def test_workers_come_from_the_fork_server_and_a_changed_environment_spawns_them():
    """The first pool starts the fork server, whose children already hold the libraries; the server
    keeps the environment it started with, so a pool asked for under another one is spawned (a child
    importing Triton reads TRITON_INTERPRET from it). In a fresh process: this one's server may exist."""
    environ = {k: v for k, v in os.environ.items() if k != "SPECTUNE_TEST_POOL"}
    environ["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), environ.get("PYTHONPATH", "")])
    code = "import test_spawn; test_spawn._pool_reports()"
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environ, timeout=300)
    assert ran.returncode == 0, ran.stderr
    seen = json.loads(ran.stdout.strip().splitlines()[-1])
    (server_parent, unset, preloaded), (spawned_parent, changed, _) = seen["reports"]
    assert server_parent != seen["me"] and unset is None  # forked by the server, with its environment
    assert preloaded == _spawn.PRELOAD
    assert spawned_parent == seen["me"] and changed == "changed"

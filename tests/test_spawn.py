"""The worker pool: started before its work is known, handed it later, closed whether or not it began."""

from __future__ import annotations

import os
import time

from spectune._spawn import start_workers


def _report_pid(index: int, results, keep_going) -> None:  # a worker's work: say who ran it
    results.put((index, "ok", os.getpid()))


def test_workers_started_before_their_work_run_it_once_each_when_it_comes():
    pool = start_workers(2, "cpu")
    try:
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

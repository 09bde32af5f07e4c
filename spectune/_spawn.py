"""A study's worker processes on this machine: one pool, started early, from a fork server that has
imported the study's libraries once.

``start_workers`` starts N processes, each of which opens its device and waits for ``begin`` to hand it
the work, which it runs until the work ends, ``stop`` is set (a graceful Ctrl-C in the parent) or the
parent is gone (an orphan of a killed run). ``close`` stops and joins them.

Two measured reasons shape the start (the times: ``benchmarks/results/study-cpu-2026-12-07.md``):

- **Started early.** ``spectune study run`` starts the pool as soon as the study is validated, so that
  the workers' start-up overlaps the parent's own imports and the storage's preparation instead of
  falling inside the first round.
- **Forked from a server that imports once** (``multiprocessing``'s fork server, with ``PRELOAD``):
  spawned workers each import torch, Optuna and the simulator themselves, seconds of work that, where
  the machine has fewer cores than processes importing at once, queue behind each other and the
  parent's own imports and delay the first trial. The server is a fresh process that never opens
  CUDA, so its children can. It takes the environment as it is when it starts (``TRITON_INTERPRET`` is
  read when the kernels are imported, there): a pool asked for under another environment is spawned
  instead. Forking from the server waits for its imports, so the processes are started on a thread of
  their own while the parent goes on preparing the study.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from typing import Any

__all__ = ["PRELOAD", "WorkerPool", "max_workers", "start_workers", "usable_cores", "workers_error"]

# --workers on one machine: at most this many a usable core, and never fewer than MIN_MAX_WORKERS. A
# worker's serving loop is host work, so past a few a core they only time-slice, and each holds its
# own imports (hundreds of MB): --workers 1000 on 2 cores grew without finishing.
WORKERS_PER_CORE = 4
_WORK_POLL_S = 0.1  # a waiting worker looks this often whether its parent is gone
MIN_MAX_WORKERS = 8

# What the fork server imports once for all its children: everything a worker's work imports.
PRELOAD = ["torch", "optuna", "spectune.simulator", "spectune.study"]

# What a worker runs: ``work(index, results, keep_going)``, picklable (it is sent to a fresh process).
Work = Callable[[int, Any, Callable[[], bool]], None]


@dataclass
class WorkerPool:
    """Worker processes and their shared queue and event: ``results`` takes (index, status, payload)
    from each, ``stop`` asks them to end their running trial and stop."""

    processes: list[BaseProcess]
    results: Any  # multiprocessing Queue
    stop: Any  # multiprocessing Event
    inbox: Any  # multiprocessing Queue: the work, once per worker
    starter: threading.Thread | None  # starts the processes from the fork server (``_start_all``)
    start_error: list[BaseException]  # what starting them raised, if it did

    def wait_started(self) -> None:
        """Wait until every process is started; raise if one could not be."""
        if self.starter is not None:
            self.starter.join()
        if self.start_error:
            raise RuntimeError(
                f"starting the study's worker processes failed: {self.start_error[0]}"
            ) from self.start_error[0]

    def begin(self, work: Work) -> None:
        """Hand every worker ``work`` (picklable: ``work(index, results, keep_going)``) once all are started."""
        self.wait_started()
        for _ in self.processes:
            self.inbox.put(work)

    def close(self) -> None:
        """Stop every worker still running and wait for it."""
        self.stop.set()
        if self.starter is not None:
            self.starter.join()
        started = [process for process in self.processes if process.pid is not None]
        for process in started:
            if process.is_alive():
                process.terminate()
        for process in started:
            process.join(timeout=10)
            if process.is_alive():  # deaf to SIGTERM (stuck in a call that never returns to Python)
                process.kill()
                process.join()


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity, where the system has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def max_workers() -> int:
    """The most worker processes ``--workers`` may start on this machine."""
    return max(MIN_MAX_WORKERS, WORKERS_PER_CORE * usable_cores())


def workers_error(workers: int) -> str | None:
    """The ``--workers`` message for a count this machine refuses, else None."""
    limit = max_workers()
    if 1 <= workers <= limit:
        return None
    return (
        f"--workers: must be 1 to {limit} on this machine ({WORKERS_PER_CORE} a core of its {usable_cores()}, "
        f"at least {MIN_MAX_WORKERS}), got {workers}"
    )


def start_workers(count: int, device: str) -> WorkerPool:
    """Start ``count`` workers that each open ``device`` (a document's ``simulation.device``) and wait
    for ``WorkerPool.begin``; they start on a thread, from the fork server (``PRELOAD``) where it runs
    with this environment, else spawned. ``begin`` raises if one could not be started."""
    context = _context()
    results, stop, inbox = context.Queue(), context.Event(), context.Queue()
    # The workers share the cores: each with torch's default (one thread a core) oversubscribes them.
    threads = max(1, (os.cpu_count() or 1) // count)
    processes: list[BaseProcess] = [
        context.Process(target=_entry, args=(i, device, threads, inbox, results, stop), daemon=True)
        for i in range(count)
    ]
    errors: list[BaseException] = []
    starter = None
    if context.get_start_method() == "spawn":
        with _sigint_ignored_by_children():
            _start_all(processes, errors)
    else:
        starter = threading.Thread(target=_start_all, args=(processes, errors), name="spectune-workers", daemon=True)
        starter.start()
    return WorkerPool(processes, results, stop, inbox, starter, errors)


def _start_all(processes: list[BaseProcess], errors: list[BaseException]) -> None:
    """Start each process; on a failure, record it and start no more (``begin`` raises it)."""
    try:
        for process in processes:
            process.start()
    except BaseException as err:  # noqa: BLE001 -- raised in the caller by ``WorkerPool.begin``
        errors.append(err)


# The environment the fork server was started with (None: this process started none).
_server_environ: dict[str, str] | None = None


def _context() -> Any:
    """The fork server's context, the server started now if it is not running (it imports ``PRELOAD``
    meanwhile); spawning's off Linux, or where the server runs with another environment than this
    process's now (its children would take that one)."""
    global _server_environ
    # Linux only: on macOS a process forked after loading system frameworks (torch loads Accelerate) may crash.
    if not sys.platform.startswith("linux"):
        return multiprocessing.get_context("spawn")
    if _server_environ is None:
        from multiprocessing import forkserver

        multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD)
        with _sigint_ignored_by_children():  # inherited by the server and its children: none dies starting
            forkserver.ensure_running()
        _server_environ = dict(os.environ)
    return multiprocessing.get_context("forkserver" if _server_environ == dict(os.environ) else "spawn")


@contextlib.contextmanager
def _sigint_ignored_by_children() -> Iterator[None]:
    """Start processes with SIGINT ignored (a spawned child inherits it), so that a Ctrl-C while a
    worker is still importing cannot kill it with a traceback; the parent's handler is back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _entry(index: int, device: str, threads: int, inbox: Any, results: Any, stop: Any) -> None:
    """Import, open the device, wait for the work and run it; ``keep_going()`` turns False once
    ``stop`` is set or the parent is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it sets ``stop``
    import torch

    parent = multiprocessing.parent_process()

    def keep_going() -> bool:
        return not stop.is_set() and (parent is None or parent.is_alive())

    torch.set_num_threads(threads)
    _open_device(device, index)
    import optuna  # noqa: F401  (what the work imports, paid while the parent prepares the study)

    import spectune.simulator  # noqa: F401

    work: Work | None = None
    while work is None and keep_going():
        with contextlib.suppress(queue.Empty):
            work = inbox.get(timeout=_WORK_POLL_S)
    if work is None:
        return
    # ``close`` terminates the workers of a run stopped at once (a second Ctrl-C): their running trials are
    # interrupted then, as the parent's are, and failed as stopped rather than by their points.
    global _working
    _working = True
    signal.signal(signal.SIGTERM, _interrupt)
    with contextlib.suppress(KeyboardInterrupt):  # one landing outside a batch: the parent is closing, no traceback
        try:
            work(index, results, keep_going)
        finally:
            _working = False


_working = False  # while True, SIGTERM interrupts the work; after it, the process is only exiting


def _interrupt(signum: int, frame: object) -> None:
    if _working:
        raise KeyboardInterrupt
    # ``close`` terminates a worker whose work is over, often inside the interpreter's exit (its queues'
    # finalizers): an exception there prints a traceback, so end the way SIGTERM's default action does.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _open_device(device: str, worker_index: int) -> None:
    """Make this worker's GPU its current device (``worker_device``: a bare ``cuda`` spreads the workers
    over the machine's GPUs) and create its CUDA context now, while no trial waits for it; a device that
    cannot be opened is left for the simulation to report, with the document's field."""
    from spectune.errors import SpectuneError
    from spectune.simulator._backend import resolve_device, worker_device

    try:
        resolved = resolve_device(device)
        if resolved.type == "cuda":
            import torch

            resolved = worker_device(resolved, worker_index, torch.cuda.device_count())
            if resolved.index is not None:
                torch.cuda.set_device(resolved)  # this process simulates there only: no context on another GPU
            torch.empty(1, device=resolved)
    except (SpectuneError, RuntimeError, AssertionError):
        pass

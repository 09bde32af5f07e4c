"""Study worker processes started before their work is known, so that their start-up overlaps the parent's.

A worker needs torch, Triton and Optuna and an open device (seconds: about five on a GPU machine)
before it can simulate anything. This module imports none of that, so its workers can start before
the parent has loaded its own libraries, and each then waits for its work (``begin``). Where the
machine has a core for each, the processes are spawned and import side by side, from the very start
of ``spectune study run``: the entry point spawns them before the command-line libraries load
(``start_early_workers``), so their imports overlap the parent's and its reading of the study. What
only the study says (its device), and the environment as reading it left it, reaches them later,
when the command asks for them (``started_workers``). Where the machine has fewer cores than
processes importing at once (``fork_server_pays``: two workers on two cores), they come from a fork
server instead: one fresh process that imports torch, Optuna and the study code once
(``spectune._preload``) and forks each child with them loaded (on two cores the workers' first trial
came 1.3 s sooner). The server never opens CUDA, so its children can; it defines no kernel, as
Triton reads its interpreter switch then, from the environment each child takes from its starter
(``_entry``). Starting from the server waits for its imports, so it happens on a thread of its own:
the parent goes on preparing the study meanwhile. ``kernel_warm_up`` starts the study's other
helpers: processes that compile its kernels.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from typing import Any

__all__ = [
    "StartedWorkers",
    "fork_server_pays",
    "kernel_warm_up",
    "nvidia_driver_present",
    "sigint_ignored_by_children",
    "start_early_workers",
    "start_fork_server",
    "start_workers",
    "started_workers",
    "triton_head_start",
]


@dataclass(frozen=True)
class _Setup:
    """What a worker needs before its work: the device it opens (a document's ``simulation.device``),
    torch's CPU threads (the workers share the cores: each with torch's default, one a core, eight
    workers on 16 cores ran 128 threads) and its starter's environment (``_take_environment``)."""

    device: str
    threads: int
    environ: dict[str, str]

    @classmethod
    def now(cls, device: str, count: int) -> _Setup:
        """The setup of each of ``count`` workers, with the environment as it is now."""
        return cls(device, max(1, (os.cpu_count() or 1) // count), dict(os.environ))


@dataclass
class StartedWorkers:
    """Worker processes and their queues: ``inbox`` hands each its work, ``results`` takes (index,
    status, payload) from each, ``stop`` asks them to end their running trial and stop. ``setups``
    hands each early worker its setup (``start_early_workers``); None where they were given it at
    start."""

    processes: list[BaseProcess]
    inbox: Any  # multiprocessing Queue
    results: Any  # multiprocessing Queue
    stop: Any  # multiprocessing Event
    starting: _Starter
    setups: Any = None  # multiprocessing Queue

    def check(self) -> None:
        """Raise what starting the processes raised, if it did."""
        self.starting.check()

    def wait_started(self) -> None:
        """Wait until every process is started (they start on a thread: ``_Starter``); raise if one failed."""
        self.starting.join()
        self.starting.check()

    def begin(self, work: Callable[[int, Any, Callable[[], bool]], None]) -> None:
        """Hand every worker the same work, run as ``work(index, results, keep_going)`` (pickled once per
        worker; see ``_entry``)."""
        for _ in self.processes:
            self.inbox.put(work)

    def close(self) -> None:
        """Stop every worker still running (given work or not) and wait for it."""
        self.stop.set()
        self.starting.join()
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        for process in self.processes:
            process.join(timeout=10)


# --workers on one machine: at most this many a usable core, and never fewer than MIN_MAX_WORKERS. A
# worker's serving loop is host work, so past a few a core they only time-slice, and each holds its
# own imports (hundreds of MB): --workers 1000 on 2 cores grew 3.6 GB without finishing.
WORKERS_PER_CORE = 4
MIN_MAX_WORKERS = 8


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


def start_workers(count: int, device: str = "cpu") -> StartedWorkers:
    """Start ``count`` workers; each opens ``device`` (a document's ``simulation.device``), then waits
    for ``begin``. They run with the environment as it is now: start them after anything that changes
    how the libraries load (``TRITON_INTERPRET``)."""
    return _start(_context(count), count, _Setup.now(device, count))


# The workers ``start_early_workers`` started and no study has taken yet; process-global, like the
# fork server, as the entry point starts them before the command that takes them exists.
_early: StartedWorkers | None = None


def start_early_workers(count: int) -> None:
    """Spawn ``count`` workers now, before the study, its device and the environment it leaves are
    known: they import while this process loads the command line and reads the study, then wait for
    ``started_workers`` to hand them the rest. Spawned, not forked from the server: only where each
    has a core is their importing side by side worth starting this early (``fork_server_pays``).
    Workers no study takes end with this process (daemonic: ``multiprocessing`` terminates them at
    exit, mid-import or waiting), or when a study asks for another count."""
    global _early
    _early = _start(multiprocessing.get_context("spawn"), count, None)


@contextlib.contextmanager
def started_workers(count: int, device: str) -> Iterator[StartedWorkers | None]:
    """The ``count`` workers ``start_early_workers`` started, handed their setup now (``device``,
    torch's threads and the environment as it is now), else ``start_workers`` when ``count`` > 1
    (None for one: the parent is the worker); closed on exit whatever happened in between (a study
    that fails before it begins leaves no process behind)."""
    global _early
    early, _early = _early, None
    if early is not None and len(early.processes) == count:
        setup = _Setup.now(device, count)
        for _ in early.processes:
            early.setups.put(setup)
        started: StartedWorkers | None = early
    else:
        if early is not None:  # started for another count (the entry point reads the first --workers)
            early.close()
        started = start_workers(count, device) if count > 1 else None
    try:
        yield started
    finally:
        if started is not None:
            started.close()


def _start(context: Any, count: int, setup: _Setup | None) -> StartedWorkers:
    """Start ``count`` workers given ``setup``, or (None) waiting for it on their ``setups`` queue."""
    inbox, results, stop = context.Queue(), context.Queue(), context.Event()
    setups = context.Queue() if setup is None else None
    processes: list[BaseProcess] = [
        context.Process(target=_entry, args=(i, setup, setups, inbox, results, stop), daemon=True) for i in range(count)
    ]
    return StartedWorkers(processes, inbox, results, stop, _Starter(context, processes), setups)


# Processes that warm up a study's kernels: one for every CORES_PER_WARM_UP_PROCESS cores the workers
# leave (at least one, at most MAX_WARM_UP_PROCESSES). Compiling competes with the workers' host loops:
# on a 16-core H200 machine with 8 workers, four processes made a fresh decision-sized run take
# 49-58 s where one had taken 29 s (benchmarks/results); the warm-up's marks carry what one process
# did not finish on to the next run.
CORES_PER_WARM_UP_PROCESS = 8
MAX_WARM_UP_PROCESSES = 4


@contextlib.contextmanager
def kernel_warm_up(evaluator: Any, max_members: int, workers: int = 1) -> Iterator[None]:
    """While the block runs, processes of their own compile the kernel variants the study's simulations
    can launch (``evaluator.warm_up(max_members, share)``, where ``evaluator.compiles_kernels()``): off
    the critical path, at low priority, on the cores ``workers`` leave (at least one process); stopped
    at the end, whatever they have compiled stays in Triton's cache."""
    if not evaluator.compiles_kernels():
        yield
        return
    count = max(1, min(MAX_WARM_UP_PROCESSES, ((os.cpu_count() or 1) - workers) // CORES_PER_WARM_UP_PROCESS))
    context = _context(workers)
    environ = dict(os.environ)
    processes = [
        context.Process(target=_warm_up_entry, args=(evaluator, max_members, (i, count), environ), daemon=True)
        for i in range(count)
    ]
    starting = _Starter(context, processes)
    try:
        yield
    finally:
        starting.join()
        for process in processes:
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join(timeout=10)


def _warm_up_entry(evaluator: Any, max_members: int, share: tuple[int, int], environ: dict[str, str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _take_environment(environ)
    os.nice(10)  # the workers' simulations first
    import torch

    torch.set_num_threads(1)
    parent = multiprocessing.parent_process()
    with contextlib.suppress(Exception):  # a variant left cold is compiled where it is first launched
        evaluator.warm_up(max_members, share, lambda: parent is None or parent.is_alive())  # no orphan


@contextlib.contextmanager
def sigint_ignored_by_children() -> Iterator[None]:
    """Start processes with SIGINT ignored (inherited through exec), so that a Ctrl-C while a worker is
    still importing cannot kill it with a traceback; the parent's own handler is back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _entry(index: int, setup: _Setup | None, setups: Any, inbox: Any, results: Any, stop: Any) -> None:
    """Import and open the device, wait for the work (a picklable callable; unpickling it imports the
    study code) and run it as ``work(index, results, keep_going)``: ``keep_going()`` turns False once
    ``stop`` is set or the parent is gone (an orphan of a killed run). Stopped or orphaned before any
    work: report nothing done. ``setup`` None: an early worker (``start_early_workers``), which
    imports first and then waits for its setup on ``setups``: neither import reads what the setup
    changes (torch leaves Triton, and its ``TRITON_INTERPRET``, to the study code). Where kernels run
    compiled, Triton's import and cache key come meanwhile on a thread (``triton_head_start``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it sets ``stop``
    head_start = triton_head_start(nvidia_driver_present())
    parent = multiprocessing.parent_process()

    def keep_going() -> bool:
        return not stop.is_set() and (parent is None or parent.is_alive())

    if setup is not None:
        _take_environment(setup.environ)
    import optuna  # noqa: F401 -- loaded already where the fork server preloads it
    import torch

    if setup is None:
        setup = _next(setups, keep_going)
        if setup is None:
            results.put((index, "ok", 0))
            return
        _take_environment(setup.environ)
    torch.set_num_threads(setup.threads)
    _open_device(setup.device, index)
    if head_start is not None:
        head_start.join()
    work = _next(inbox, keep_going)
    if work is None:
        results.put((index, "ok", 0))
        return
    work(index, results, keep_going)


def nvidia_driver_present() -> bool:
    """Whether this machine has an NVIDIA driver loaded (the kernels then run compiled by Triton)."""
    return os.path.exists("/proc/driver/nvidia/version")


def triton_head_start(driver_present: bool) -> threading.Thread | None:
    """Import Triton and compute its cache key on a thread of their own, beside the worker's import of
    torch (None without a driver: the CPU runs no compiled kernel). A process needs both at its first
    kernel launch; the key hashes Triton's compiler sources and library (about half a second), mostly
    reading and hashing files, which release the GIL. Importing Triton defines no kernel, so it reads
    nothing of the environment the worker takes later (``_take_environment``)."""
    if not driver_present:
        return None

    def run() -> None:
        with contextlib.suppress(Exception):  # a head start only: the first launch computes what is missing
            from triton.runtime.cache import triton_key

            triton_key()

    thread = threading.Thread(target=run, name="spectune-triton-key", daemon=True)
    thread.start()
    return thread


def _next(source: Any, keep_going: Callable[[], bool]) -> Any:
    """The next item on the queue ``source``; None if ``keep_going()`` turns False first."""
    while keep_going():
        try:
            return source.get(timeout=0.1)
        except queue.Empty:
            pass
    return None


def _open_device(device: str, worker_index: int) -> None:
    """Make this worker's GPU its current device (``worker_device``: a bare ``cuda`` spreads the workers
    over the machine's GPUs) and create its CUDA context now rather than at the first simulation; a
    device that cannot be opened is left for the simulation to report, with the document's field."""
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


_PRELOAD = ["spectune._preload"]  # what the fork server imports once for all its children


def fork_server_pays(workers: int) -> bool:
    """Whether a study with ``workers`` processes takes them from the fork server: where the machine
    has fewer cores than processes would import at once (the workers and the parent), so that spawned
    children would import one after another anyway. With a core each, spawned children import side by
    side, and the first to finish starts the study; one server's imports were slower to the first
    trial on a 16-core GPU machine (6.6-11 s against 6.1-6.2 s)."""
    return workers > 1 and "forkserver" in multiprocessing.get_all_start_methods() and (os.cpu_count() or 1) <= workers


def start_fork_server() -> None:
    """Launch the fork server now (no-op where it runs): it imports ``_PRELOAD`` meanwhile, and the
    first process started from it waits only for what is left. The server and Python's resource
    tracker are launched with SIGINT ignored, which they and the server's children inherit: a Ctrl-C
    cannot kill a process that is still starting."""
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(_PRELOAD)  # read when the server starts
    with sigint_ignored_by_children():
        forkserver.ensure_running()


def _context(workers: int) -> Any:
    """The fork server's context where it pays (``fork_server_pays``), else spawning's."""
    return multiprocessing.get_context("forkserver" if fork_server_pays(workers) else "spawn")


class _Starter:
    """Starts processes: from the fork server (``start_fork_server``) on a thread of its own, as the
    first start waits for the server's imports; spawned ones here, with SIGINT ignored, which they
    inherit (a Ctrl-C while a process is still starting cannot kill it with a traceback)."""

    def __init__(self, context: Any, processes: list[BaseProcess]) -> None:
        self.error: BaseException | None = None
        self.processes = processes
        self.thread: threading.Thread | None = None
        if context.get_start_method() != "forkserver":
            with sigint_ignored_by_children():
                self._start()
            return
        start_fork_server()
        self.thread = threading.Thread(target=self._start, name="spectune-start", daemon=True)
        self.thread.start()

    def _start(self) -> None:
        try:
            for process in self.processes:
                process.start()
        except BaseException as err:  # noqa: BLE001 -- raised in the caller by ``check``
            self.error = err

    def join(self) -> None:
        """Wait until every process is started (or starting failed)."""
        if self.thread is not None:
            self.thread.join()

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"starting the study's processes failed: {self.error}") from self.error


def _take_environment(environ: dict[str, str]) -> None:
    """Make the starter's environment this process's: a forked child has the fork server's, from
    when it started (a child that imports Triton reads ``TRITON_INTERPRET`` from it)."""
    os.environ.clear()
    os.environ.update(environ)

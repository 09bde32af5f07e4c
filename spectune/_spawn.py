"""Study worker processes started before their work is known, so that their start-up overlaps the parent's.

A spawned worker imports torch, Triton and Optuna and opens its device (seconds: about five on a GPU
machine) before it can simulate anything. This module imports none of that, so ``spectune study
run`` can start its workers as soon as it has read the study: they import while the parent imports
the same libraries and prepares the storage, and each then waits for its work (``begin``).
Processes are spawned, not forked: a parent that has asked whether CUDA is there cannot fork a child
that uses it. ``kernel_warm_up`` spawns the study's other helpers: processes that compile its kernels.
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

__all__ = ["StartedWorkers", "kernel_warm_up", "sigint_ignored_by_children", "start_workers", "started_workers"]


@dataclass
class StartedWorkers:
    """Worker processes and their queues: ``inbox`` hands each its work, ``results`` takes (index,
    status, payload) from each, ``stop`` asks them to end their running trial and stop."""

    processes: list[BaseProcess]
    inbox: Any  # multiprocessing Queue
    results: Any  # multiprocessing Queue
    stop: Any  # multiprocessing Event

    def begin(self, work: Callable[[int, Any, Callable[[], bool]], None]) -> None:
        """Hand every worker the same work, run as ``work(index, results, keep_going)`` (pickled once per
        worker; see ``_entry``)."""
        for _ in self.processes:
            self.inbox.put(work)

    def close(self) -> None:
        """Stop every worker still running (given work or not) and wait for it."""
        self.stop.set()
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        for process in self.processes:
            process.join(timeout=10)


def start_workers(count: int, device: str = "cpu") -> StartedWorkers:
    """Spawn ``count`` workers; each imports torch, Triton and Optuna and opens ``device`` (a document's
    ``simulation.device``), then waits for ``begin``. Start them after anything that changes how the
    libraries load (``TRITON_INTERPRET``): they inherit the environment as it is now."""
    context = multiprocessing.get_context("spawn")
    inbox, results, stop = context.Queue(), context.Queue(), context.Event()
    threads = max(1, (os.cpu_count() or 1) // count)
    processes: list[BaseProcess] = [
        context.Process(target=_entry, args=(i, device, threads, inbox, results, stop), daemon=True)
        for i in range(count)
    ]
    with sigint_ignored_by_children():
        for process in processes:
            process.start()
    return StartedWorkers(processes, inbox, results, stop)


@contextlib.contextmanager
def started_workers(count: int, device: str) -> Iterator[StartedWorkers | None]:
    """``start_workers`` when ``count`` > 1 (None for one: the parent is the worker), closed on exit
    whatever happened in between (a study that fails before it begins leaves no process behind)."""
    started = start_workers(count, device) if count > 1 else None
    try:
        yield started
    finally:
        if started is not None:
            started.close()


# Processes that warm up a study's kernels: compiling is CPU work (a core each), and the cores the
# workers leave, at most this many, finish a decision-sized study's variants within its first run.
MAX_WARM_UP_PROCESSES = 4


@contextlib.contextmanager
def kernel_warm_up(evaluator: object, max_members: int, workers: int = 1) -> Iterator[None]:
    """While the block runs, processes of their own compile the kernel variants the study's simulations
    can launch (``evaluator.warm_up(max_members, share)``, where ``evaluator.compiles_kernels()``): off
    the critical path, at low priority, on the cores ``workers`` leave (at least one process); stopped
    at the end, whatever they have compiled stays in Triton's cache."""
    compiles = getattr(evaluator, "compiles_kernels", None)
    if compiles is None or not compiles():
        yield
        return
    count = max(1, min(MAX_WARM_UP_PROCESSES, ((os.cpu_count() or 1) - workers) // 2))
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=_warm_up_entry, args=(evaluator, max_members, (i, count)), daemon=True)
        for i in range(count)
    ]
    with sigint_ignored_by_children():
        for process in processes:
            process.start()
    try:
        yield
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join(timeout=10)


def _warm_up_entry(evaluator: Any, max_members: int, share: tuple[int, int]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
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


def _entry(index: int, device: str, threads: int, inbox: Any, results: Any, stop: Any) -> None:
    """Import and open the device, wait for the work (a picklable callable; unpickling it imports the
    study code) and run it as ``work(index, results, keep_going)``: ``keep_going()`` turns False once
    ``stop`` is set or the parent is gone (an orphan of a killed run). Stopped or orphaned before any
    work: report nothing done. ``threads``: torch's CPU threads (the workers share the cores: each
    with torch's default, one a core, eight workers on 16 cores ran 128 threads)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it sets ``stop``
    import optuna  # noqa: F401 -- with torch and Triton (below), the start-up to overlap
    import torch

    torch.set_num_threads(threads)

    _open_device(device)
    parent = multiprocessing.parent_process()

    def keep_going() -> bool:
        return not stop.is_set() and (parent is None or parent.is_alive())

    while True:
        if not keep_going():
            results.put((index, "ok", 0))
            return
        try:
            work = inbox.get(timeout=0.1)
            break
        except queue.Empty:
            pass
    work(index, results, keep_going)


def _open_device(device: str) -> None:
    """Create the CUDA context now rather than at the first simulation; a device that cannot be opened
    is left for the simulation to report, with the document's field."""
    from spectune.errors import SpectuneError
    from spectune.simulator._backend import resolve_device

    try:
        resolved = resolve_device(device)
        if resolved.type == "cuda":
            import torch

            torch.empty(1, device=resolved)
    except (SpectuneError, RuntimeError, AssertionError):
        pass

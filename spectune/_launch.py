"""The ``spectune`` command's entry point: what must happen before the command-line libraries load.

A ``study run`` with several ``--workers`` starts them here, before Typer, Rich and the document
models load in this process: each worker's imports (torch, Optuna: seconds) then overlap those and
the reading of the study, and it waits for what only the study says (``spectune._spawn``). Where the
machine has a core for each, they are spawned now; where it has not (``fork_server_pays``), the fork
server that imports torch and the study code once for all of them starts now instead. Everything
else goes straight to the command-line app.

Once the command has ended, the process leaves without the interpreter's teardown (``_leave``):
with torch, Triton and CUDA's libraries loaded, tearing down took the better part of a second on a
GPU machine after the study's last line was printed. Everything the command writes is written and
closed by then.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
from typing import NoReturn

from spectune._interrupt import interrupted

__all__ = ["main"]


def main() -> None:
    try:
        workers = _study_run_workers(sys.argv[1:])
        if workers > 1:
            from spectune._spawn import fork_server_pays, start_early_workers, start_fork_server

            if fork_server_pays(workers):
                start_fork_server()
            else:
                start_early_workers(workers)
        from spectune.cli import main as run_app

        try:
            run_app()
            code = 0
        except SystemExit as ended:
            code = _exit_status(ended.code)
    except KeyboardInterrupt:
        # A Ctrl-C while the libraries load (the first second) lands here, outside any command.
        code = interrupted()
    _leave(code)


def _exit_status(code: object) -> int:
    """The exit status ``SystemExit(code)`` stands for (a message goes to stderr, as Python does)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _leave(code: int) -> NoReturn:
    """Exit with ``code`` now: run the exit handlers (logging's flush, ``multiprocessing``'s: it stops
    the children still running and frees their queues' semaphores), flush the streams, and skip the
    interpreter's teardown of the loaded modules. A Ctrl-C now has nothing left to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing left to write to
            stream.flush()
    os._exit(code)


def _study_run_workers(args: list[str]) -> int:
    """The ``--workers`` of a ``study run`` command line (1 for any other command or no usable value,
    one outside ``_spawn.max_workers`` included: the app reports a bad one)."""
    if args[:2] != ["study", "run"]:
        return 1
    for i, arg in enumerate(args):
        if arg == "--workers" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--workers="):
            value = arg.split("=", 1)[1]
        else:
            continue
        if not value.isdigit() or len(value) > 6:  # a huge number is refused by the app, not spawned
            return 1
        from spectune._spawn import workers_error

        return int(value) if workers_error(int(value)) is None else 1
    return 1

"""The ``spectune`` command's entry point: what must happen before the command-line libraries load.

A ``study run`` with several ``--workers`` starts them here, before Typer, Rich and the document
models load in this process: each worker's imports (torch, Optuna: seconds) then overlap those and
the reading of the study, and it waits for what only the study says (``spectune._spawn``). Where the
machine has a core for each, they are spawned now; where it has not (``fork_server_pays``), the fork
server that imports torch and the study code once for all of them starts now instead. Everything
else goes straight to the command-line app.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> None:
    workers = _study_run_workers(sys.argv[1:])
    if workers > 1:
        from spectune._spawn import fork_server_pays, start_early_workers, start_fork_server

        if fork_server_pays(workers):
            start_fork_server()
        else:
            start_early_workers(workers)
    from spectune.cli import main as run_app

    run_app()


def _study_run_workers(args: list[str]) -> int:
    """The ``--workers`` of a ``study run`` command line (1 for any other command or no usable value;
    the app reports a bad one)."""
    if args[:2] != ["study", "run"]:
        return 1
    for i, arg in enumerate(args):
        if arg == "--workers" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--workers="):
            value = arg.split("=", 1)[1]
        else:
            continue
        return int(value) if value.isdigit() else 1
    return 1

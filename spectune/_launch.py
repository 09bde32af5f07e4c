"""The ``spectune`` command's entry point: what must happen before the command-line libraries load.

A ``study run`` with more ``--workers`` than the machine has spare cores gets its workers from a fork
server that imports torch and the study code once (``spectune._spawn.fork_server_pays``); those
imports take seconds, so the server starts here, before Typer, Rich and the document models load in
this process, and imports while they do. Everything else goes straight to the command-line app.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> None:
    workers = _study_run_workers(sys.argv[1:])
    if workers > 1:
        from spectune._spawn import fork_server_pays, start_fork_server

        if fork_server_pays(workers):
            start_fork_server()
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

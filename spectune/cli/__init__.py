"""The ``spectune`` command: a thin Typer layer over the library.

Exit codes: 0 success, 1 a user error (one clear line per problem, never a traceback), 2 a usage
error (Typer's own). Set ``SPECTUNE_DEBUG=1`` to see the traceback of an internal error.
"""

from __future__ import annotations

from spectune.cli._app import app, main

__all__ = ["app", "main"]

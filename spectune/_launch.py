"""The ``spectune`` command's entry point: the app, and a Ctrl-C that lands before any command catches it."""

from __future__ import annotations

import sys

from spectune._interrupt import interrupted

__all__ = ["main"]


def main() -> None:
    try:
        from spectune.cli import main as run_app  # Typer, Rich and the document models: the first second

        run_app()
    except KeyboardInterrupt:
        sys.exit(interrupted())

"""What a Ctrl-C prints, for the entry point and for the commands that catch it themselves."""

from __future__ import annotations

import contextlib
import signal
import sys

__all__ = ["INTERRUPTED", "interrupted"]

INTERRUPTED = "interrupted (Ctrl-C): run the same command to resume"


def interrupted() -> int:
    """Say that Ctrl-C stopped the command, in one line; the exit status for it (128 + SIGINT)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C would interrupt the message or the exit
    with contextlib.suppress(Exception):
        print(INTERRUPTED, file=sys.stderr)
    return 130

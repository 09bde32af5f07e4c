"""The CLI's error boundary: a user error is one line per problem and exit 1, never a traceback."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import typer

from spectune.errors import DocumentError, SpectuneError

__all__ = ["fail", "handle_errors"]

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=1)


def handle_errors(command: F) -> F:
    """Map ``SpectuneError`` to exit 1 with its lines; internal errors to one line (traceback on request)."""

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except DocumentError as err:
            for problem in err.problems:
                typer.echo(str(problem), err=True)
            raise typer.Exit(code=1) from None
        except SpectuneError as err:
            raise fail(str(err)) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as err:  # noqa: BLE001 -- the CLI's last line of defence
            if os.environ.get("SPECTUNE_DEBUG"):
                raise
            raise fail(
                f"internal error: {type(err).__name__}: {err} (a spectune bug; rerun with SPECTUNE_DEBUG=1 "
                "for the traceback and report it)"
            ) from None

    return wrapper  # type: ignore[return-value]

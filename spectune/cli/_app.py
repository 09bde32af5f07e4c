"""The ``spectune`` application: every command, registered here by name (in the order ``--help`` lists them)."""

from __future__ import annotations

import sys

import typer

from spectune.cli._calibrate import calibrate_command
from spectune.cli._export import export
from spectune.cli._simulate import simulate
from spectune.cli._study import repair, run, show
from spectune.cli._validate import schema, validate
from spectune.cli._warm_up import warm_up_command

__all__ = ["app", "main"]

app = typer.Typer(
    name="spectune",
    help="Tune speculative-decoding configs for vLLM and SGLang by simulation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("validate")(validate)
app.command("schema")(schema)
app.command("calibrate")(calibrate_command)
app.command("simulate")(simulate)
app.command("warm-up")(warm_up_command)
app.command("export")(export)

study = typer.Typer(name="study", help="Search speculative configs with Optuna, per batch size.", no_args_is_help=True)
study.command("run")(run)
study.command("show")(show)
study.command("repair")(repair)
app.add_typer(study)


def main() -> None:
    app(prog_name="spectune")
    sys.exit(0)

"""The ``spectune`` application as registered in ``spectune.cli._app``: every command, closed options."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from spectune.cli import app

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_importing_the_cli_registers_every_command():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0, result.output
    for command in ("validate", "schema", "calibrate", "simulate", "warm-up", "export", "study"):
        assert f" {command} " in result.output, command
    study = runner.invoke(app, ["study", "--help"])
    for command in ("run", "show", "repair"):
        assert f" {command} " in study.output, command


@pytest.mark.parametrize(
    ("arguments", "option", "allowed", "given"),
    [
        (
            ["study", "run", str(REPO / "studies" / "quickstart.yaml"), "--sampler", "grid"],
            "--sampler",
            ["'auto'", "'structured'", "'exhaustive'", "'tpe'"],
            "'grid'",
        ),
        (
            ["export", "quickstart", "--vllm-synthetic-form", "old"],
            "--vllm-synthetic-form",
            ["'current'", "'legacy'"],
            "'old'",
        ),
        (
            ["calibrate", str(REPO / "examples" / "logs" / "vllm-eagle3.log"), "--out", "p.yaml", "--format", "csv"],
            "--format",
            ["'vllm-log'", "'vllm-prometheus'", "'vllm-per-request'", "'sglang-log'", "'vllm-bench'"],
            "'csv'",
        ),
    ],
)
def test_a_closed_option_refuses_a_bad_value_before_any_work(arguments, option, allowed, given):
    result = runner.invoke(app, arguments)
    assert result.exit_code == 2, result.output  # a usage error: nothing was loaded or run
    message = " ".join(result.output.replace("│", " ").split())
    assert f"Invalid value for '{option}'" in message and given in message, message
    assert all(choice in message for choice in allowed), message


@pytest.mark.parametrize(
    ("arguments", "choices"), [(["study", "run"], "auto|structured|exha"), (["export"], "current|legacy")]
)
def test_help_shows_the_choices(arguments, choices):
    result = runner.invoke(app, [*arguments, "--help"])
    assert choices in result.output.replace("\n", ""), result.output

"""Constraints that cannot mean anything are refused before a study runs, with the constraint named."""

import pytest
from typer.testing import CliRunner

from spectune.cli import app

runner = CliRunner()


def _with_constraints(text: str, lines: list[str]) -> str:
    return text + "constraints:\n" + "".join(f"- {line}\n" for line in lines)


@pytest.mark.parametrize("command", [("validate",), ("study", "run")])
def test_a_constraint_that_is_not_a_string_says_a_constraint_is_a_string(tmp_path, tiny_study, command):
    document = tmp_path / "tiny.yaml"
    document.write_text(_with_constraints(tiny_study(), ["5"]))
    result = runner.invoke(app, [*command, str(document)])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert "constraints[0]: a constraint is a string like 'tpot_p99_ms <= 50'" in result.output
    assert "got 5" in result.output
    assert "mapping" not in result.output
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("lines", "named"),
    [
        (["tpot_p99_ms <= 1", "tpot_p99_ms >= 100"], ("'tpot_p99_ms <= 1'", "'tpot_p99_ms >= 100'")),
        (["tpot_p99_ms >= 100", "throughput_tokens_per_s >= 1", "tpot_p99_ms <= 99.5"], ("<= 99.5", ">= 100")),
    ],
)
def test_contradictory_constraints_are_refused_naming_both(tmp_path, tiny_study, lines, named):
    document = tmp_path / "tiny.yaml"
    document.write_text(_with_constraints(tiny_study(), lines))
    result = runner.invoke(app, ["study", "run", str(document), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert "tiny.yaml:" in result.output and "contradicts constraints[" in result.output
    for text in named:
        assert text in result.output
    assert not (tmp_path / "out").exists()


def test_bounds_that_meet_at_one_value_are_not_a_contradiction(tmp_path, tiny_study):
    document = tmp_path / "tiny.yaml"
    document.write_text(_with_constraints(tiny_study(), ["tpot_p99_ms <= 50", "tpot_p99_ms >= 50"]))
    result = runner.invoke(app, ["validate", str(document)])
    assert "contradicts" not in result.output, result.output
    assert result.exit_code == 0, result.output


def test_a_study_where_nothing_meets_the_constraints_exits_1_naming_them(tmp_path, tiny_study):
    document = tmp_path / "tiny.yaml"
    document.write_text(_with_constraints(tiny_study(), ["tpot_p99_ms <= 0.000001"]))
    result = runner.invoke(app, ["study", "run", str(document), "--out", str(tmp_path / "out")])
    assert "Traceback" not in result.output
    assert result.exit_code == 1, result.output
    assert "no simulated config meets the constraints 'tpot_p99_ms <= 1e-06' at any batch size" in result.output


def test_an_export_of_a_study_where_nothing_meets_the_constraints_writes_then_exits_1(tmp_path, tiny_study):
    document = tmp_path / "tiny.yaml"
    document.write_text(_with_constraints(tiny_study(), ["tpot_p99_ms <= 0.000001"]))
    runs = tmp_path / "runs"
    ran = runner.invoke(app, ["study", "run", str(document), "--out", str(runs)])
    assert ran.exit_code == 1, ran.output
    out = tmp_path / "exported"
    result = runner.invoke(app, ["export", "tiny", "--storage", str(runs / "study.journal"), "--out", str(out)])
    assert "Traceback" not in result.output
    assert result.exit_code == 1, result.output
    assert "no simulated config meets the constraints 'tpot_p99_ms <= 1e-06' at any batch size" in result.output
    assert f"wrote {out}/" in result.output
    assert (out / "recommended.yaml").is_file()


def test_an_export_of_a_study_that_meets_its_constraints_exits_0(tmp_path, tiny_study):
    document = tmp_path / "tiny.yaml"
    document.write_text(_with_constraints(tiny_study(), ["tpot_p99_ms <= 100000"]))
    runs = tmp_path / "runs"
    assert runner.invoke(app, ["study", "run", str(document), "--out", str(runs)]).exit_code == 0
    result = runner.invoke(
        app, ["export", "tiny", "--storage", str(runs / "study.journal"), "--out", str(tmp_path / "x")]
    )
    assert result.exit_code == 0, result.output
    assert "no simulated config meets" not in result.output

"""Inputs no server can produce are refused at their file and line, through the CLI where users meet them."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from spectune.cli import app

from .synthetic import FIXTURES

runner = CliRunner()

SIMULATION = """kind: simulation
name: floor
speculative: {method: eagle3, num_speculative_tokens: 1}
acceptance: {conditional_rates: [0.7]}
workload: {concurrency: 4, num_requests: 8, prompt_tokens: 16, output_tokens: 24, temperature: 0.0, vocab_size: 256}
hardware: h100-sxm
target_model: llama-3.1-8b
simulation: {bank_rows: 64}
cost_model: {method: measured, step_times: times.csv}
"""


def _simulation_with_times(tmp_path: Path, step_time_ms: str) -> Path:
    rows = ["batch_size,num_speculative_tokens,step_time_ms"]
    rows += [f"{b},{k},{step_time_ms}" for b in (1, 8) for k in (0, 1)]
    (tmp_path / "times.csv").write_text("\n".join(rows) + "\n")
    path = tmp_path / "sim.yaml"
    path.write_text(SIMULATION)
    return path


def test_a_step_time_below_the_physical_floor_is_refused_at_its_line(tmp_path: Path) -> None:
    path = _simulation_with_times(tmp_path, "1e-300")
    result = runner.invoke(app, ["simulate", str(path)])
    assert result.exit_code == 1, result.output
    assert f"{tmp_path / 'times.csv'}:2: column 3 (step_time_ms)" in result.output
    assert "[0.01, 1e+06]" in result.output and "got '1e-300'" in result.output and "Traceback" not in result.output


def test_a_step_time_at_the_floor_is_accepted(tmp_path: Path) -> None:
    assert runner.invoke(app, ["validate", str(_simulation_with_times(tmp_path, "0.01"))]).exit_code == 0


def _per_request(tmp_path: Path, key: str, value: object) -> Path:
    lines = (FIXTURES / "per-request.jsonl").read_text().splitlines()
    record = json.loads(lines[2])
    record["metrics"]["speculative_decoding"][key] = value
    lines[2] = json.dumps(record)
    path = tmp_path / "requests.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_nan_mean_acceptance_length_in_per_request_data_is_refused(tmp_path: Path) -> None:
    path = _per_request(tmp_path, "mean_acceptance_length", float("nan"))
    result = runner.invoke(app, ["calibrate", str(path), "--out", str(tmp_path / "p.yaml")])
    assert result.exit_code == 1, result.output
    assert f"{path}:3: speculative_decoding.mean_acceptance_length: must be a finite number, got nan" in result.output
    assert not (tmp_path / "p.yaml").exists()


def test_a_mean_acceptance_length_that_contradicts_the_histogram_is_refused(tmp_path: Path) -> None:
    path = _per_request(tmp_path, "mean_acceptance_length", 3.9)
    result = runner.invoke(app, ["calibrate", str(path), "--out", str(tmp_path / "p.yaml")])
    assert (
        result.exit_code == 1
        and f"{path}:3: speculative_decoding.mean_acceptance_length: 3.9 contradicts" in result.output
    )


def test_an_infinite_draft_acceptance_rate_is_refused(tmp_path: Path) -> None:
    path = _per_request(tmp_path, "draft_acceptance_rate", float("inf"))
    result = runner.invoke(app, ["calibrate", str(path), "--out", str(tmp_path / "p.yaml")])
    assert result.exit_code == 1 and "draft_acceptance_rate: must be a finite number, got inf" in result.output

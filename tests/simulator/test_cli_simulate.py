"""``spectune simulate`` as a user runs it."""

import json
from pathlib import Path

import torch
from typer.testing import CliRunner

from spectune.cli import app

_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # where the document's device: auto resolves

runner = CliRunner()
DOC = """kind: simulation
name: cli
speculative: {method: eagle3, num_speculative_tokens: 3}
acceptance: {conditional_rates: [0.7]}
workload: {concurrency: 4, num_requests: 8, prompt_tokens: 16, output_tokens: 24, temperature: 0.0, vocab_size: 256}
hardware: h100-sxm
target_model: llama-3.1-8b
simulation: {bank_rows: 64}
"""

REQUIRED = {
    "throughput_tokens_per_s",
    "tpot_p50_ms",
    "tpot_p99_ms",
    "mean_acceptance_length",
    "acceptance_per_position",
    "speedup_vs_no_spec",
    "simulated_steps",
    "wall_time_s",
}


def _write(tmp_path: Path) -> Path:
    path = tmp_path / "sim.yaml"
    path.write_text(DOC)
    return path


def test_json_has_the_documented_fields(tmp_path):
    result = runner.invoke(app, ["simulate", str(_write(tmp_path)), "--json"])
    assert result.exit_code == 0, result.output
    values = json.loads(result.output)
    assert REQUIRED <= values.keys()
    assert len(values["acceptance_per_position"]) == 3
    assert values["speedup_vs_no_spec"] > 1.0


def test_set_overrides_a_field_for_a_what_if_run(tmp_path):
    result = runner.invoke(
        app, ["simulate", str(_write(tmp_path)), "--json", "--set", "speculative.num_speculative_tokens=5"]
    )
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.output)["acceptance_per_position"]) == 5


def test_bad_override_is_one_clear_line_and_exit_1(tmp_path):
    result = runner.invoke(app, ["simulate", str(_write(tmp_path)), "--set", "speculative.num_speculative_tokens=0"])
    assert result.exit_code == 1
    assert result.output.strip() == (
        "--set speculative.num_speculative_tokens=0: speculative.num_speculative_tokens: must be >= 1, got 0"
    )


def test_table_output_names_the_headline_numbers(tmp_path):
    result = runner.invoke(app, ["simulate", str(_write(tmp_path)), "--no-baseline"])
    assert result.exit_code == 0, result.output
    for label in ("throughput", "TPOT p50 / p99", "acceptance length", "simulated"):
        assert label in result.output


def test_wrong_kind_is_refused(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("method: eagle3\nnum_speculative_tokens: 3\n")
    result = runner.invoke(app, ["simulate", str(path)])
    assert result.exit_code == 1 and "expected a simulation document here, got 'speculative'" in result.output


def test_measured_table_fit_is_reported(tmp_path):
    rows = ["batch_size,num_speculative_tokens,step_time_ms"]
    rows += [f"{b},{k},{5 + 0.1 * b + k * (1 + 0.01 * b)}" for b in (1, 8, 32, 64) for k in (0, 3)]
    (tmp_path / "times.csv").write_text("\n".join(rows) + "\n")
    path = tmp_path / "sim.yaml"
    path.write_text(DOC + "cost_model: {method: measured, step_times: times.csv}\n")
    result = runner.invoke(app, ["simulate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    fit = json.loads(result.output)["step_time_fit"]
    assert fit.startswith("leave-one-out over ") and "mean relative error" in fit
    table = runner.invoke(app, ["simulate", str(path), "--no-baseline"])
    assert "measured step-time table, leave-one-out" in table.output


def test_speculation_off_validates_and_simulates_as_plain_decoding(tmp_path):
    path = tmp_path / "plain.yaml"
    path.write_text(
        DOC.replace("speculative: {method: eagle3, num_speculative_tokens: 3}", "speculative: null").replace(
            "acceptance: {conditional_rates: [0.7]}\n", ""
        )
    )
    checked = runner.invoke(app, ["validate", str(path)])
    assert checked.exit_code == 0 and "1 valid" in checked.output, checked.output
    table = runner.invoke(app, ["simulate", str(path), "--no-baseline"])
    assert table.exit_code == 0 and "cli: no speculation · Llama-3.1-8B" in table.output.replace("\n", " "), (
        table.output
    )
    assert "acceptance length" not in table.output
    values = json.loads(runner.invoke(app, ["simulate", str(path), "--json"]).output)
    assert (values["num_drafts"], values["mean_acceptance_length"], values["speedup_vs_no_spec"]) == (0, None, 1.0)


def test_the_engine_option_is_a_document_field_that_keeps_the_numbers(tmp_path):
    """``simulation.engine`` chooses how the kernels verify, never the numbers."""
    path = _write(tmp_path)
    numbers = []
    for engine in ("auto", "step"):
        result = runner.invoke(app, ["simulate", str(path), "--json", "--set", f"simulation.engine={engine}"])
        assert result.exit_code == 0, result.output
        values = json.loads(result.output)
        numbers.append({k: v for k, v in values.items() if not k.endswith("wall_time_s")})
    assert numbers[0] == numbers[1] and numbers[0]["mean_acceptance_length"] > 1


def test_verifying_ahead_where_it_cannot_run_is_one_clear_line_and_exit_1(tmp_path):
    result = runner.invoke(
        app,
        [
            "simulate",
            str(_write(tmp_path)),
            "--set",
            "simulation.engine=ahead",
            "--set",
            "simulation.kernel_backend=reference",
        ],
    )
    assert result.exit_code == 1
    assert result.output.strip() == (
        "error: simulation.engine: 'ahead' verifies with the Triton kernels from counter-based draws, but "
        f"kernel_backend resolves to 'reference' on {_DEVICE}: use engine: auto or step"
    )


def test_an_unknown_engine_names_the_choices(tmp_path):
    result = runner.invoke(app, ["simulate", str(_write(tmp_path)), "--set", "simulation.engine=fast"])
    assert result.exit_code == 1
    assert result.output.strip() == (
        "--set simulation.engine=fast: simulation.engine: must be one of 'auto', 'step', 'ahead', got 'fast'"
    )

"""``spectune calibrate`` end to end: the profile it writes validates, the summary, and clean errors."""

import pytest
import yaml
from typer.testing import CliRunner

from spectune.cli import app
from spectune.config import load_document

from . import synthetic
from .synthetic import EXAMPLE_LOG, FIXTURES

runner = CliRunner()


def test_example_log_gives_a_profile_that_validates(tmp_path):
    out = tmp_path / "profile.yaml"
    result = runner.invoke(
        app, ["calibrate", str(EXAMPLE_LOG), "--out", str(out), "--name", "llama-eagle3", "--method", "eagle3"]
    )
    assert result.exit_code == 0, result.output
    validated = runner.invoke(app, ["validate", str(out)])
    assert validated.exit_code == 0 and "1 valid, 0 invalid (0 errors, 0 warnings)" in validated.output
    profile = load_document(out, expect="acceptance_profile").model
    truth = synthetic.example_log()
    assert profile.name == "llama-eagle3" and profile.method == "eagle3"
    assert profile.conditional_rates == pytest.approx(truth.conditional(), abs=2e-3)
    assert [(b.min_running, b.max_running) for b in profile.bins] == [(1, 1), (4, 4), (16, 16), (64, 64)]
    assert profile.counts.num_drafts == truth.pooled()[0]
    assert profile.unconditional_rates_measured == pytest.approx(profile.unconditional(), abs=1e-5)


def test_summary_shows_windows_k_rates_length_and_bins(tmp_path):
    out = tmp_path / "profile.yaml"
    result = runner.invoke(app, ["calibrate", str(EXAMPLE_LOG), "--out", str(out)])
    text = result.output
    assert "vllm-log: 32 windows from 1 file(s), K=3" in text
    assert "conditional ± s.e." in text and "unconditional ± s.e." in text
    assert "mean acceptance length:" in text and "rounding of the logged rates" in text
    assert "By running requests" in text
    assert f"wrote {out}" in text
    profile = load_document(out).model
    assert f"{profile.conditional_rates[0]:.4f} ± {profile.conditional_rates_stderr[0]:.4f}" in text


def test_profile_yaml_reads_top_down(tmp_path):
    out = tmp_path / "profile.yaml"
    runner.invoke(app, ["calibrate", str(FIXTURES / "per-request.jsonl"), "-o", str(out)])
    text = out.read_text()
    assert text.startswith("# Written by 'spectune calibrate'")
    keys = list(yaml.safe_load(text))
    assert keys[:3] == ["kind", "name", "source"] and keys.index("conditional_rates") < keys.index("counts")
    assert yaml.safe_load(text)["name"] == "per-request"


def test_bad_input_is_one_line_and_exit_1(tmp_path):
    out = tmp_path / "profile.yaml"
    result = runner.invoke(app, ["calibrate", str(FIXTURES / "vllm-k-changes.log"), "--out", str(out)])
    assert result.exit_code == 1
    assert "K changed between windows" in result.output and "Traceback" not in result.output
    assert not out.exists()


def test_mixed_formats_are_refused(tmp_path):
    result = runner.invoke(
        app, ["calibrate", str(EXAMPLE_LOG), str(FIXTURES / "sglang.log"), "--out", str(tmp_path / "p.yaml")]
    )
    assert result.exit_code == 1
    assert "different formats" in result.output and "sglang-log" in result.output


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--bin-edges", "4,2"], "--bin-edges must be increasing whole numbers >= 0, got 4,2"),
        (["--bin-edges", "1,x"], "--bin-edges must be whole numbers separated by commas, got '1,x'"),
        (["-k", "0"], "--num-speculative-tokens must be in [1, 64], got 0"),
    ],
)
def test_bad_options_name_the_option(tmp_path, arguments, message):
    result = runner.invoke(app, ["calibrate", str(EXAMPLE_LOG), "--out", str(tmp_path / "p.yaml"), *arguments])
    assert result.exit_code == 1
    assert f"error: {message}" in result.output


def test_forced_format_reads_a_file_detection_would_also_pick(tmp_path):
    out = tmp_path / "p.yaml"
    result = runner.invoke(
        app, ["calibrate", str(FIXTURES / "sglang.log"), "--format", "sglang-log", "-o", str(out), "--no-bins"]
    )
    assert result.exit_code == 0, result.output
    assert "only the mean acceptance length was measured" in result.output
    assert "bins" not in yaml.safe_load(out.read_text())


def test_skipped_lines_are_reported_as_warnings(tmp_path):
    path = tmp_path / "server.log"
    lines = EXAMPLE_LOG.read_text().splitlines()
    spec = next(i for i, line in enumerate(lines) if "SpecDecoding" in line)
    lines.insert(spec + 1, lines[spec][: lines[spec].index("Per-position") + 40])
    path.write_text("\n".join(lines) + "\n")
    result = runner.invoke(app, ["calibrate", str(path), "-o", str(tmp_path / "p.yaml")])
    assert result.exit_code == 0, result.output
    assert f"{path}:{spec + 2}: warning: Per-position acceptance rate: line skipped:" in result.output
    assert "1 line(s) skipped" in result.output

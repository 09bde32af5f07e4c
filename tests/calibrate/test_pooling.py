"""``spectune calibrate`` pools only what belongs together: one server per log, each input once."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from spectune.cli import app
from spectune.config import load_document

from . import synthetic

runner = CliRunner()

FAST_RATES = (0.72, 0.68, 0.64)
SLOW_RATES = (0.40, 0.32, 0.28)


def _server_logs(style: str) -> tuple[synthetic.SyntheticSource, synthetic.SyntheticSource]:
    rng = np.random.default_rng(41)
    sources = []
    for rates in (FAST_RATES, SLOW_RATES):
        windows = [synthetic.draw_window(rng, rates, int(rng.integers(400, 2000)), 8) for _ in range(10)]
        sources.append(synthetic.SyntheticSource(synthetic.vllm_log(windows, rng, style=style), windows))
    return sources[0], sources[1]


def _interleaved(first: str, second: str) -> str:
    """Line by line, as ``docker compose logs`` (or one file two processes append to) mixes them."""
    a, b = first.splitlines(), second.splitlines()
    mixed = [line for pair in zip(a, b, strict=False) for line in pair]
    longer = a if len(a) > len(b) else b
    return "\n".join(mixed + longer[min(len(a), len(b)) :]) + "\n"


def _two_compose_services(tmp_path: Path) -> tuple[Path, synthetic.SyntheticSource, synthetic.SyntheticSource]:
    fast, slow = _server_logs("compose")
    log = tmp_path / "compose.log"
    log.write_text(_interleaved(fast.text, slow.text.replace("vllm-1  |", "vllm-2  |")))
    return log, fast, slow


def test_interleaved_compose_services_are_refused_naming_both(tmp_path: Path) -> None:
    log, _, _ = _two_compose_services(tmp_path)
    result = runner.invoke(app, ["calibrate", str(log), "--out", str(tmp_path / "p.yaml")])
    assert result.exit_code == 1, result.output
    assert "interleaves 2 servers" in result.output and "'vllm-1'" in result.output and "'vllm-2'" in result.output
    assert "10 windows" in result.output and "--server" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "p.yaml").exists()


def test_server_option_calibrates_one_service_exactly(tmp_path: Path) -> None:
    log, fast, slow = _two_compose_services(tmp_path)
    for label, truth in (("vllm-1", fast), ("vllm-2", slow)):
        out = tmp_path / f"{label}.yaml"
        result = runner.invoke(app, ["calibrate", str(log), "--server", label, "--out", str(out)])
        assert result.exit_code == 0, result.output
        profile = load_document(out, expect="acceptance_profile").model
        assert profile.counts.num_drafts == truth.pooled()[0]
        assert profile.conditional_rates == pytest.approx(truth.conditional(), abs=2e-3)


def test_two_processes_logging_at_once_are_told_apart_by_pid(tmp_path: Path) -> None:
    fast, slow = _server_logs("plain")
    log = tmp_path / "host.log"
    log.write_text(_interleaved(fast.text, slow.text.replace("(APIServer pid=1)", "(APIServer pid=4242)")))
    refused = runner.invoke(app, ["calibrate", str(log), "--out", str(tmp_path / "p.yaml")])
    assert refused.exit_code == 1 and "'pid=1'" in refused.output and "'pid=4242'" in refused.output
    out = tmp_path / "slow.yaml"
    chosen = runner.invoke(app, ["calibrate", str(log), "--server", "pid=4242", "--out", str(out)])
    assert chosen.exit_code == 0, chosen.output
    assert load_document(out).model.counts.num_drafts == slow.pooled()[0]


def test_a_restart_under_a_new_pid_is_one_server(tmp_path: Path) -> None:
    fast, again = _server_logs("plain")
    log = tmp_path / "restarted.log"
    log.write_text(fast.text + again.text.replace("(APIServer pid=1)", "(APIServer pid=77)"))
    result = runner.invoke(app, ["calibrate", str(log), "--out", str(tmp_path / "p.yaml")])
    assert result.exit_code == 0, result.output
    assert "vllm-log: 20 windows from 1 file(s)" in result.output


def test_an_unknown_server_label_lists_those_found(tmp_path: Path) -> None:
    log, _, _ = _two_compose_services(tmp_path)
    result = runner.invoke(app, ["calibrate", str(log), "--server", "vllm-3", "--out", str(tmp_path / "p.yaml")])
    assert result.exit_code == 1 and "no server 'vllm-3'" in result.output and "'vllm-2'" in result.output


def test_the_same_file_twice_is_counted_once_and_said(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(synthetic.example_log().text)
    once, twice = tmp_path / "once.yaml", tmp_path / "twice.yaml"
    assert runner.invoke(app, ["calibrate", str(log), "--out", str(once)]).exit_code == 0
    result = runner.invoke(app, ["calibrate", str(log), str(tmp_path / "." / "server.log"), "--out", str(twice)])
    assert result.exit_code == 0, result.output
    assert "not read, same file as" in result.output and "32 windows from 1 file(s)" in result.output
    assert load_document(twice).model.counts == load_document(once).model.counts
    assert load_document(twice).model.conditional_rates_stderr == load_document(once).model.conditional_rates_stderr


def test_a_copy_with_the_same_content_is_counted_once(tmp_path: Path) -> None:
    results = tmp_path / "results"
    (results / "backup").mkdir(parents=True)
    runs = sorted((Path(synthetic.__file__).parents[2] / "examples" / "bench" / "results").rglob("*.json"))
    for run in runs:
        (results / run.name).write_text(run.read_text())
    (results / "backup" / runs[5].name).write_text(runs[5].read_text())
    result = runner.invoke(app, ["calibrate", str(results), "--out", str(tmp_path / "p.yaml")])
    assert result.exit_code == 0, result.output
    copies = {str(results / runs[5].name), str(results / "backup" / runs[5].name)}
    warning = next(line for line in result.output.splitlines() if "not read, same content as" in line)
    assert {warning.split(": warning:")[0], warning.split("same content as ")[1].split(" (")[0]} == copies
    assert f"vllm-bench: {len(runs)} runs" in result.output


def _relabelled_results(tmp_path: Path, field: str, by_folder: dict[str, object]) -> Path:
    """The example bench results, with ``field`` set in the runs of the named K folders."""
    source = Path(synthetic.__file__).parents[2] / "examples" / "bench" / "results"
    results = tmp_path / "results"
    for run in sorted(source.rglob("*.json")):
        data = json.loads(run.read_text())
        if run.parent.name in by_folder:
            data[field] = by_folder[run.parent.name]
        (results / run.parent.name).mkdir(parents=True, exist_ok=True)
        (results / run.parent.name / run.name).write_text(json.dumps(data))
    return results


def test_bench_runs_of_different_models_are_refused_naming_their_files(tmp_path: Path) -> None:
    results = _relabelled_results(tmp_path, "model_id", {"k0": "Qwen/Qwen3-8B", "k1": "meta-llama/Llama-3.1-70B"})
    result = runner.invoke(app, ["calibrate", str(results), "--out", str(tmp_path / "p.yaml")])
    assert result.exit_code == 1, result.output
    assert "runs of 3 models" in result.output and "'Qwen/Qwen3-8B': 4 run(s)" in result.output
    assert str(results / "k0" / "k0-c1.json") in result.output and "--model MODEL_ID" in result.output
    assert not (tmp_path / "step-times.csv").exists()


def test_bench_model_option_keeps_that_models_runs_only(tmp_path: Path) -> None:
    results = _relabelled_results(tmp_path, "model_id", {"k0": "Qwen/Qwen3-8B", "k1": "meta-llama/Llama-3.1-70B"})
    out = tmp_path / "p.yaml"
    result = runner.invoke(app, ["calibrate", str(results), "--model", "synthetic", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "vllm-bench: 16 runs, K in {2, 4, 5, 6}" in result.output
    table = (tmp_path / "step-times.csv").read_text()
    assert "/k0/" not in table and "/k1/" not in table and "/k2/" in table


def test_bench_runs_at_different_temperatures_are_refused_or_chosen(tmp_path: Path) -> None:
    results = _relabelled_results(tmp_path, "temperature", {"k5": 1.0, "k6": 0.0})
    refused = runner.invoke(app, ["calibrate", str(results), "--out", str(tmp_path / "p.yaml")])
    assert (
        refused.exit_code == 1
        and "mix 2 temperatures" in refused.output
        and "temperature 1: 4 run(s)" in refused.output
    )
    chosen = runner.invoke(app, ["calibrate", str(results), "--temperature", "0", "--out", str(tmp_path / "p.yaml")])
    assert chosen.exit_code == 0, chosen.output
    assert "K in {0, 1, 2, 4, 6}" in chosen.output
    missing = runner.invoke(app, ["calibrate", str(results), "--temperature", "0.7", "--out", str(tmp_path / "q.yaml")])
    assert missing.exit_code == 1 and "no run was measured at 0.7" in missing.output

"""measure.sh: valid bash, only documented vLLM flags, the right K and concurrencies, and it closes the loop."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from study_doubles import SyntheticEvaluator, fingerprint, make_space
from typer.testing import CliRunner

from spectune.cli import app
from spectune.config import SpeculativeConfig
from spectune.export import write_artefacts
from spectune.export._measure import VLLM_BENCH_SERVE_FLAGS, VLLM_SERVE_FLAGS, forced_ks, measure_script, measurement_ks
from spectune.study import load_outcome, run_study

REPO = Path(__file__).parents[2]
CONTEXT = {
    "target_model": "Llama-3.1-8B",
    "tensor_parallel_size": 1,
    "prompt_tokens": 100.0,
    "output_tokens": 64.0,
    "temperatures": [0.0],
    "max_num_seqs": 256,
    "candidates": {},
}


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory):
    space = dataclasses.replace(make_space(batch_sizes=(1, 8, 64), max_k=5), context=CONTEXT)
    storage = str(tmp_path_factory.mktemp("study") / "study.journal")
    run_study(space, SyntheticEvaluator(), fingerprint(), storage=storage, strategy="exhaustive")
    return load_outcome(storage, space.name)


def _documented_flags(command: str) -> set[str]:
    """The flags docs/calibration.md lists, with their source, for ``vllm serve`` or ``vllm bench serve``."""
    for line in (REPO / "docs" / "calibration.md").read_text().splitlines():
        if line.startswith(f"| `{command}` |"):
            return set(re.findall(r"`(--[a-z0-9-]+)`", line))
    raise AssertionError(f"docs/calibration.md has no row for {command}")


def _function_body(script: str, name: str) -> str:
    match = re.search(rf"^{name}\(\) {{.*?^}}", script, re.S | re.M)
    assert match, name
    return match.group(0)


def test_script_is_valid_bash(outcome, tmp_path: Path) -> None:
    path = tmp_path / "measure.sh"
    path.write_text(measure_script(outcome))
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_script_names_only_documented_vllm_flags(outcome) -> None:
    script = measure_script(outcome)
    serve_flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", _function_body(script, "serve")))
    bench_flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", _function_body(script, "bench")))
    assert serve_flags == set(VLLM_SERVE_FLAGS) and serve_flags <= _documented_flags("vllm serve")
    assert bench_flags == set(VLLM_BENCH_SERVE_FLAGS) and bench_flags <= _documented_flags("vllm bench serve")
    sweep_flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", _function_body(script, "sweep_command")))
    assert sweep_flags <= _documented_flags("vllm bench sweep serve") | serve_flags | bench_flags
    outside = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    for name in ("serve", "bench", "stop", "sweep_command"):
        outside = outside.replace(_function_body(script, name), "")
    assert not re.search(r"\bvllm\b", outside), "vllm is called only through the serve and bench functions"


def _served(script: str, function: str) -> dict[int, tuple[int, dict | None]]:
    """K -> (global K argument, speculative config) for each ``serve`` line of a measure function."""
    served = {}
    for line in _function_body(script, function).splitlines():
        words = shlex.split(line)
        if words[:1] == ["serve"]:
            served[int(words[1][1:])] = (int(words[2]), json.loads(words[4]) if len(words) > 4 else None)
    return served


def test_plain_k0_serves_the_schedule_k_their_neighbours_and_k0_without_a_drafter(outcome) -> None:
    recommendation = outcome.recommendation
    schedule_ks = {k for _, _, k in recommendation.schedule if k > 0}
    expected = {0} | {n for k in schedule_ks for n in (k - 1, k, k + 1) if n >= 1}
    assert set(measurement_ks(recommendation)) == expected
    script = measure_script(outcome)
    served = _served(script, "measure_plain_k0")
    assert set(served) == expected and served[0] == (0, None)
    for k, (_, config) in served.items():
        if k == 0:
            continue
        SpeculativeConfig.model_validate(config, context={"notices": []})
        assert config["num_speculative_tokens"] == k and config["rejection_sample_method"] == "synthetic"
        assert "num_speculative_tokens_per_batch_size" not in config
        assert len(config["synthetic_acceptance_rates"]) == k
        evaluation = outcome.completed.get(recommendation.space.point(8, recommendation.combo.label, k))
        if evaluation is not None:  # simulated at this K: its rates, as the simulation measured them
            assert config["synthetic_acceptance_rates"] == [
                round(r, 4) for r in evaluation.metrics.acceptance_per_position
            ]
    assert "--random-input-len 100 --random-output-len 64" in script
    assert re.search(r"^# Estimated GPU time: about \d+ min", script, re.M)
    assert re.search(r"^# \(--plain-k0: about \d+ min, 6 server starts\.\)", script, re.M)


def test_as_served_forces_each_candidate_under_the_tables_maximum_k(outcome) -> None:
    recommendation = outcome.recommendation
    top = max(k for _, _, k in recommendation.schedule)
    script = measure_script(outcome)
    served = _served(script, "measure_as_served")
    assert set(served) == set(forced_ks(recommendation)) == {k for k in measurement_ks(recommendation) if k <= top}
    for k, (global_k, config) in served.items():
        assert global_k == top and config is not None  # K = 0 too: the drafter is loaded
        SpeculativeConfig.model_validate(config, context={"notices": []})
        assert config["num_speculative_tokens"] == top
        assert config["num_speculative_tokens_per_batch_size"] == [[1, CONTEXT["max_num_seqs"], k]]
        assert len(config["synthetic_acceptance_rates"]) == top


def test_study_artefacts_include_measure_sh(outcome, tmp_path: Path) -> None:
    written = write_artefacts(outcome, tmp_path).written
    assert tmp_path / "measure.sh" in written


def _run(outcome, tmp_path: Path, *args: str, repeats: str | None = None) -> tuple[subprocess.CompletedProcess, list]:
    """Run measure.sh with tests/export/fake_vllm.py as ``vllm``; the commands it ran, one argument list each."""
    shims = tmp_path / "bin"
    subprocess.run([sys.executable, str(Path(__file__).parent / "fake_vllm.py"), "--install", str(shims)], check=True)
    script = tmp_path / "measure.sh"
    script.write_text(measure_script(outcome))
    log = tmp_path / "vllm-commands.jsonl"
    env = (
        os.environ
        | {
            "PATH": f"{shims}:{os.environ['PATH']}",
            "FAKE_VLLM_STATE": str(tmp_path / "state.json"),
            "FAKE_VLLM_LOG": str(log),
            "TARGET": "org/model",
            "HEALTH_POLL_S": "0.2",
        }
        | ({"REPEATS": repeats} if repeats is not None else {})
    )
    done = subprocess.run(
        ["bash", str(script), *args, str(tmp_path / "results")], env=env, timeout=300, capture_output=True, text=True
    )
    commands = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return done, commands


def _option(command: list[str], name: str) -> str | None:
    return command[command.index(name) + 1] if name in command else None


def test_the_script_runs_the_forcing_protocol_and_calibrate_reads_it(outcome, tmp_path: Path) -> None:
    """A fake vllm records the commands: one server per candidate, all with the same global K and the K = 0
    candidate with its drafter loaded and the table [[1, 256, 0]]; only the concurrency varies between bench runs."""
    done, commands = _run(outcome, tmp_path)
    assert done.returncode == 0, done.stderr
    top = max(k for _, _, k in outcome.recommendation.schedule)
    serves = [json.loads(_option(c, "--speculative-config") or "null") for c in commands if c[0] == "serve"]
    assert [s["num_speculative_tokens_per_batch_size"][0][2] for s in serves] == forced_ks(outcome.recommendation)
    assert {s["num_speculative_tokens"] for s in serves} == {top}
    k0 = serves[0]
    assert k0["num_speculative_tokens_per_batch_size"] == [[1, 256, 0]] and k0["method"] == "eagle3" and k0["model"]
    benches = [c for c in commands if c[:2] == ["bench", "serve"]]
    measured = [c for c in benches if "spectune_run=warmup" not in c]
    assert len(measured) == 3 * 3 * len(serves) and len(benches) - len(measured) == len(serves)
    varying = {"--max-concurrency", "--num-prompts", "--result-dir", "--result-filename", "--metadata"}

    def fixed(command: list[str]) -> list[str]:
        kept, skip = [], False
        for word in command:
            if skip and not word.startswith("--"):
                continue
            skip = word in varying
            if not skip:
                kept.append(word)
        return kept

    assert len({tuple(fixed(c)) for c in measured}) == 1, "only the concurrency (and where results go) varies"
    assert {int(_option(c, "--max-concurrency")) for c in measured} == {1, 8, 64}
    out = tmp_path / "calibrated" / "profile.yaml"
    result = CliRunner().invoke(app, ["calibrate", str(tmp_path / "results" / "as-served"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [line.split(",") for line in (out.parent / "step-times.csv").read_text().splitlines() if line[:1].isdigit()]
    assert {(int(r[3]), int(r[1])) for r in rows} == {
        (c, k) for c in (1, 8, 64) for k in forced_ks(outcome.recommendation)
    }
    assert "skipped: an unmeasured warm-up run" in result.output


def test_plain_k0_mode_serves_k0_without_a_drafter(outcome, tmp_path: Path) -> None:
    done, commands = _run(outcome, tmp_path, "--plain-k0")
    assert done.returncode == 0, done.stderr
    serves = [c for c in commands if c[0] == "serve"]
    assert "--speculative-config" not in serves[0]
    configs = [json.loads(_option(c, "--speculative-config")) for c in serves[1:]]
    assert [c["num_speculative_tokens"] for c in configs] == measurement_ks(outcome.recommendation)[1:]
    assert all("num_speculative_tokens_per_batch_size" not in c for c in configs)
    assert (tmp_path / "results" / "plain-k0" / "k0" / "c8" / "run=3.json").is_file()
    out = tmp_path / "plain" / "profile.yaml"
    result = CliRunner().invoke(app, ["calibrate", str(tmp_path / "results" / "plain-k0"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [line.split(",") for line in (out.parent / "step-times.csv").read_text().splitlines() if line[:1].isdigit()]
    assert {int(r[1]) for r in rows} == set(measurement_ks(outcome.recommendation))


def test_sweep_params_mode_writes_vllm_bench_sweep_files_and_runs_nothing(outcome, tmp_path: Path) -> None:
    done, commands = _run(outcome, tmp_path, "--sweep-params")
    assert done.returncode == 0, done.stderr
    assert commands == []
    serve_params = json.loads((tmp_path / "results" / "serve_params.json").read_text())
    bench_params = json.loads((tmp_path / "results" / "bench_params.json").read_text())
    top = max(k for _, _, k in outcome.recommendation.schedule)
    assert list(serve_params) == [f"k{k}" for k in forced_ks(outcome.recommendation)]
    for name, params in serve_params.items():
        config = params["speculative_config"]
        assert config["num_speculative_tokens"] == top
        assert config["num_speculative_tokens_per_batch_size"] == [[1, 256, int(name[1:])]]
    assert bench_params == {f"c{c}": {"max_concurrency": c, "num_prompts": max(4 * c, 32)} for c in (1, 8, 64)}
    assert "vllm bench sweep serve --serve-cmd 'vllm serve org/model" in done.stdout
    assert "--num-runs 3" in done.stdout


def test_fewer_than_three_repeats_are_refused(outcome, tmp_path: Path) -> None:
    done, commands = _run(outcome, tmp_path, repeats="2")
    assert done.returncode == 2 and commands == []
    assert "REPEATS must be a whole number >= 3" in done.stderr

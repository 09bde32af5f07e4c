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

from spectune.calibrate import calibrate
from spectune.config import SpeculativeConfig
from spectune.export import VLLM_BENCH_SERVE_FLAGS, VLLM_SERVE_FLAGS, measure_script, measurement_ks, write_artefacts
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
    outside = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    for name in ("serve", "bench", "stop"):
        outside = outside.replace(_function_body(script, name), "")
    assert not re.search(r"\bvllm\b", outside), "vllm is called only through the serve and bench functions"


def test_script_serves_the_schedule_k_their_neighbours_and_k0_at_every_bucket(outcome) -> None:
    recommendation = outcome.recommendation
    schedule_ks = {k for _, _, k in recommendation.schedule if k > 0}
    expected = {0} | {n for k in schedule_ks for n in (k - 1, k, k + 1) if n >= 1}
    assert set(measurement_ks(recommendation)) == expected
    script = measure_script(outcome)
    served = {}
    for line in script.splitlines():
        if line.startswith("serve "):
            words = shlex.split(line)
            served[int(words[1])] = json.loads(words[2]) if len(words) > 2 else None
    assert set(served) == expected and served[0] is None
    for k, config in served.items():
        if k == 0:
            continue
        SpeculativeConfig.model_validate(config, context={"notices": []})
        assert config["num_speculative_tokens"] == k and config["rejection_sample_method"] == "synthetic"
        assert len(config["synthetic_acceptance_rates"]) == k
        evaluation = outcome.completed.get(recommendation.space.point(8, recommendation.combo.label, k))
        if evaluation is not None:  # simulated at this K: its rates, as the simulation measured them
            assert config["synthetic_acceptance_rates"] == [
                round(r, 4) for r in evaluation.metrics.acceptance_per_position
            ]
        assert {f"bench {k} {b}" for b in (1, 8, 64)} <= {" ".join(line.split()[:3]) for line in script.splitlines()}
    assert "--random-input-len 100 --random-output-len 64" in script
    assert re.search(r"^# Estimated GPU time: about \d+ min", script, re.M)


def test_study_artefacts_include_measure_sh(outcome, tmp_path: Path) -> None:
    written = write_artefacts(outcome, tmp_path).written
    assert tmp_path / "measure.sh" in written


def test_the_script_runs_and_calibrate_reads_what_it_leaves(outcome, tmp_path: Path) -> None:
    """With a stand-in vllm (tests/calibrate/fake_vllm.py) the script's results are what calibrate expects."""
    shims = tmp_path / "bin"
    subprocess.run(
        [sys.executable, str(REPO / "tests" / "calibrate" / "fake_vllm.py"), "--install", str(shims)], check=True
    )
    script = tmp_path / "measure.sh"
    script.write_text(measure_script(outcome))
    env = os.environ | {
        "PATH": f"{shims}:{os.environ['PATH']}",
        "FAKE_VLLM_STATE": str(tmp_path / "state.json"),
        "TARGET": "org/model",
        "HEALTH_POLL_S": "0.2",
    }
    subprocess.run(
        ["bash", str(script), str(tmp_path / "results")], check=True, env=env, timeout=300, capture_output=True
    )
    calibration = calibrate([tmp_path / "results"])
    ks = measurement_ks(outcome.recommendation)
    assert {(p.concurrency, p.num_speculative_tokens) for p in calibration.bench.points} == {
        (b, k) for b in (1, 8, 64) for k in ks
    }
    assert calibration.num_positions == max(ks)

"""The roofline fitted to a server log's engine lines recovers planted efficiency parameters."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from spectune.calibrate import read_engine_log
from spectune.cli import app
from spectune.config import CostModelConfig, HardwareConfig, TargetModelSpec, default_drafter
from spectune.cost import StepSample, build_cost_model, fit_roofline
from spectune.errors import DocumentError, SpectuneError

from .engine_log_synthetic import KV_CACHE_TOKENS, engine_log, planted_roofline, varied_windows

HARDWARE = HardwareConfig.model_validate("h100-sxm")
TARGET = TargetModelSpec.model_validate("llama-3.1-8b")
EAGLE = default_drafter("eagle3", TARGET)
SIMULATION = Path(__file__).parents[2] / "configs" / "simulations" / "llama-3.1-8b-eagle3-h100.yaml"


def _steps(path: Path) -> list[StepSample]:
    log = read_engine_log(path)
    return [
        StepSample(w.num_running, w.num_speculative_tokens, w.context_tokens, w.step_time_s, f"{w.file}:{w.line}")
        for w in log.windows
    ]


@pytest.mark.parametrize(("fraction", "overhead_s", "k"), [(0.62, 1.8e-3, 3), (0.9, 0.4e-3, 5), (0.45, 3.0e-3, 0)])
def test_fit_recovers_planted_parameters_within_5_percent(
    tmp_path: Path, fraction: float, overhead_s: float, k: int
) -> None:
    path = tmp_path / "server.log"
    path.write_text(engine_log(planted_roofline(HARDWARE, TARGET, EAGLE, fraction, overhead_s), varied_windows(k)))
    fit = fit_roofline(_steps(path), HARDWARE, TARGET, EAGLE)
    assert fit.achievable_bandwidth_fraction == pytest.approx(fraction, rel=0.05)
    assert fit.overhead_s == pytest.approx(overhead_s, rel=0.05)
    assert fit.max_relative_error < 0.01


def test_prefilling_and_idle_windows_are_left_out_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text(
        engine_log(planted_roofline(HARDWARE, TARGET, EAGLE, 0.7, 1e-3), varied_windows(), prefill_windows=2)
    )
    log = read_engine_log(path)
    assert [p.line for p in log.skipped] == [2, 3] and all("prefilled" in p.message for p in log.skipped)
    assert log.kv_cache_tokens == KV_CACHE_TOKENS


def test_cli_writes_a_cost_model_section_that_reproduces_the_log(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    planted = planted_roofline(HARDWARE, TARGET, EAGLE, 0.66, 1.5e-3)
    path.write_text(engine_log(planted, varied_windows()))
    result = CliRunner().invoke(
        app, ["calibrate", str(path), "--out", str(tmp_path / "p.yaml"), "--fit-roofline", str(SIMULATION)]
    )
    assert result.exit_code == 0, result.output
    section = yaml.safe_load((tmp_path / "cost-model.yaml").read_text())["cost_model"]
    config = CostModelConfig.model_validate(section)
    assert config.method == "roofline" and config.fit is not None and config.fit.num_windows == len(varied_windows())
    fitted = build_cost_model(HARDWARE, TARGET, EAGLE, config)
    for running in (1, 64, 256):
        assert fitted.step_time(running, 3, 1500.0).total_s == pytest.approx(
            planted.step_time(running, 3, 1500.0).total_s, rel=0.01
        )


def _log(tmp_path: Path, edit: tuple[str, str] | None = None, *, size_line: bool = True) -> Path:
    text = engine_log(planted_roofline(HARDWARE, TARGET, EAGLE, 0.7, 1e-3), varied_windows(), prefill_windows=0)
    if edit:
        text = text.replace(*edit, 1)
    if not size_line:
        text = text.split("\n", 1)[1]
    path = tmp_path / "server.log"
    path.write_text(text)
    return path


def test_a_malformed_running_count_is_located(tmp_path: Path) -> None:
    with pytest.raises(DocumentError, match=r"server\.log:2: Running: must be a number, got 'many reqs'"):
        read_engine_log(_log(tmp_path, ("Running: 1 reqs", "Running: many reqs")))


def test_kv_cache_usage_over_100_percent_is_located(tmp_path: Path) -> None:
    with pytest.raises(DocumentError, match=r"server\.log:2: GPU KV cache usage: must be a percentage in \[0, 100\]"):
        read_engine_log(_log(tmp_path, ("GPU KV cache usage: 0.1%", "GPU KV cache usage: 130.0%")))


def test_a_log_without_the_cache_size_asks_for_it(tmp_path: Path) -> None:
    with pytest.raises(DocumentError, match="--kv-cache-tokens"):
        read_engine_log(_log(tmp_path, size_line=False))
    assert read_engine_log(_log(tmp_path, size_line=False), kv_cache_tokens=KV_CACHE_TOKENS).windows


def test_one_batch_size_cannot_separate_bandwidth_from_overhead() -> None:
    steps = [StepSample(8, 3, 1000.0, 0.008, "x:1"), StepSample(8, 3, 2000.0, 0.009, "x:2")]
    with pytest.raises(SpectuneError, match="2 or more batch sizes"):
        fit_roofline(steps, HARDWARE, TARGET, EAGLE)


def test_fit_roofline_summarises_left_out_windows_per_kind(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    planted = planted_roofline(HARDWARE, TARGET, EAGLE, 0.66, 1.5e-3)
    path.write_text(engine_log(planted, varied_windows(), prefill_windows=40))
    result = CliRunner().invoke(
        app, ["calibrate", str(path), "--out", str(tmp_path / "p.yaml"), "--fit-roofline", str(SIMULATION)]
    )
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if "left out of the fit" in line]
    assert len(warnings) == 1, warnings
    assert "warning: 40 window(s) left out of the fit (prefill)" in warnings[0] and "and 37 more" in warnings[0]
    assert f"{path}:2; {path}:3; {path}:4" in warnings[0]


def test_a_fit_worse_than_the_stated_bound_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    planted = planted_roofline(HARDWARE, TARGET, EAGLE, 0.66, 1.5e-3)
    lines = engine_log(planted, varied_windows(), prefill_windows=0).splitlines()
    # Every other engine line's throughput tripled: step times no roofline can follow.
    for index in [i for i, line in enumerate(lines) if "Avg generation throughput:" in line][::2]:
        head, rest = lines[index].split("Avg generation throughput: ", 1)
        value, tail = rest.split(" ", 1)
        lines[index] = f"{head}Avg generation throughput: {3 * float(value):.1f} {tail}"
    path.write_text("\n".join(lines) + "\n")
    args = ["calibrate", str(path), "--out", str(tmp_path / "p.yaml"), "--fit-roofline", str(SIMULATION)]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 1, refused.output
    assert "above the bound of 25% (--max-fit-error)" in refused.output and "Traceback" not in refused.output
    assert not (tmp_path / "cost-model.yaml").exists()
    allowed = CliRunner().invoke(app, [*args, "--max-fit-error", "5"])
    assert allowed.exit_code == 0 and (tmp_path / "cost-model.yaml").exists()

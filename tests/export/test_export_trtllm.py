"""trtllm.yaml: TensorRT-LLM's draft_len_schedule from the K table, marked, and checked by ``spectune validate``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from spectune.cli import app
from spectune.export import write_artefacts
from spectune.export._trtllm import trtllm_options, trtllm_yaml

runner = CliRunner()


def test_trtllm_yaml_round_trips_through_validate_with_the_tables_thresholds(outcome, tmp_path: Path) -> None:
    written = write_artefacts(outcome, tmp_path).written
    path = tmp_path / "trtllm.yaml"
    assert path in written
    result = runner.invoke(app, ["validate", "--strict", str(path)])
    assert result.exit_code == 0, result.output
    assert "1 file checked: 1 valid" in result.output
    section = yaml.safe_load(path.read_text())["speculative_config"]
    schedule = outcome.recommendation.schedule
    assert list(section["draft_len_schedule"]) == [start for start, _, _ in schedule]
    assert list(section["draft_len_schedule"].values()) == [k for _, _, k in schedule]
    assert section["draft_len_schedule"][1] == section["max_draft_len"] == max(k for _, _, k in schedule)
    assert section["decoding_type"] == "Eagle3" and section["speculative_model"]
    text = path.read_text()
    assert "# mark: spectune simulated this schedule as vLLM serves its K table" in text
    assert "upper bounds" in text and "enable_padding" in text


def _write(tmp_path: Path, section: dict) -> Path:
    path = tmp_path / "options.yaml"
    path.write_text(yaml.safe_dump({"max_batch_size": 256, "speculative_config": section}, sort_keys=False))
    return path


BASE = {"decoding_type": "Eagle3", "max_draft_len": 4, "speculative_model": "org/head"}


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (BASE | {"draft_len_schedule": {8: 2}}, "draft_len_schedule must contain batch size 1 ({1: 4}), got {8: 2}"),
        (BASE | {"draft_len_schedule": {1: 3, 8: 2}}, "draft_len_schedule[1] must equal max_draft_len 4, got 3"),
        (BASE | {"draft_len_schedule": {1: 4, 8: 5}}, "lengths must be <= max_draft_len 4, got 8: 5"),
        (BASE | {"draft_len_schedule": {1: 4, 0: 2}}, "thresholds must be >= 1 and lengths >= 0, got 0: 2"),
        ({"decoding_type": "Eagle3", "max_draft_len": 4}, "speculative_model (the drafter) is required for Eagle3"),
        (BASE | {"draft_len_shedule": {1: 4}}, "unknown TensorRT-LLM speculative field"),
        (BASE | {"decoding_type": "Eagle4"}, "Eagle4"),
    ],
)
def test_validate_refuses_what_tensorrt_llm_refuses(tmp_path: Path, section: dict, message: str) -> None:
    path = _write(tmp_path, section)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 1
    first = result.output.splitlines()[0]
    assert first.startswith(f"{path}:") and "speculative_config" in first, first
    assert message in result.output, result.output
    assert "Traceback" not in result.output


def test_mtp_takes_its_draft_length_from_the_mtp_modules(tmp_path: Path) -> None:
    path = _write(
        tmp_path, {"decoding_type": "MTP", "num_nextn_predict_layers": 3, "draft_len_schedule": {1: 3, 32: 1}}
    )
    assert runner.invoke(app, ["validate", str(path)]).exit_code == 0


def test_no_fragment_when_the_table_does_not_start_at_its_largest_k(outcome) -> None:
    recommendation = dataclasses.replace(outcome.recommendation, schedule=((1, 8, 2), (9, 64, 4), (65, 256, 0)))
    options, reason = trtllm_options(recommendation)
    assert options is None and "must start with {1: max_draft_len}" in reason
    assert trtllm_yaml(recommendation) is None


def test_a_zero_row_becomes_a_zero_length_threshold(outcome) -> None:
    recommendation = dataclasses.replace(outcome.recommendation, schedule=((1, 8, 4), (9, 64, 2), (65, 256, 0)))
    options, _ = trtllm_options(recommendation)
    assert options is not None
    assert options["speculative_config"]["draft_len_schedule"] == {1: 4, 9: 2, 65: 0}

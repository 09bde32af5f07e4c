"""A simulation driven by a calibrated profile reproduces the source's mean acceptance length."""

import math
from pathlib import Path

import pytest
import yaml

from spectune.calibrate import calibrate, calibration_profile, profile_yaml
from spectune.config import load_document
from spectune.simulator import simulate

EXAMPLE_LOG = Path(__file__).resolve().parents[2] / "examples" / "logs" / "vllm-eagle3.log"


@pytest.mark.parametrize("concurrency", [4, 64])
def test_simulated_acceptance_length_matches_the_log(tmp_path, concurrency):
    calibration = calibrate([EXAMPLE_LOG])
    profile = calibration_profile(calibration, name="eagle3")
    (tmp_path / "profile.yaml").write_text(profile_yaml(profile))
    document = {
        "kind": "simulation",
        "name": "roundtrip",
        "speculative": {"method": "eagle3", "num_speculative_tokens": 3},
        "acceptance": {"profile": "profile.yaml"},
        "workload": {
            "concurrency": concurrency,
            "num_requests": 4 * concurrency + 64,
            "prompt_tokens": 32,
            "output_tokens": 160,
            "temperature": 0.0,
            "vocab_size": 512,
        },
        "hardware": "h100-sxm",
        "target_model": "llama-3.1-8b",
    }
    (tmp_path / "sim.yaml").write_text(yaml.safe_dump(document))
    result = simulate(load_document(tmp_path / "sim.yaml").model, baseline=False)
    # The bin the simulation draws its rates from is the one for its batch size.
    source = next(b for b in profile.bins if b.min_running <= concurrency <= b.max_running)
    simulated_se = math.sqrt(1.2 / result.num_drafts)  # per-draft variance of accepted count is below 1.2 at K=3
    tolerance = 4 * math.hypot(source.mean_acceptance_length_stderr, simulated_se) + 0.01
    assert result.mean_acceptance_length == pytest.approx(source.mean_acceptance_length_measured, abs=tolerance)

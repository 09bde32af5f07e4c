"""SGLang decode lines: the mean acceptance length, K from accept rate, and the limits said out loud."""

import pytest

from spectune.calibrate import calibrate, calibration_profile
from spectune.errors import DocumentError, SpectuneError

from . import synthetic
from .synthetic import FIXTURES

SGLANG = FIXTURES / "sglang.log"


def test_mean_length_is_the_verification_weighted_mean():
    truth = synthetic.sglang_log()
    drafts, accepted, _ = truth.pooled()
    calibration = calibrate([SGLANG])
    overall = calibration.overall
    assert calibration.log_format == "sglang-log"
    assert not overall.per_position_measured and overall.num_drafts is None
    # Lines print accept len to 2 decimals; the pooled mean is off by at most half of that.
    assert (
        abs(overall.mean_acceptance_length - (1 + accepted / drafts))
        <= overall.mean_acceptance_length_rounding_error
        == 0.005
    )


def test_k_is_read_from_accept_rate():
    assert calibrate([SGLANG]).num_positions == len(synthetic.SGLANG_RATES)


def test_k_that_contradicts_accept_rate_is_an_error():
    with pytest.raises(DocumentError, match=r"accept rate: accept len .* give K = \(len - 1\) / rate in .* not K=2"):
        calibrate([SGLANG], num_speculative_tokens=2)


def test_without_accept_rate_k_must_be_given(tmp_path):
    path = tmp_path / "sglang.log"
    path.write_text(
        "".join(
            line.split(" accept rate:")[0] + ", cuda graph: True\n" if "accept rate" in line else line + "\n"
            for line in SGLANG.read_text().splitlines()
        )
    )
    with pytest.raises(SpectuneError, match="give it with --num-speculative-tokens"):
        calibrate([path])
    assert calibrate([path], num_speculative_tokens=4).num_positions == 4


def test_accept_length_above_k_plus_one_is_an_error(tmp_path):
    path = tmp_path / "sglang.log"
    path.write_text(
        "[2026-05-06 04:31:00 TP0] Decode batch. #running-req: 4, #token: 100, token usage: 0.01, accept len: 3.40, cuda graph: True, gen throughput (token/s): 100.00, #queue-req: 0, \n"
    )
    with pytest.raises(DocumentError, match=r":1: accept len: 3.4 tokens per step exceeds K \+ 1 = 3"):
        calibrate([path], num_speculative_tokens=2)


def test_profile_says_only_the_mean_length_was_measured():
    profile = calibration_profile(calibrate([SGLANG]), name="qwen3-eagle3-sglang")
    assert "only the mean acceptance length" in profile.notes.lower()
    assert profile.unconditional_rates_measured is None and profile.conditional_rates_stderr is None
    assert profile.mean_acceptance_length(4) == pytest.approx(profile.mean_acceptance_length_measured, abs=1e-6)
    assert len(profile.bins) == 6  # batch sizes 1..32 from #running-req

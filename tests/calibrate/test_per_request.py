"""vLLM per-request metrics as JSON lines: exact per-position counts from the histograms."""

import json

import pytest

from spectune.calibrate import calibrate
from spectune.errors import DocumentError

from . import synthetic
from .synthetic import FIXTURES


def test_histograms_give_exact_counts_per_request():
    truth = synthetic.per_request_jsonl()
    calibration = calibrate([FIXTURES / "per-request.jsonl"])
    drafts, accepted, per_position = truth.pooled()
    overall = calibration.overall
    assert calibration.log_format == "vllm-per-request"
    assert overall.num_windows == len(truth.windows)
    assert (overall.num_drafts, overall.num_accepted_tokens, overall.accepted_per_position) == (
        drafts,
        accepted,
        tuple(per_position),
    )
    assert overall.conditional_rates == pytest.approx(truth.conditional(), abs=1e-12)
    assert any("null per-request metrics" in note for note in calibration.notes)


def test_requests_vary_so_the_between_request_error_is_used():
    # The generator jitters each request's rates; the binomial error alone would understate that.
    overall = calibrate([FIXTURES / "per-request.jsonl"]).overall
    position0 = overall.unconditional_rates[0]
    binomial = (position0 * (1 - position0) / overall.num_drafts) ** 0.5
    assert overall.unconditional_stderr[0] > 1.2 * binomial


def test_histogram_that_contradicts_the_totals_is_an_error(tmp_path):
    record = {
        "metrics": {
            "speculative_decoding": {
                "acceptance_histogram": [3, 1, 2],
                "num_spec_steps": 6,
                "num_accepted_draft_tokens": 4,
                "num_draft_tokens": 12,
            }
        }
    }
    path = tmp_path / "requests.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(DocumentError) as err:
        calibrate([path])
    assert (
        f"{path}:1: speculative_decoding.num_accepted_draft_tokens: 4 contradicts acceptance_histogram [3, 1, 2] (which gives 5)"
        in str(err.value)
    )


def test_bad_json_lines_are_skipped_with_warnings(tmp_path):
    good = {"speculative_decoding": {"acceptance_histogram": [1, 2, 3], "num_draft_tokens": 12}}
    path = tmp_path / "requests.jsonl"
    path.write_text(json.dumps(good) + '\n{"truncated": \n')
    calibration = calibrate([path])
    assert calibration.overall.accepted_per_position == (5, 3)
    assert [(p.line, p.severity) for p in calibration.skipped] == [(2, "warning")]


def test_short_drafts_are_noted(tmp_path):
    # Two steps of K=3 proposing only 2 tokens each (grammar-trimmed): 4 draft tokens, not 6.
    record = {"speculative_decoding": {"acceptance_histogram": [0, 1, 1, 0], "num_draft_tokens": 4}}
    path = tmp_path / "requests.jsonl"
    path.write_text(json.dumps(record) + "\n")
    calibration = calibrate([path])
    assert calibration.overall.accepted_per_position == (2, 1, 0)
    assert any("fewer than K" in note for note in calibration.notes)


def test_fewer_draft_tokens_than_drafts_is_an_error_at_its_line(tmp_path):
    log = tmp_path / "requests.jsonl"
    good = {"speculative_decoding": {"acceptance_histogram": [3, 2, 1, 4], "num_spec_tokens": 3}}
    short = {
        "speculative_decoding": {"acceptance_histogram": [10, 0, 0, 0], "num_draft_tokens": 4}
    }  # 10 steps, 4 tokens
    log.write_text(json.dumps(good) + "\n" + json.dumps(short) + "\n")
    with pytest.raises(DocumentError) as err:
        calibrate([log])
    assert str(err.value) == (
        f"{log}:2: inconsistent counts: draft tokens (4) must lie between the drafts (10) and K x drafts (3 x 10 = 30)"
    )


def test_a_count_past_2_to_the_53_is_an_error_at_its_line(tmp_path):
    log = tmp_path / "requests.jsonl"
    log.write_text(
        json.dumps({"speculative_decoding": {"acceptance_histogram": [3, 2, 1, 4], "num_draft_tokens": 1e300}}) + "\n"
    )
    with pytest.raises(
        DocumentError,
        match=rf"^{log}:1: speculative_decoding.num_draft_tokens: must be a whole number in \[0, 2\^53\], got 1e\+300",
    ):
        calibrate([log])

"""vLLM log lines: recovery of the counts behind them, bins, and clear errors."""

from pathlib import Path

import numpy as np
import pytest

from spectune.calibrate import calibrate
from spectune.errors import DocumentError

from . import synthetic
from .synthetic import FIXTURES


def _assert_within_rounding(estimate, truth, running=None):
    """Recovered rates equal the true pooled ones within the rounding bound the estimate states."""
    true_conditional = truth.conditional(running)
    true_unconditional = truth.unconditional(running)
    conditional_bound = estimate.conditional_rounding_error or (0.0,) * len(true_conditional)
    unconditional_bound = estimate.unconditional_rounding_error or (0.0,) * len(true_unconditional)
    for i, (got, want, bound) in enumerate(
        zip(estimate.conditional_rates, true_conditional, conditional_bound, strict=True)
    ):
        assert abs(got - want) <= bound + 1e-12, f"conditional[{i}] {got} vs true {want}, bound {bound}"
    for i, (got, want, bound) in enumerate(
        zip(estimate.unconditional_rates, true_unconditional, unconditional_bound, strict=True)
    ):
        assert abs(got - want) <= bound + 1e-12, f"unconditional[{i}] {got} vs true {want}, bound {bound}"
    # The 3-decimal rounding leaves at most 0.001 on a pooled unconditional rate.
    assert max(unconditional_bound) <= 0.001


def test_compose_prefixes_and_colour_codes_recover_the_rates():
    truth = synthetic.compose_ansi_log()
    calibration = calibrate([FIXTURES / "vllm-compose-ansi.log"])
    assert calibration.log_format == "vllm-log"
    assert calibration.num_positions == 3
    assert calibration.overall.num_windows == len(truth.windows)
    drafts, accepted, _ = truth.pooled()
    assert calibration.overall.num_drafts == drafts  # drafted / K is exact for EAGLE
    assert calibration.overall.num_accepted_tokens == accepted
    assert calibration.overall.mean_acceptance_length == pytest.approx(1 + accepted / drafts, abs=1e-12)
    _assert_within_rounding(calibration.overall, truth)
    # Windows of up to ~16000 drafts: the rounding is not negligible here, and is stated.
    assert max(calibration.overall.unconditional_rounding_error) > 0


def test_bins_follow_the_engine_lines_running_counts():
    truth = synthetic.compose_ansi_log()
    calibration = calibrate([FIXTURES / "vllm-compose-ansi.log"])
    assert [(b.min_running, b.max_running) for b in calibration.bins] == [
        (r, r) for r in synthetic.EAGLE3_RATES_BY_RUNNING
    ]
    for estimate in calibration.bins:
        _assert_within_rounding(estimate, truth, running=(estimate.min_running, estimate.max_running))
    # The generator lowered acceptance at 64 running requests; the bins must show it.
    assert calibration.bins[-1].conditional_rates[0] < calibration.bins[0].conditional_rates[0] - 0.015


def test_coarser_bin_edges_merge_windows():
    truth = synthetic.compose_ansi_log()
    calibration = calibrate([FIXTURES / "vllm-compose-ansi.log"], bin_edges=(1, 8))
    assert [(b.min_running, b.max_running) for b in calibration.bins] == [(1, 4), (8, 64)]
    _assert_within_rounding(calibration.bins[1], truth, running=(8, 64))
    assert calibrate([FIXTURES / "vllm-compose-ansi.log"], bin_edges=None).bins == ()


def test_fork_fields_and_docker_timestamps_are_ignored():
    truth = synthetic.fork_timestamps_log()
    calibration = calibrate([FIXTURES / "vllm-fork-timestamps.log"])
    assert calibration.num_positions == 5
    _assert_within_rounding(calibration.overall, truth)


def test_short_drafts_infer_num_drafts_from_mean_length_and_rates():
    truth = synthetic.ngram_short_drafts_log()
    assert any(w.num_draft_tokens % 4 for w in truth.windows), "the fixture must have drafts shorter than K"
    calibration = calibrate([FIXTURES / "vllm-ngram-short-drafts.log"])
    drafts, accepted, per_position = truth.pooled()
    assert calibration.overall.num_drafts == drafts
    assert calibration.overall.accepted_per_position == tuple(per_position)
    assert any("fewer than K" in note for note in calibration.notes)


def test_old_format_needs_k_and_then_gives_the_mean_length():
    path = FIXTURES / "vllm-old-format.log"
    with pytest.raises(DocumentError) as err:
        calibrate([path])
    assert "older log format" in str(err.value) and "--num-speculative-tokens" in str(err.value)
    first_spec_line = next(i for i, line in enumerate(path.read_text().splitlines(), 1) if "SpecDecoding" in line)
    assert f"{path}:{first_spec_line}:" in str(err.value)
    truth = synthetic.old_format_log()
    drafts, accepted, _ = truth.pooled()
    calibration = calibrate([path], num_speculative_tokens=3)
    assert not calibration.overall.per_position_measured
    assert calibration.overall.num_drafts == drafts
    assert calibration.overall.mean_acceptance_length == pytest.approx(1 + accepted / drafts, abs=1e-12)
    # The assumed per-position shape reproduces the measured mean length at this K.
    assumed = np.cumprod(calibration.overall.conditional_rates)
    assert 1 + assumed.sum() == pytest.approx(calibration.overall.mean_acceptance_length, abs=1e-6)


def test_old_format_with_a_k_that_does_not_divide_drafted_is_an_error():
    with pytest.raises(DocumentError, match="not a whole number of drafts of K=7"):
        calibrate([FIXTURES / "vllm-old-format.log"], num_speculative_tokens=7)


def test_k_change_names_both_windows():
    path = FIXTURES / "vllm-k-changes.log"
    with pytest.raises(DocumentError) as err:
        calibrate([path])
    message = str(err.value)
    first_spec_line = next(i for i, line in enumerate(path.read_text().splitlines(), 1) if "SpecDecoding" in line)
    changed_line = next(
        i
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if "SpecDecoding" in line and line.count(", 0.") >= 4
    )
    assert (
        f"{path}:{changed_line}: K: K changed between windows: 5 draft positions here, 3 positions at {path}:{first_spec_line}"
        in message
    )


def test_given_k_that_contradicts_the_log_is_an_error():
    with pytest.raises(DocumentError, match="has 3 positions but K=4 was given"):
        calibrate([FIXTURES / "vllm-compose-ansi.log"], num_speculative_tokens=4)


def _one_window_log(tmp_path: Path, message: str, engine: str | None = None) -> Path:
    lines = ["INFO 05-06 04:00:00 [api_server.py:1880] vLLM API server version 0.33.0"]
    if engine:
        lines.append(f"INFO 05-06 04:00:10 [loggers.py:271] {engine}")
    lines.append(f"INFO 05-06 04:00:10 [metrics.py:101] {message}")
    path = tmp_path / "server.log"
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = (
    "SpecDecoding metrics: Mean acceptance length: 2.67, Accepted throughput: 63.90 tokens/s, Drafted throughput: "
    "114.60 tokens/s, Accepted: 639 tokens, Drafted: 1146 tokens, Per-position acceptance rate: 0.801, 0.524, 0.348, "
    "Avg Draft acceptance rate: 55.8%"
)


def test_a_real_vllm_line_gives_its_exact_counts(tmp_path):
    # From a public issue (club-3090#74): 1146 drafted / K=3 = 382 drafts; 0.801 * 382 = 306, ...
    calibration = calibrate([_one_window_log(tmp_path, GOOD, engine="Engine 000: Running: 1 reqs, Waiting: 0 reqs")])
    overall = calibration.overall
    assert (overall.num_drafts, overall.num_accepted_tokens, overall.accepted_per_position) == (
        382,
        639,
        (306, 200, 133),
    )
    assert overall.conditional_rates == pytest.approx((306 / 382, 200 / 306, 133 / 200))
    assert max(overall.unconditional_rounding_error) == 0.0  # under 1000 drafts, 3 decimals pin the counts
    assert [(b.min_running, b.max_running) for b in calibration.bins] == [(1, 1)]


def test_corrupted_line_is_an_error_at_its_line(tmp_path):
    corrupted = GOOD.replace("0.524", "0.624")
    path = _one_window_log(tmp_path, corrupted)
    with pytest.raises(DocumentError) as err:
        calibrate([path])
    assert f"{path}:2: Per-position acceptance rate: no whole numbers of drafts" in str(err.value)


def test_draft_rate_that_contradicts_the_counts_is_an_error(tmp_path):
    path = _one_window_log(tmp_path, GOOD.replace("55.8%", "65.8%"))
    with pytest.raises(
        DocumentError, match=r":2: Avg Draft acceptance rate: 65.8% contradicts Accepted/Drafted = 55.759%"
    ):
        calibrate([path])


def test_truncated_last_line_is_skipped_with_a_warning(tmp_path):
    path = tmp_path / "server.log"
    path.write_text(f"INFO {GOOD}\nINFO {GOOD[: GOOD.index('0.524') + 3]}\n")
    calibration = calibrate([path])
    assert calibration.overall.num_windows == 1
    assert len(calibration.skipped) == 1
    assert calibration.skipped[0].line == 2 and "truncated" in calibration.skipped[0].message


def test_log_without_spec_lines_says_why(tmp_path):
    path = tmp_path / "server.log"
    path.write_text("INFO Engine 000: Avg prompt throughput: 0.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs\n")
    with pytest.raises(DocumentError, match="no usable lines: it is a vLLM log without 'SpecDecoding metrics:' lines"):
        calibrate([path])


def test_empty_or_unrelated_file_is_an_error(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    with pytest.raises(DocumentError, match=f"{path}: no usable lines: found no vLLM 'SpecDecoding metrics:' line"):
        calibrate([path])


def test_missing_file_is_an_error(tmp_path):
    with pytest.raises(DocumentError, match="no such file"):
        calibrate([tmp_path / "absent.log"])


def test_several_logs_pool_their_windows(tmp_path):
    text = (FIXTURES / "vllm-compose-ansi.log").read_text()
    lines = text.splitlines(keepends=True)
    half = len(lines) // 2
    (tmp_path / "a.log").write_text("".join(lines[:half]))
    (tmp_path / "b.log").write_text("".join(lines[half:]))
    whole = calibrate([FIXTURES / "vllm-compose-ansi.log"]).overall
    split = calibrate([tmp_path / "a.log", tmp_path / "b.log"]).overall
    assert split.accepted_per_position == whole.accepted_per_position
    assert split.num_windows == whole.num_windows


def test_docker_json_file_records_parse(tmp_path):
    # docker's json-file driver wraps each line: the last field is followed by the rest of the record.
    record = (
        '{"log":"(APIServer pid=1) INFO 05-06 04:34:37 [metrics.py:101] '
        + GOOD
        + '\\n","stream":"stdout","time":"2026-05-06T04:34:37.1Z"}'
    )
    path = tmp_path / "container-json.log"
    path.write_text(record + "\n")
    calibration = calibrate([path])
    assert calibration.overall.accepted_per_position == (306, 200, 133)
    assert calibration.skipped == ()


def test_only_skipped_lines_means_no_usable_lines(tmp_path):
    path = tmp_path / "server.log"
    path.write_text(f"INFO {GOOD[: GOOD.index('0.524') + 3]}\n")
    with pytest.raises(
        DocumentError, match=r"no usable lines \(line 1: line skipped: no field after the per-position rates"
    ):
        calibrate([path])


def test_a_token_count_past_2_to_the_53_is_an_error_at_its_line(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text(
        "SpecDecoding metrics: Accepted: 1235 tokens, Drafted: 100000000000000000000 tokens, "
        "Per-position acceptance rate: 0.726, 0.505, 0.344, Avg Draft acceptance rate: 52.5%\n"
    )
    with pytest.raises(DocumentError) as err:
        calibrate([log])
    assert str(err.value) == f"{log}:1: Drafted: must be at most 2^53 tokens, got 100000000000000000000"

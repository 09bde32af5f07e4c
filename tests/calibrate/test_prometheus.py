"""Two Prometheus scrapes: exact counter differences per model_name, and restarts caught."""

import pytest

from spectune.calibrate import calibrate
from spectune.errors import DocumentError, SpectuneError

from . import synthetic
from .synthetic import FIXTURES

BEFORE, AFTER = FIXTURES / "prometheus-before.prom", FIXTURES / "prometheus-after.prom"


@pytest.mark.parametrize("model", sorted(synthetic.PROMETHEUS_MODELS))
def test_each_model_gets_its_exact_counts(model):
    _, _, truths = synthetic.prometheus_scrapes()
    calibration = calibrate([BEFORE, AFTER], model_name=model)
    drafts, accepted, per_position = truths[model].pooled()
    overall = calibration.overall
    assert calibration.log_format == "vllm-prometheus"
    assert (overall.num_drafts, overall.num_accepted_tokens, overall.accepted_per_position) == (
        drafts,
        accepted,
        tuple(per_position),
    )
    assert overall.conditional_rates == pytest.approx(truths[model].conditional(), abs=1e-12)
    assert overall.unconditional_rounding_error is None  # counters are exact
    assert overall.num_windows == 1


def test_several_models_need_a_choice():
    with pytest.raises(DocumentError) as err:
        calibrate([BEFORE, AFTER])
    message = str(err.value)
    assert "several models" in message and "--model" in message
    assert "Qwen/Qwen3-8B" in message and "meta-llama/Llama-3.1-8B-Instruct" in message


def test_unknown_model_lists_the_ones_there():
    with pytest.raises(DocumentError, match="no counters for 'gpt-x'; the scrape has Qwen/Qwen3-8B"):
        calibrate([BEFORE, AFTER], model_name="gpt-x")


def test_counter_that_went_down_is_a_restart():
    restart = FIXTURES / "prometheus-after-restart.prom"
    with pytest.raises(DocumentError) as err:
        calibrate([BEFORE, restart], model_name="Qwen/Qwen3-8B")
    message = str(err.value)
    assert message.startswith(f"{restart}:")
    assert "went down from" in message and f"({BEFORE}:" in message and "restarted" in message


def test_scrapes_in_the_wrong_order_are_caught():
    with pytest.raises(DocumentError, match="went down"):
        calibrate([AFTER, BEFORE], model_name="Qwen/Qwen3-8B")


def test_one_scrape_is_not_enough():
    with pytest.raises(SpectuneError, match="give two scrapes"):
        calibrate([AFTER])


def test_three_scrapes_give_two_windows_that_add_up(tmp_path):
    text_before, text_after = BEFORE.read_text(), AFTER.read_text()
    middle = tmp_path / "middle.prom"
    middle.write_text(text_before)  # a scrape with no progress since the first
    calibration = calibrate([BEFORE, middle, AFTER], model_name="Qwen/Qwen3-8B")
    two = calibrate([BEFORE, AFTER], model_name="Qwen/Qwen3-8B")
    assert calibration.overall.accepted_per_position == two.overall.accepted_per_position
    assert calibration.overall.num_windows == 1 and len(calibration.skipped) == 1  # the empty window is skipped
    assert text_after  # both scrapes were read


def test_per_position_counters_that_rise_are_inconsistent(tmp_path):
    after = AFTER.read_text().replace('position="2"} ', 'position="2"} 9', 1)
    path = tmp_path / "after.prom"
    path.write_text(after)
    with pytest.raises(DocumentError, match="inconsistent counters"):
        calibrate([BEFORE, path], model_name="meta-llama/Llama-3.1-8B-Instruct")


def test_more_draft_tokens_than_k_times_drafts_is_an_error_at_its_line(tmp_path):
    def scrape(drafts, draft_tokens, per_position):
        labels = 'engine="0",model_name="m"'
        return (
            "\n".join(
                [
                    f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafts}",
                    f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {draft_tokens}",
                    f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {sum(per_position)}",
                    *(
                        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{i}"}} {n}'
                        for i, n in enumerate(per_position)
                    ),
                ]
            )
            + "\n"
        )

    before, after = tmp_path / "before.prom", tmp_path / "after.prom"
    before.write_text(scrape(0, 0, (0, 0)))
    after.write_text(scrape(100, 201, (60, 30)))  # K = 2 positions: at most 200 draft tokens
    with pytest.raises(DocumentError) as err:
        calibrate([before, after])
    assert str(err.value).startswith(f"{after}:2: vllm:spec_decode_num_draft_tokens: went up by 201 between")
    assert "more than K = 2 positions x 100 drafts" in str(err.value)

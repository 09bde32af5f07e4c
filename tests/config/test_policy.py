"""SGLang's adaptive steps as a document field, and the acceptance's confidence_auc: located errors,
SGLang's file form both ways, and the routing that a pinned K table gets."""

import json

import pytest

from spectune.config import (
    AcceptanceRates,
    RuleViolations,
    SglangAdaptive,
    SglangAdaptiveSlot,
    sglang_speculative_capture_sizes,
)

HEAD = "kind: simulation\nname: t\n"
SPEC = "speculative: {method: eagle3, num_speculative_tokens: 3}\n"
ACCEPT = "acceptance: {conditional_rates: [0.7, 0.6]}\n"
WORK = "workload: {concurrency: 8, num_requests: 16, prompt_tokens: 32, output_tokens: 32, temperature: 0.0}\n"
DEPLOY = "hardware: h100-sxm\ntarget_model: llama-3.1-8b\n"
SLOTS = "sglang_adaptive: {slots: {1: {candidate_steps: [1, 3]}, 8: {candidate_steps: [0, 1]}}}\n"


def test_a_document_with_sglang_adaptive_validates(problems_of) -> None:
    _, problems = problems_of(HEAD + SPEC + ACCEPT + WORK + DEPLOY + SLOTS)
    assert problems == []


@pytest.mark.parametrize(
    ("text", "line", "field", "fragment"),
    [
        (
            HEAD + "speculative: {method: ngram, num_speculative_tokens: 3}\n" + ACCEPT + WORK + DEPLOY + SLOTS,
            8,
            "sglang_adaptive",
            "needs speculative.method eagle or eagle3 (SGLang: only EAGLE/EAGLE3), got 'ngram'",
        ),
        (
            HEAD
            + "speculative: {method: eagle3, num_speculative_tokens: 3, enable_adaptive_verification: true}\n"
            + ACCEPT
            + WORK
            + DEPLOY
            + SLOTS,
            8,
            "sglang_adaptive",
            "not with speculative.enable_adaptive_verification",
        ),
        (
            HEAD + "speculative: {method: eagle3, num_speculative_tokens: 3, "
            "num_speculative_tokens_per_batch_size: [[1, 4, 3], [5, 64, 1]]}\n" + ACCEPT + WORK + DEPLOY + SLOTS,
            8,
            "sglang_adaptive",
            "not with speculative.num_speculative_tokens_per_batch_size",
        ),
        (
            HEAD + SPEC + ACCEPT + WORK + DEPLOY + "sglang_adaptive: {slots: {1: {candidate_steps: [1, -2]}}}\n",
            8,
            "sglang_adaptive.slots.1.candidate_steps[1]",
            "must be an integer in [0, 64] (0 = no drafting), got -2",
        ),
        (
            HEAD + SPEC + ACCEPT + WORK + DEPLOY + "sglang_adaptive: {slots: {1: {candidate_steps: []}}}\n",
            8,
            "sglang_adaptive.slots.1.candidate_steps",
            "at least 1 item",
        ),
        (
            HEAD + SPEC + ACCEPT + WORK + DEPLOY + "sglang_adaptive: {slots: {}}\n",
            8,
            "sglang_adaptive.slots",
            "at least 1 item",
        ),
        (
            HEAD
            + SPEC
            + ACCEPT
            + WORK
            + DEPLOY
            + "sglang_adaptive: {slots: {1: {candidate_steps: [1]}}, cuda_graph_batch_sizes: [1, 4, 2]}\n",
            8,
            "sglang_adaptive.cuda_graph_batch_sizes[2]",
            "must be increasing, got 2 after 4",
        ),
        (
            HEAD
            + SPEC
            + ACCEPT
            + WORK
            + DEPLOY
            + "sglang_adaptive: {slots: {1: {candidate_steps: [1]}}, ema_alpha: 2}\n",
            8,
            "sglang_adaptive.ema_alpha",
            "must be <= 1.0, got 2",
        ),
        (
            HEAD + SPEC + "acceptance: {conditional_rates: [0.7], confidence_auc: 0.3}\n" + WORK + DEPLOY,
            4,
            "acceptance.confidence_auc",
            "must be >= 0.5, got 0.3",
        ),
    ],
)
def test_policy_errors_are_located(problems_of, text: str, line: int, field: str, fragment: str) -> None:
    file, problems = problems_of(text)
    assert problems, "expected a problem"
    matching = [p for p in problems if p.field == field]
    assert matching, [str(p) for p in problems]
    assert matching[0].line == line, str(matching[0])
    assert matching[0].file == file
    assert fragment in matching[0].message, str(matching[0])


def test_confidence_auc_is_read_from_a_profile_and_inline_wins(problems_of, tmp_path) -> None:
    from spectune.config import load_document

    (tmp_path / "p.yaml").write_text(
        "kind: acceptance_profile\nname: p\nconditional_rates: [0.7, 0.6]\nconfidence_auc: 0.8\n"
    )
    (tmp_path / "a.yaml").write_text(HEAD + SPEC + "acceptance: {profile: p.yaml}\n" + WORK + DEPLOY)
    (tmp_path / "b.yaml").write_text(
        HEAD + SPEC + "acceptance: {profile: p.yaml, confidence_auc: 0.6}\n" + WORK + DEPLOY
    )
    assert load_document(tmp_path / "a.yaml").model.acceptance.confidence_auc == 0.8
    assert load_document(tmp_path / "b.yaml").model.acceptance.confidence_auc == 0.6
    assert AcceptanceRates(conditional_rates=[0.5]).confidence_auc is None


def test_default_is_sglang_0_5_23_default_adaptive_config() -> None:
    # adaptive_spec_params.py:28-53 in the sglang 0.5.23 wheel
    expected = {
        "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25, "ceiling_coeff": 0},
        "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
        "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
        "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    }
    default = SglangAdaptive.default()
    assert SglangAdaptive.from_sglang_json(expected) == default
    written = default.to_sglang_json()
    assert {key: value for key, value in written.items() if key.isdigit()} == expected
    params = default.slot_parameters(1)
    assert (params.ema_alpha, params.update_interval, params.warmup_batches) == (0.2, 5, 10)


def test_sglang_json_round_trips_with_shared_and_per_slot_parameters() -> None:
    data = {
        "ema_alpha": 0.5,
        "warmup_batches": 2,
        "3": {"candidate_steps": [4, 2, 2], "update_interval": 7},
        "16": {"candidate_steps": [0]},
    }
    config = SglangAdaptive.from_sglang_json(data)
    again = SglangAdaptive.from_sglang_json(json.loads(json.dumps(config.to_sglang_json())))
    assert again == config
    three = config.slot_parameters(3)
    assert three.candidate_steps == (2, 4)  # SGLang sorts the set
    assert (three.ema_alpha, three.update_interval, three.warmup_batches) == (0.5, 7, 2)
    assert config.slot_parameters(16).update_interval == 5


def test_sglang_json_refuses_keys_sglang_does_not_read() -> None:
    with pytest.raises(RuleViolations, match=r"emaalpha: unknown key"):
        SglangAdaptive.from_sglang_json({"emaalpha": 0.1, "1": {"candidate_steps": [1]}})


def test_routing_pads_to_the_capture_size_then_takes_the_closest_key_below() -> None:
    config = SglangAdaptive(
        slots={2: SglangAdaptiveSlot(candidate_steps=[5]), 6: SglangAdaptiveSlot(candidate_steps=[2])}
    )
    capture = [1, 2, 4, 8, 16]
    # 1 -> 1 -> below every key: the smallest; 5 pads to 8 -> key 6; 17 past the list stays 17 -> key 6
    assert [config.route(b, capture) for b in (1, 2, 3, 4, 5, 8, 17)] == [2, 2, 2, 2, 6, 6, 6]


def test_pinned_table_aligned_to_capture_sizes_is_served_exactly() -> None:
    table = [(1, 4, 5), (5, 8, 3), (9, 64, 0)]
    capture = [1, 2, 4, 8, 16, 32, 64]
    config = SglangAdaptive.pinned(table, capture)
    for batch in range(1, 80):
        row_k = [k for start, _, k in table if start <= batch][-1]
        assert config.served_k(batch, capture) == row_k, batch


def test_pinned_table_off_the_capture_sizes_is_served_the_next_row_where_padding_crosses() -> None:
    table = [(1, 5, 5), (6, 64, 2)]
    capture = [1, 2, 4, 8, 16]
    config = SglangAdaptive.pinned(table, capture)
    # 5 pads to 8, past the row starting at 6: SGLang serves 2 where the table says 5
    assert [config.served_k(b, capture) for b in (4, 5, 6)] == [5, 2, 2]


def test_default_capture_sizes_follow_sglang_speculative_list() -> None:
    sizes = sglang_speculative_capture_sizes(300)
    assert sizes[:10] == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12]
    assert [s for s in sizes if 32 <= s <= 80] == [32, 40, 44, 48, 52, 56, 60, 64, 72, 80]
    assert sizes[-2:] == [272, 288] and max(sizes) <= 300


def test_a_measured_step_table_must_cover_every_sglang_candidate(problems_of, tmp_path) -> None:
    (tmp_path / "steps.csv").write_text(
        "batch_size,num_speculative_tokens,step_time_ms\n1,0,7\n64,0,9\n1,3,9\n64,3,12\n"
    )
    measured = "cost_model: {method: measured, step_times: steps.csv}\n"
    _, fine = problems_of(HEAD + SPEC + ACCEPT + WORK + DEPLOY + measured + SLOTS)
    assert fine == []
    _, problems = problems_of(
        HEAD + SPEC + ACCEPT + WORK + DEPLOY + measured + "sglang_adaptive: {slots: {1: {candidate_steps: [1, 5]}}}\n"
    )
    assert [p.field for p in problems] == ["cost_model.step_times"]
    assert "measures K 0..3, but this document needs K 5" in problems[0].message

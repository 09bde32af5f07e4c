"""Every rule of the speculative config, fed a bad value: the message names file, line and field."""

import json
from pathlib import Path

import pytest

from spectune.config import SpeculativeConfig, load_document
from spectune.config._base import SpectuneNotice
from spectune.errors import DocumentError

BASE = "method: eagle3\nmodel: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B\nnum_speculative_tokens: 3\n"

# (document text, line, dotted field, fragment of the message)
BAD_DOCUMENTS = [
    ("method: medusa\nnum_speculative_tokens: 3\n", 1, "method", "removed in vLLM 0.33.0"),
    ("method: eagle4\nnum_speculative_tokens: 3\n", 1, "method", "must be one of 'eagle', 'eagle3'"),
    ("method: eagle\nnum_speculative_tokens: 0\n", 2, "num_speculative_tokens", "must be >= 1, got 0"),
    ("method: eagle\nnum_speculative_tokens: three\n", 2, "num_speculative_tokens", "must be an integer, got 'three'"),
    ("method: eagle\nnum_speculative_tokens: 2.5\n", 2, "num_speculative_tokens", "must be a whole number, got 2.5"),
    ("method: eagle\n", 1, "num_speculative_tokens", "required field is missing"),
    ("method: draft_model\nmodel: meta-llama/Llama-3.2-1B\n", 1, "num_speculative_tokens", "required field is missing"),
    (BASE + "rejection_sample_method: fancy\n", 4, "rejection_sample_method", "must be one of 'standard', 'block'"),
    (BASE + "draft_sample_method: topk\n", 4, "draft_sample_method", "must be one of 'greedy', 'probabilistic'"),
    (BASE + "num_speculative_tokenz: 3\n", 4, "num_speculative_tokenz", "did you mean 'num_speculative_tokens'"),
    (BASE + "tensor_parallel_size: 2\n", 4, "tensor_parallel_size", "draft_tensor_parallel_size"),
    (BASE + "speculative_model: x\n", 4, "speculative_model", "write 'model'"),
    (BASE + "draft_tensor_parallel_size: 0\n", 4, "draft_tensor_parallel_size", "must be >= 1, got 0"),
    # synthetic forms: only with synthetic, exactly one, each in range
    (
        BASE + "synthetic_acceptance_rates: [0.9, 0.5, 0.2]\n",
        4,
        "synthetic_acceptance_rates",
        "only allowed when rejection_sample_method is 'synthetic'",
    ),
    (BASE + "synthetic_acceptance_length: 2.0\n", 4, "synthetic_acceptance_length", "only allowed when"),
    (BASE + "synthetic_acceptance_rate: 0.5\n", 4, "synthetic_acceptance_rate", "removed in vLLM 0.33.0"),
    (BASE + "rejection_sample_method: synthetic\n", 4, "rejection_sample_method", "needs exactly one of"),
    (
        BASE + "rejection_sample_method: synthetic\nsynthetic_acceptance_rates: [0.9, 0.5, 0.2]\n"
        "synthetic_acceptance_length: 2.0\n",
        6,
        "synthetic_acceptance_length",
        "give exactly one synthetic form",
    ),
    (
        BASE + "rejection_sample_method: synthetic\nsynthetic_acceptance_rates: [0.9, 0.5]\n",
        5,
        "synthetic_acceptance_rates",
        "must have num_speculative_tokens (3) entries, got 2",
    ),
    (
        BASE + "rejection_sample_method: synthetic\nsynthetic_acceptance_rates:\n  - 0.9\n  - 1.5\n  - 0.2\n",
        7,
        "synthetic_acceptance_rates[1]",
        "must be in [0, 1], got 1.5",
    ),
    (
        BASE + "rejection_sample_method: synthetic\nsynthetic_acceptance_rates: [0.5, 0.6, 0.2]\n",
        5,
        "synthetic_acceptance_rates[1]",
        "non-increasing",
    ),
    (
        BASE + "rejection_sample_method: synthetic\nsynthetic_acceptance_length: 4.5\n",
        5,
        "synthetic_acceptance_length",
        "must be in [1, K+1] = [1, 4], got 4.5",
    ),
    (
        BASE + "rejection_sample_method: synthetic\nsynthetic_acceptance_length: 0.5\n",
        5,
        "synthetic_acceptance_length",
        "must be in [1, K+1]",
    ),
    (
        BASE + "rejection_sample_method: synthetic\nsynthetic_acceptance_rate: 1.2\n",
        5,
        "synthetic_acceptance_rate",
        "removed in vLLM 0.33.0",
    ),
    # the per-batch-size schedule: what vLLM's dynamic-speculation lookup refuses
    (
        BASE + "num_speculative_tokens_per_batch_size: [[1, 16, -1]]\n",
        4,
        "num_speculative_tokens_per_batch_size[0][2]",
        "K must be >= 0 (0 = speculation off), got -1",
    ),
    (
        BASE + "num_speculative_tokens_per_batch_size:\n  - [1, 16, 3]\n  - [8, 32, 2]\n",
        6,
        "num_speculative_tokens_per_batch_size[1][0]",
        "must not overlap: start_bs must be > 16 (end_bs of row 0",
    ),
    (
        BASE + "num_speculative_tokens_per_batch_size:\n  - [17, 32, 3]\n  - [1, 20, 2]\n",
        5,
        "num_speculative_tokens_per_batch_size[0][0]",
        "must not overlap: start_bs must be > 20 (end_bs of row 1",
    ),
    (
        BASE + "num_speculative_tokens_per_batch_size: [[2, 16, 3]]\n",
        4,
        "num_speculative_tokens_per_batch_size[0][0]",
        "the first row must start at batch size 1",
    ),
    (
        BASE + "num_speculative_tokens_per_batch_size:\n  - [33, 64, 1]\n  - [5, 16, 3]\n",
        6,
        "num_speculative_tokens_per_batch_size[1][0]",
        "the first row must start at batch size 1 (vLLM refuses",
    ),
    (
        BASE + "num_speculative_tokens_per_batch_size: [[16, 8, 3]]\n",
        4,
        "num_speculative_tokens_per_batch_size[0][1]",
        "end_bs must be >= start_bs (16), got 8",
    ),
    (
        BASE + "num_speculative_tokens_per_batch_size: [[0, 8, 3]]\n",
        4,
        "num_speculative_tokens_per_batch_size[0][0]",
        "start_bs must be >= 1, got 0",
    ),
    (BASE + "num_speculative_tokens_per_batch_size: []\n", 4, "num_speculative_tokens_per_batch_size", "at least one"),
    (
        BASE + "num_speculative_tokens_per_batch_size: [[1, 8]]\n",
        4,
        "num_speculative_tokens_per_batch_size[0]",
        "too few items: item 2 is missing, got [1, 8]",
    ),
    # drafting and lookup rules
    (
        "method: ngram\nnum_speculative_tokens: 3\nprompt_lookup_min: 6\nprompt_lookup_max: 3\n",
        3,
        "prompt_lookup_min",
        "must be <= prompt_lookup_max (3), got 6",
    ),
    ("method: ngram\nnum_speculative_tokens: 3\nprompt_lookup_min: 0\n", 3, "prompt_lookup_min", "must be >= 1"),
    (
        BASE + "enable_adaptive_verification: true\nuse_local_argmax_reduction: true\n",
        5,
        "use_local_argmax_reduction",
        "must be false with enable_adaptive_verification for method 'eagle3'",
    ),
]


@pytest.mark.parametrize(("text", "line", "field", "fragment"), BAD_DOCUMENTS)
def test_bad_value_is_reported_with_file_line_and_field(problems_of, text, line, field, fragment):
    file, problems = problems_of(text)
    errors = [p for p in problems if p.severity == "error"]
    assert errors, f"expected an error for:\n{text}"
    matching = [p for p in errors if p.field == field]
    assert matching, f"no error on field {field!r}; got {[str(p) for p in errors]}"
    problem = matching[0]
    assert problem.file == file
    assert problem.line == line, str(problem)
    assert fragment in problem.message, str(problem)
    assert str(problem).startswith(f"{file}:{line}: {field}: ")


def test_plain_vllm_json_validates_unchanged(tmp_path: Path):
    config = {"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(config))
    document = load_document(path)
    assert document.kind == "speculative"
    assert document.notices == []
    assert document.model.model_dump(exclude_defaults=True) == config


def test_every_synthetic_form_gives_conditional_rates():
    by_rates = SpeculativeConfig(
        method="eagle3",
        num_speculative_tokens=3,
        rejection_sample_method="synthetic",
        synthetic_acceptance_rates=[0.9, 0.45, 0.09],
    )
    assert by_rates.synthetic_conditional_rates() == pytest.approx([0.9, 0.5, 0.2])
    by_length = SpeculativeConfig(
        method="mtp", num_speculative_tokens=3, rejection_sample_method="synthetic", synthetic_acceptance_length=2.6
    )
    assert by_length.synthetic_conditional_rates() == pytest.approx([1.0, 0.6, 0.0])
    with pytest.warns(SpectuneNotice, match="vLLM 0.33.0 refuses it"):
        by_mean = SpeculativeConfig(
            method="mtp", num_speculative_tokens=3, rejection_sample_method="synthetic", synthetic_acceptance_rate=0.6
        )
    assert by_mean.synthetic_conditional_rates() == pytest.approx([0.839, 0.839 * 0.85, 0.839 * 0.85**2], abs=1e-3)
    assert SpeculativeConfig(method="mtp", num_speculative_tokens=3).synthetic_conditional_rates() is None


def test_legacy_rejection_methods_are_refused_for_vllm_0_33_naming_what_to_write(problems_of):
    file, problems = problems_of(BASE + "rejection_sample_method: strict\n")
    assert [(p.severity, p.line, p.field) for p in problems] == [("error", 4, "rejection_sample_method")]
    assert "removed in vLLM 0.33.0" in problems[0].message
    assert "write rejection_sample_method: standard with draft_sample_method: greedy" in problems[0].message


def test_mtp_alias_normalises_to_mtp(problems_of, tmp_path):
    path = tmp_path / "mtp.yaml"
    path.write_text("method: deepseek_mtp\nnum_speculative_tokens: 1\n")
    document = load_document(path)
    assert document.model.method == "mtp"
    assert "alias" in document.notices[0].message and document.notices[0].line == 1


def test_method_is_inferred_from_the_model_name_like_vllm(tmp_path):
    path = tmp_path / "nomethod.json"
    path.write_text('{"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 2}')
    assert load_document(path).model.method == "eagle3"


def test_block_with_greedy_drafting_gets_advice_not_an_error(problems_of):
    _, notices = problems_of(BASE + "rejection_sample_method: block\n")
    assert len(notices) == 1 and notices[0].severity == "warning"
    assert "probabilistic" in notices[0].message


def test_notice_outside_a_loader_is_a_python_warning():
    with pytest.warns(SpectuneNotice, match="alias"):
        SpeculativeConfig.model_validate({"method": "qwen3_next_mtp", "num_speculative_tokens": 2})


def test_config_is_frozen():
    config = SpeculativeConfig(method="eagle", num_speculative_tokens=2)
    with pytest.raises(Exception, match="frozen"):
        config.num_speculative_tokens = 3  # type: ignore[misc]


def _dense_lookup(rows, k_max, max_batch):
    """vLLM's dynamic-speculation lookup, restated from its rules: sort by start, fill each inclusive
    range with min(k_max, K), gaps and the tail with the previous row's, index 0 unused (0)."""
    dense = [0] * (max_batch + 1)
    next_b, last = 1, None
    for start, end, k in sorted(rows):
        if last is not None:
            for b in range(next_b, min(start, max_batch + 1)):
                dense[b] = min(k_max, last)
        for b in range(start, min(end, max_batch) + 1):
            dense[b] = min(k_max, k)
        next_b, last = end + 1, k
    for b in range(next_b, max_batch + 1):
        dense[b] = min(k_max, last)
    return dense


@pytest.mark.parametrize(
    "rows",
    [
        [(1, 16, 5), (17, 64, 2), (65, 512, 0)],  # contiguous
        [(1, 16, 3), (33, 64, 1)],  # the gap and tail
        [(1, 1, 7), (2, 8, 9), (100, 120, 0), (50, 60, 2)],  # clamped, unsorted, several gaps
        [(1, 4, 0), (9, 9, 4)],  # off first, a one-size row, then the tail
    ],
)
def test_schedule_lookup_matches_vllm_on_gaps_tail_clamping_and_first_row(rows):
    config = SpeculativeConfig.model_validate(
        {"method": "eagle", "num_speculative_tokens": 5, "num_speculative_tokens_per_batch_size": rows},
        context={"notices": []},
    )
    expected = _dense_lookup(rows, 5, 300)
    assert [config.num_speculative_tokens_for_batch(b) for b in range(301)] == expected


def test_schedule_gaps_and_tail_take_the_previous_row_not_the_maximum():
    config = SpeculativeConfig.model_validate(
        {
            "method": "eagle",
            "num_speculative_tokens": 5,
            "num_speculative_tokens_per_batch_size": [[1, 16, 3], [33, 64, 1]],
        },
        context={"notices": []},
    )
    assert [config.num_speculative_tokens_for_batch(b) for b in (1, 16, 17, 20, 32, 33, 64, 65, 100)] == [
        3,
        3,
        3,
        3,
        3,
        1,
        1,
        1,
        1,
    ]


def test_schedule_clamp_and_gap_are_warnings_naming_what_vllm_serves(problems_of):
    _, notices = problems_of(BASE + "num_speculative_tokens_per_batch_size:\n  - [1, 16, 4]\n  - [33, 64, 1]\n")
    assert [n.severity for n in notices] == ["warning", "warning"]
    clamp = next(n for n in notices if n.field == "num_speculative_tokens_per_batch_size[0][2]")
    assert clamp.line == 5 and "min(3, 4) = 3" in clamp.message
    gap = next(n for n in notices if n.field == "num_speculative_tokens_per_batch_size")
    assert "batch sizes 17-32" in gap.message and "min(3, 4) = 3" in gap.message


def test_suffix_takes_vllms_default_k_and_mtp_needs_one(problems_of, tmp_path):
    path = tmp_path / "suffix.yaml"
    path.write_text("method: suffix\n")
    assert load_document(path).model.num_speculative_tokens == 24
    path.write_text("method: suffix\nsuffix_decoding_max_tree_depth: 12\n")
    assert load_document(path).model.num_speculative_tokens == 12
    # vLLM 0.33.0 has no default K for mtp (vllm/config/speculative.py:1486-1487, 1946-1951).
    path.write_text("method: qwen3_next_mtp\n")
    with pytest.raises(DocumentError) as err:
        load_document(path)
    assert err.value.problems[0].field == "num_speculative_tokens"
    assert "required for method 'mtp'" in err.value.problems[0].message


def test_scalar_synthetic_rate_is_refused_for_vllm_0_33(problems_of):
    _, problems = problems_of(BASE + "rejection_sample_method: synthetic\nsynthetic_acceptance_rate: 0.6\n")
    [problem] = [p for p in problems if p.field == "synthetic_acceptance_rate"]
    assert problem.severity == "error" and problem.line == 5
    assert "removed in vLLM 0.33.0" in problem.message and "synthetic_acceptance_rates" in problem.message


def test_embedded_in_a_vllm_serve_config(problems_of):
    text = (
        "model: meta-llama/Llama-3.1-8B-Instruct\nspeculative-config:\n  method: eagle3\n  num_speculative_tokens: 0\n"
    )
    file, problems = problems_of(text)
    assert [str(p) for p in problems] == [f"{file}:4: speculative-config.num_speculative_tokens: must be >= 1, got 0"]

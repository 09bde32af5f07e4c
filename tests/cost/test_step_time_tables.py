"""Measured step-time tables and the cost-model config: every bad table is refused with file, line and column."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from spectune.config import CostModelConfig, StepTimeTable, read_step_time_table
from spectune.errors import DocumentError

GOOD_CSV = """\
    # measured on a test bench
    batch_size,num_speculative_tokens,step_time_ms
    1,0,6.5
    8,0,6.9
    1,3,7.9
    8,3,8.4
    """


def problems_of(path) -> list[str]:
    with pytest.raises(DocumentError) as info:
        read_step_time_table(path)
    return [str(problem) for problem in info.value.problems]


def test_csv_table_reads_points_in_milliseconds(write_file):
    table = read_step_time_table(write_file("t.csv", GOOD_CSV))
    assert [(p.batch_size, p.num_speculative_tokens, p.step_time_ms) for p in table.points] == [
        (1, 0, 6.5),
        (8, 0, 6.9),
        (1, 3, 7.9),
        (8, 3, 8.4),
    ]
    assert table.num_speculative_tokens_measured() == [0, 3]


def test_csv_columns_may_come_in_any_order(write_file):
    path = write_file("t.csv", "step_time_ms, batch_size ,num_speculative_tokens\n6.5,1,0\n7.0,4,0\n")
    assert read_step_time_table(path).points[1].batch_size == 4


def test_yaml_table_reads_the_same_points(write_file):
    path = write_file(
        "t.yaml",
        """\
        kind: step_time_table
        source: bench run 12
        points:
          - {batch_size: 1, num_speculative_tokens: 0, step_time_ms: 6.5}
          - {batch_size: 8, num_speculative_tokens: 0, step_time_ms: 6.9}
        """,
    )
    table = read_step_time_table(path)
    assert table.source == "bench run 12"
    assert [p.step_time_ms for p in table.points] == [6.5, 6.9]


def test_missing_column_names_what_the_header_must_hold(write_file):
    path = write_file("t.csv", "batch_size,step_time_ms\n1,6.5\n")
    (message,) = problems_of(path)
    assert message == (
        f"{path}:1: missing column(s) num_speculative_tokens; the header must name batch_size, "
        "num_speculative_tokens, step_time_ms, got batch_size, step_time_ms"
    )


def test_unknown_and_repeated_columns_are_refused(write_file):
    path = write_file("t.csv", "batch_size,num_speculative_tokens,step_time_ms,tpot_ms,batch_size\n")
    found = problems_of(path)
    assert (
        f"{path}:1: column 4: unknown column 'tpot_ms'; allowed: batch_size, num_speculative_tokens, step_time_ms, "
        "concurrency, step_time_mad_ms" in found
    )
    assert f"{path}:1: column 5: column 'batch_size' appears twice" in found


def test_bad_cells_name_line_column_allowed_and_given(write_file):
    path = write_file(
        "t.csv",
        """\
        batch_size,num_speculative_tokens,step_time_ms
        1,0,fast
        2.5,0,6.0
        4,65,6.1
        8,0,-1
        16,0,0
        32,0
        """,
    )
    assert problems_of(path) == [
        f"{path}:2: column 3 (step_time_ms): must be a number of milliseconds > 0, got 'fast'",
        f"{path}:3: column 1 (batch_size): must be a whole number in [1, 1000000], got '2.5'",
        f"{path}:4: column 2 (num_speculative_tokens): must be a whole number in [0, 64], got '65'",
        f"{path}:5: column 3 (step_time_ms): must be a number of milliseconds in [0.01, 1e+06] (no GPU decode step takes under 10 microseconds), got '-1'",
        f"{path}:6: column 3 (step_time_ms): must be a number of milliseconds in [0.01, 1e+06] (no GPU decode step takes under 10 microseconds), got '0'",
        f"{path}:7: has 2 fields, the header has 3 (batch_size, num_speculative_tokens, step_time_ms)",
    ]


def test_non_finite_times_are_refused(write_file):
    path = write_file("t.csv", "batch_size,num_speculative_tokens,step_time_ms\n1,0,nan\n2,0,inf\n")
    found = problems_of(path)
    assert len(found) == 2 and all("must be a number of milliseconds in [0.01, 1e+06]" in m for m in found)


def test_duplicate_points_name_both_lines(write_file):
    path = write_file(
        "t.csv",
        """\
        batch_size,num_speculative_tokens,step_time_ms
        1,0,6.5
        8,0,6.9
        1,0,6.6
        """,
    )
    assert problems_of(path) == [
        f"{path}:4: duplicate point batch_size 1, num_speculative_tokens 0 (first at line 2); give each point once"
    ]


def test_a_k_with_one_batch_size_is_too_few_points(write_file):
    path = write_file("t.csv", "batch_size,num_speculative_tokens,step_time_ms\n1,0,6.5\n8,0,6.9\n4,2,7.5\n")
    assert problems_of(path) == [
        f"{path}:4: num_speculative_tokens 2 has 1 point (batch_size 4); each K needs >= 2 batch sizes to interpolate between"
    ]


def test_a_single_point_table_is_too_small(write_file):
    path = write_file("t.csv", "batch_size,num_speculative_tokens,step_time_ms\n1,0,6.5\n")
    found = problems_of(path)
    assert f"{path}: must have 2 to 10000 points (two batch sizes per K), got 1" in found


def test_a_huge_table_is_refused(write_file):
    rows = "\n".join(f"{b},{k},7.0" for k in range(10) for b in range(1, 1002))
    path = write_file("t.csv", "batch_size,num_speculative_tokens,step_time_ms\n" + rows + "\n")
    assert problems_of(path) == [f"{path}: must have 2 to 10000 points (two batch sizes per K), got 10010"]


def test_empty_missing_and_wrongly_named_files(write_file, tmp_path):
    assert problems_of(write_file("t.csv", "# nothing here\n\n")) == [
        f"{tmp_path / 't.csv'}: no header line; expected the columns batch_size, num_speculative_tokens, step_time_ms"
    ]
    assert problems_of(tmp_path / "absent.csv") == [f"{tmp_path / 'absent.csv'}: no such file"]
    assert problems_of(write_file("t.txt", GOOD_CSV)) == [
        f"{tmp_path / 't.txt'}: must be a .csv, .yaml or .yml file, got '.txt'"
    ]


def test_yaml_table_problems_are_located(write_file):
    path = write_file(
        "t.yaml",
        """\
        kind: step_time_table
        speed: 3
        points:
          - {batch_size: 1, num_speculative_tokens: 0, step_time_ms: true}
          - {batch_size: 8, step_time_ms: 6.9, tpot: 1}
          - 7
        """,
    )
    assert problems_of(path) == [
        f"{path}:2: speed: unknown field; allowed: kind, points, source, notes",
        f"{path}:4: points[0].step_time_ms: must be a number of milliseconds > 0, got True",
        f"{path}:5: points[1].tpot: unknown column; allowed: batch_size, num_speculative_tokens, step_time_ms",
        f"{path}:5: points[1].num_speculative_tokens: required column is missing",
        f"{path}:6: points[2]: must be a mapping with keys batch_size, num_speculative_tokens, step_time_ms, got 7",
    ]


def test_yaml_table_needs_a_points_list_and_its_own_kind(write_file):
    path = write_file("t.yaml", "kind: simulation\npoints: {batch_size: 1}\n")
    found = problems_of(path)
    assert f"{path}:1: kind: must be step_time_table, got 'simulation'" in found
    assert any(m.startswith(f"{path}:2: points: must be a list of") and m.endswith("got dict") for m in found)


def test_inline_table_checks_duplicates_too():
    with pytest.raises(
        ValidationError, match=r"duplicate point batch_size 1, num_speculative_tokens 0 \(first at points\[0\]\)"
    ):
        StepTimeTable.model_validate(
            {
                "points": [
                    {"batch_size": 1, "num_speculative_tokens": 0, "step_time_ms": 6.5},
                    {"batch_size": 1, "num_speculative_tokens": 0, "step_time_ms": 6.6},
                ]
            }
        )


def test_table_path_is_relative_to_the_document(load_deployment, write_file):
    write_file("tables/h100.csv", GOOD_CSV)
    doc = load_deployment("""\
        hardware: h100-sxm
        target_model: llama-3.1-8b
        drafter: eagle3-llama-3.1-8b
        cost_model: {method: measured, step_times: tables/h100.csv}
        """)
    table = doc.model.cost_model.step_times
    assert table.file.endswith("tables/h100.csv") and len(table.points) == 4
    assert doc.notices == []


def test_table_problems_show_the_document_and_the_table(load_deployment, write_file, tmp_path):
    write_file("bad.csv", "batch_size,num_speculative_tokens,step_time_ms\n1,0,6.5\n8,0,slow\n")
    with pytest.raises(DocumentError) as info:
        load_deployment("""\
            hardware: h100-sxm
            target_model: llama-3.1-8b
            cost_model:
              method: measured
              step_times: bad.csv
            """)
    (problem,) = info.value.problems
    assert (problem.line, problem.field) == (6, "cost_model.step_times")
    assert (
        problem.message
        == f"{tmp_path / 'bad.csv'}:3: column 3 (step_time_ms): must be a number of milliseconds > 0, got 'slow'"
    )


def test_measured_needs_a_table_and_roofline_refuses_one(load_deployment, write_file):
    with pytest.raises(
        DocumentError, match=r"cost_model.step_times: method 'measured' needs step_times \(a table file\), got none"
    ):
        load_deployment("hardware: h100-sxm\ntarget_model: llama-3.1-8b\ncost_model: {method: measured}\n")
    write_file("t.csv", GOOD_CSV)
    with pytest.raises(
        DocumentError, match="cost_model.step_times: only used with method: measured, got method: roofline"
    ):
        load_deployment("hardware: h100-sxm\ntarget_model: llama-3.1-8b\ncost_model: {step_times: t.csv}\n")


def test_measured_warns_about_ignored_overheads_and_a_missing_plain_decoding_row(load_deployment, write_file):
    write_file("t.csv", "batch_size,num_speculative_tokens,step_time_ms\n1,2,7.5\n8,2,8.0\n")
    doc = load_deployment("""\
        hardware: h100-sxm
        target_model: llama-3.1-8b
        cost_model: {method: measured, step_times: t.csv, overhead_s: 0.002}
        """)
    fields = sorted((notice.field, notice.message.split(" (")[0]) for notice in doc.notices)
    assert fields == [
        ("cost_model.overhead_s", "does not change measured step times"),
        ("cost_model.step_times", "the table has no num_speculative_tokens 0 points, so plain decoding"),
    ]


def test_cost_model_accepts_a_bare_method_name():
    assert CostModelConfig.model_validate("roofline").method == "roofline"

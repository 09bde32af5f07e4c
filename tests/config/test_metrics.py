"""The study's metrics record: the one list of metric names, and SLOs parsed once."""

import dataclasses
import math
import typing

import pytest

from spectune.config import CSV_METRICS, OBJECTIVE_METRICS, Constraint, Objective, StudyMetrics
from spectune.config._metrics import BOUND_METRICS, STUDY_METRICS, parse_constraint


def test_every_kept_metric_is_a_simulation_result_field_of_the_same_kind():
    from spectune.simulator import SimulationResult

    result_types = {f.name: str(f.type) for f in dataclasses.fields(SimulationResult)}
    kinds = {"float": "float", "int": "int", "bool": "bool", "floats": "list[float]"}
    for name, info in STUDY_METRICS.items():
        assert name in result_types, name
        assert result_types[name].startswith(kinds[info.kind]), (name, result_types[name], info.kind)


def test_the_derived_lists_are_the_fields_marked_for_them():
    assert tuple(STUDY_METRICS) == tuple(f.name for f in dataclasses.fields(StudyMetrics))
    assert set(CSV_METRICS) < set(STUDY_METRICS) and set(BOUND_METRICS) < set(STUDY_METRICS)
    assert "acceptance_per_position" not in CSV_METRICS + BOUND_METRICS  # not a number
    assert set(OBJECTIVE_METRICS) == set(typing.get_args(Objective))
    assert OBJECTIVE_METRICS == {"throughput": "throughput_tokens_per_s", "tpot_p99": "tpot_p99_ms"}
    assert all(name in BOUND_METRICS for name in OBJECTIVE_METRICS.values())


def test_a_result_mapping_reads_into_the_record_and_back_as_the_stored_json():
    result = {
        "throughput_tokens_per_s": 1234.5,
        "tpot_p99_ms": float("nan"),  # no finished request: not measured
        "acceptance_per_position": [0.8, 0.6],
        "num_drafts": 40,
        "truncated": False,
        "step_time_share": {"drafting": 0.1},  # about the run: not kept
    }
    metrics = StudyMetrics.from_mapping(result)
    assert metrics.throughput_tokens_per_s == 1234.5 and metrics.tpot_p99_ms is None
    assert metrics.acceptance_per_position == (0.8, 0.6) and metrics.num_drafts == 40 and metrics.truncated is False
    stored = metrics.to_attr()
    assert list(stored) == list(STUDY_METRICS) and "step_time_share" not in stored
    assert stored["acceptance_per_position"] == [0.8, 0.6] and stored["tpot_p99_ms"] is None
    assert StudyMetrics.from_mapping(stored) == metrics
    assert math.isnan(metrics.value("tpot_p99_ms")) and metrics.value("throughput_tokens_per_s") == 1234.5


def test_values_of_the_wrong_kind_read_as_not_measured():
    metrics = StudyMetrics.from_mapping(
        {
            "num_drafts": 2.5,
            "truncated": "no",
            "acceptance_per_position": [0.5, "x"],
            "tpot_p99_ms": True,
            "mean_step_ms": 3,
        }
    )
    assert (metrics.num_drafts, metrics.truncated, metrics.acceptance_per_position, metrics.tpot_p99_ms) == (None,) * 4
    assert metrics.mean_step_ms == 3.0 and isinstance(metrics.mean_step_ms, float)
    with pytest.raises(KeyError, match="acceptance_per_position"):
        metrics.value("acceptance_per_position")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("tpot_p99_ms <= 50", ("tpot_p99_ms", "<=", 50.0)),
        ("  throughput_tokens_per_s>=1e3 ", ("throughput_tokens_per_s", ">=", 1000.0)),
        ("itl_p99_ms <= .5", ("itl_p99_ms", "<=", 0.5)),
    ],
)
def test_a_constraint_is_parsed_once_into_metric_operator_and_bound(text, expected):
    constraint = parse_constraint(text)
    assert (constraint.metric, constraint.op, constraint.bound) == expected and constraint.text == text
    assert parse_constraint(constraint.label) == constraint.model_copy(update={"text": constraint.label})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("p99 <= 50", "METRIC must be one of throughput_tokens_per_s, tpot_p50_ms, .*, got 'p99' \\(in 'p99 <= 50'\\)"),
        ("mean_step_ms <= 5", "METRIC must be one of .*, got 'mean_step_ms'"),
        ("tpot_p99_ms < 50", "the operator must be '<=' or '>=', got '<'"),
        ("tpot_p99_ms <= inf", "NUMBER must be a finite number, got 'inf'"),
        ("tpot_p99_ms <= 50ms", "NUMBER must be a finite number, got '50ms'"),
        (
            "tpot_p99_ms",
            "must look like 'METRIC <= NUMBER' or 'METRIC >= NUMBER' with METRIC one of .*, got 'tpot_p99_ms'",
        ),
    ],
)
def test_a_bad_constraint_says_which_part_is_wrong(text, message):
    with pytest.raises(ValueError, match=message):
        parse_constraint(text)


def test_a_constraint_read_back_from_storage_checks_its_metric():
    assert Constraint.model_validate({"metric": "ttft_p99_ms", "op": ">=", "bound": 2}).bound == 2.0
    with pytest.raises(ValueError, match="must be one of"):
        Constraint.model_validate({"metric": "wall_time_s", "op": "<=", "bound": 1})


def test_step_scaled_metrics_are_the_throughputs_and_the_step_bound_latencies():
    from spectune.config import STEP_SCALED_METRICS

    assert {n for n, s in STEP_SCALED_METRICS.items() if s == "rate"} == {
        "throughput_tokens_per_s",
        "throughput_stderr_tokens_per_s",
    }
    assert {n for n, s in STEP_SCALED_METRICS.items() if s == "time"} == {
        "tpot_p50_ms",
        "tpot_p99_ms",
        "itl_p50_ms",
        "itl_p99_ms",
        "mean_step_ms",
    }

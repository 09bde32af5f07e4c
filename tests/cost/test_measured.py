"""Measured step-time tables: exact at their points, piecewise-linear between, bounded outside, held-back error."""

from __future__ import annotations

from pathlib import Path

import pytest

from spectune.config import CostModelConfig, DrafterSpec, HardwareConfig, StepTimeTable, TargetModelSpec
from spectune.config._base import SpectuneNotice
from spectune.cost import RooflineCostModel, build_cost_model
from spectune.cost._interface import OutOfTableRange
from spectune.cost._measured import MeasuredCostModel, StepTimeInterpolator

EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "step_times" / "h100-llama-3.1-8b-eagle3.csv"
H100 = HardwareConfig.model_validate("h100-sxm")
LLAMA_8B = TargetModelSpec.model_validate("llama-3.1-8b")
EAGLE3_8B = DrafterSpec.model_validate("eagle3-llama-3.1-8b")


def table(points: list[tuple[int, int, float]]) -> StepTimeTable:
    return StepTimeTable.model_validate(
        {"points": [{"batch_size": b, "num_speculative_tokens": k, "step_time_ms": ms} for b, k, ms in points]}
    )


def measured(points, **config) -> MeasuredCostModel:
    built = build_cost_model(
        H100, LLAMA_8B, EAGLE3_8B, CostModelConfig(method="measured", step_times=table(points), **config)
    )
    assert isinstance(built, MeasuredCostModel)
    return built


SMALL = [(1, 0, 6.0), (8, 0, 7.0), (32, 0, 11.0), (1, 2, 8.0), (8, 2, 9.0), (32, 2, 17.0)]


def test_example_table_is_reproduced_at_its_own_points():
    cost = build_cost_model(H100, LLAMA_8B, EAGLE3_8B, CostModelConfig(method="measured", step_times=str(EXAMPLE)))
    rows = [line.split(",") for line in EXAMPLE.read_text().splitlines()[5:]]
    assert len(rows) == 88
    for batch_size, k, ms in rows:
        assert cost.step_time(int(batch_size), int(k), 1024.0).total_s == pytest.approx(float(ms) / 1e3, rel=1e-12)


def test_piecewise_linear_in_batch_size_between_points():
    cost = measured(SMALL)
    assert cost.step_time(4, 0, 0).total_s == pytest.approx((6.0 + (7.0 - 6.0) * 3 / 7) / 1e3)
    assert cost.step_time(20, 2, 0).total_s == pytest.approx((9.0 + (17.0 - 9.0) * 12 / 24) / 1e3)


def test_linear_in_k_between_measured_k():
    cost = measured(SMALL)
    assert cost.step_time(8, 1, 0).total_s == pytest.approx(8.0e-3)
    # at batch 20: K=0 row gives 9.0 ms, K=2 row gives 13.0 ms
    assert cost.step_time(20, 1, 0).total_s == pytest.approx(11.0e-3)


def test_below_the_smallest_batch_size_the_time_is_flat():
    points = [(4, 0, 6.4), (8, 0, 7.0)]
    assert measured(points).step_time(1, 0, 0).total_s == pytest.approx(6.4e-3)


def test_above_the_largest_batch_size_the_last_slope_holds_up_to_twice_it():
    cost = measured(SMALL)
    assert cost.step_time(64, 0, 0).total_s == pytest.approx((11.0 + 4.0 / 24 * 32) / 1e3)
    with pytest.raises(
        OutOfTableRange,
        match=r"batch_size 65 is beyond what num_speculative_tokens 0 covers "
        r"\(measured up to 32, extrapolated to 64\); measure larger batches",
    ):
        cost.step_time(65, 0, 0)


def test_extrapolation_never_runs_downhill():
    interpolate = StepTimeInterpolator([(1, 0, 0.007), (8, 0, 0.006)])
    assert interpolate(16, 0) == pytest.approx(0.006)


def test_k_outside_the_table_is_refused_with_what_it_covers():
    with pytest.warns(SpectuneNotice, match="no num_speculative_tokens 0 points"):
        cost = measured([(1, 1, 7.0), (8, 1, 7.5), (1, 3, 8.0), (8, 3, 8.5)])
    assert cost.limits.min_num_speculative_tokens == 1 and cost.limits.max_num_speculative_tokens == 3
    assert cost.limits.max_batch_size == 16
    for k in (0, 4):
        with pytest.raises(
            OutOfTableRange,
            match=rf"the inline step-time table: num_speculative_tokens {k} is outside "
            r"the measured K \(1..3\)",
        ):
            cost.step_time(2, k, 0)


def test_phase_split_follows_the_roofline_scaled_to_the_measured_total():
    cost = measured(SMALL)
    roofline = RooflineCostModel(H100, LLAMA_8B, EAGLE3_8B, CostModelConfig())
    step, estimate = cost.step_time(8, 2, 500), roofline.step_time(8, 2, 500)
    assert step.total_s == pytest.approx(9.0e-3)
    assert step.drafting_s / step.verification_s == pytest.approx(estimate.drafting_s / estimate.verification_s)
    assert step.sampling_s / step.overhead_s == pytest.approx(estimate.sampling_s / estimate.overhead_s)


def test_context_correction_adds_the_rooflines_kv_reads():
    cost = measured(SMALL, step_times_context_tokens=1000)
    roofline = RooflineCostModel(H100, LLAMA_8B, EAGLE3_8B, CostModelConfig())
    assert cost.step_time(8, 2, 1000).total_s == pytest.approx(9.0e-3)
    added = roofline.step_time(8, 2, 5000).total_s - roofline.step_time(8, 2, 1000).total_s
    assert added > 0.5e-3
    assert cost.step_time(8, 2, 5000).total_s == pytest.approx(9.0e-3 + added)
    without = measured(SMALL)
    assert without.step_time(8, 2, 5000).total_s == pytest.approx(9.0e-3)


def test_prefill_comes_from_the_roofline():
    roofline = RooflineCostModel(H100, LLAMA_8B, EAGLE3_8B, CostModelConfig())
    assert measured(SMALL).prefill_time(1000) == roofline.prefill_time(1000)


def test_fit_report_is_leave_one_out_under_the_same_policy():
    # t = B^2: each held-back point is predicted from its neighbours (or the flat/slope rules at the ends)
    cost = measured([(1, 0, 1.0), (2, 0, 4.0), (4, 0, 16.0), (8, 0, 64.0)])
    report = cost.fit_report()
    predicted = {(p.batch_size, p.num_speculative_tokens): p.predicted_s for p in report.held_out}
    assert predicted == pytest.approx({(1, 0): 4e-3, (2, 0): 6e-3, (4, 0): 24e-3, (8, 0): 40e-3})
    assert report.mean_relative_error == pytest.approx((3.0 + 0.5 + 0.5 + 0.375) / 4)
    assert report.max_relative_error == pytest.approx(3.0)
    assert report.worst_point.batch_size == 1
    assert "mean relative error 109.4%, max 300.0% (batch_size 1, num_speculative_tokens 0)" in report.summary()


def test_fit_report_is_exact_for_a_linear_table_except_where_the_flat_rule_applies():
    def line(b: int, k: int) -> float:
        return 6.0 + 0.1 * b + 0.5 * k

    report = measured([(b, k, line(b, k)) for k in (0, 2, 4) for b in (1, 4, 16, 32)]).fit_report()
    assert report.skipped == ()
    for point in report.held_out:
        # interior and top points are on the line; the smallest batch size is predicted flat from the next one
        b, k = point.batch_size, point.num_speculative_tokens
        assert point.predicted_s * 1e3 == pytest.approx(line(4, k) if b == 1 else line(b, k), rel=1e-12)


def test_fit_report_holds_back_k_rows_through_k_interpolation_and_skips_what_it_cannot_reach():
    # Each K has two points. Without one of K=1's, K=1 is predicted from the K=0 and K=2 rows; without
    # one of K=0's (or K=2's), that K drops out and is outside the remaining K range: skipped.
    points = [(1, 0, 6.0), (8, 0, 7.0), (1, 1, 7.5), (8, 1, 8.5), (1, 2, 8.0), (8, 2, 9.0)]
    report = measured(points).fit_report()
    predicted = {(p.batch_size, p.num_speculative_tokens): p.predicted_s for p in report.held_out}
    assert predicted == pytest.approx({(1, 1): 7.0e-3, (8, 1): 8.0e-3})
    assert set(report.skipped) == {(1, 0), (8, 0), (1, 2), (8, 2)}
    assert report.num_points == 6
    assert report.max_relative_error == pytest.approx(0.5 / 7.5)


def test_fit_report_skips_points_beyond_the_extrapolation_bound():
    report = measured([(1, 0, 6.0), (2, 0, 6.1), (64, 0, 9.0)]).fit_report()
    assert (64, 0) in report.skipped
    assert len(report.held_out) == 2

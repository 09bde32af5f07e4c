"""Pareto fronts of a two-objective study (throughput up, p99 TPOT down)."""

from study_doubles import make_point, make_space

from spectune.study import evaluate_metrics, pareto_front


def test_pareto_front_keeps_exactly_the_non_dominated_points():
    space = make_space()
    values = [(100, 10), (200, 20), (150, 25), (200, 15), (50, 5), (50, 6)]
    evaluations = [
        evaluate_metrics(
            space, make_point(8, "eagle3/standard/greedy", i + 1), {"throughput_tokens_per_s": t, "tpot_p99_ms": p}, i
        )
        for i, (t, p) in enumerate(values)
    ]
    front = [(e.throughput, e.metrics.tpot_p99_ms) for e in pareto_front(evaluations)]
    assert front == [(50, 5), (100, 10), (200, 15)]


def test_a_point_without_a_finite_tpot_is_on_no_front():
    space = make_space()
    measured = evaluate_metrics(
        space, make_point(8, "eagle3/standard/greedy", 1), {"throughput_tokens_per_s": 100, "tpot_p99_ms": 10}, 0
    )
    unmeasured = evaluate_metrics(
        space, make_point(8, "eagle3/standard/greedy", 2), {"throughput_tokens_per_s": 500}, 1
    )
    assert pareto_front([measured, unmeasured]) == [measured]

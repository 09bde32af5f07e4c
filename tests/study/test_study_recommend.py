"""Choosing K per bucket (ties within noise go to the smaller K), the combo, and the schedule rows."""

import random

import pytest
from study_doubles import SyntheticEvaluator, make_point, make_space

from spectune.config import SpeculativeConfig, StudyMetrics
from spectune.study import Point, evaluate_metrics, recommend
from spectune.study._recommend import choose_in_bucket, merge_schedule
from spectune.study._space import Constraint

SPACE = make_space(batch_sizes=(1, 8, 32, 128), max_k=6)


def _evaluation(point, throughput, stderr=0.0, tpot=10.0, space=SPACE):
    metrics = {"throughput_tokens_per_s": throughput, "throughput_stderr_tokens_per_s": stderr, "tpot_p99_ms": tpot}
    return evaluate_metrics(space, point, metrics, 0)


def test_a_larger_k_within_two_sigma_loses_to_the_smaller_k():
    small = _evaluation(make_point(8, "eagle3/standard/greedy", 3), 1000.0, stderr=10.0)
    large = _evaluation(
        make_point(8, "eagle3/standard/greedy", 5), 1025.0, stderr=10.0
    )  # 25 < 2 * hypot(10, 10) = 28.3
    assert choose_in_bucket([large, small]) is small


def test_a_larger_k_beyond_two_sigma_wins():
    small = _evaluation(make_point(8, "eagle3/standard/greedy", 3), 1000.0, stderr=10.0)
    large = _evaluation(make_point(8, "eagle3/standard/greedy", 5), 1030.0, stderr=10.0)
    assert choose_in_bucket([large, small]) is large


def test_without_stderr_the_half_percent_floor_makes_the_tie():
    small = _evaluation(make_point(8, "eagle3/standard/greedy", 2), 1000.0)
    large = _evaluation(make_point(8, "eagle3/standard/greedy", 4), 1004.9)
    larger = _evaluation(make_point(8, "eagle3/standard/greedy", 6), 1006.0)
    assert choose_in_bucket([small, large]) is small
    assert choose_in_bucket([small, larger]) is larger


def test_a_feasible_point_beats_any_faster_infeasible_one():
    space = make_space(constraints=(Constraint(metric="tpot_p99_ms", op="<=", bound=20.0),))
    fast = _evaluation(make_point(8, "eagle3/standard/greedy", 5), 2000.0, tpot=25.0, space=space)
    slow = _evaluation(make_point(8, "eagle3/standard/greedy", 1), 900.0, tpot=15.0, space=space)
    assert not fast.feasible and slow.feasible
    assert choose_in_bucket([fast, slow]) is slow
    worse = _evaluation(make_point(8, "eagle3/standard/greedy", 6), 2100.0, tpot=40.0, space=space)
    assert choose_in_bucket([fast, worse]) is fast  # nothing feasible: the least violation


def test_merge_schedule_joins_identical_neighbours_only():
    rows = [(1, 2, 5), (3, 16, 5), (17, 64, 3), (65, 128, 5), (129, 256, 5)]
    assert merge_schedule(rows) == [(1, 16, 5), (17, 64, 3), (65, 256, 5)]


def test_schedule_rows_are_sorted_contiguous_and_validate_for_random_results():
    rng = random.Random(3)
    for _ in range(50):
        completed = {}
        for point in SPACE.points():
            if rng.random() < 0.7:
                completed[point] = _evaluation(point, rng.uniform(100, 5000), stderr=rng.uniform(0, 50))
        recommendation = recommend(SPACE, completed)
        if recommendation is None:
            continue
        rows = recommendation.schedule
        assert rows[0][0] == 1 and rows[-1][1] == SPACE.max_batch_size
        for (start, end, k), (next_start, _, next_k) in zip(rows, rows[1:]):
            assert start <= end and next_start == end + 1 and k != next_k
        assert all(0 <= k <= recommendation.num_speculative_tokens for _, _, k in rows)
        assert recommendation.num_speculative_tokens == max(1, max(k for _, _, k in rows))
        SpeculativeConfig(
            method="eagle3", num_speculative_tokens=recommendation.num_speculative_tokens,
            num_speculative_tokens_per_batch_size=[list(r) for r in rows],
        )  # fmt: skip


def test_recommendation_is_one_combo_with_its_own_k_per_bucket():
    evaluator = SyntheticEvaluator(noise=0.0)
    completed = {p: evaluate_metrics(SPACE, p, evaluator(p), 0) for p in SPACE.points()}
    recommendation = recommend(SPACE, completed)
    best_label = max(recommendation.ranking, key=lambda s: s.aggregate_throughput_tokens_per_s).combo.label
    assert recommendation.combo.label == best_label == "eagle3/block/probabilistic"
    for choice in recommendation.choices:
        assert choice.evaluation.point.label in (best_label, "off")
    ks = [c.num_speculative_tokens for c in recommendation.choices]
    assert ks == sorted(ks, reverse=True) and ks[0] > ks[-1]  # the double's optimum falls with batch size


def test_near_tied_combos_go_to_the_earlier_one():
    completed = {}
    for bs in SPACE.batch_sizes:
        completed[make_point(bs, "eagle3/standard/greedy", 3)] = _evaluation(
            make_point(bs, "eagle3/standard/greedy", 3), 1000.0
        )
        completed[make_point(bs, "eagle3/block/greedy", 3)] = _evaluation(
            make_point(bs, "eagle3/block/greedy", 3), 1003.0
        )
    assert recommend(SPACE, completed).combo.label == "eagle3/standard/greedy"
    for bs in SPACE.batch_sizes:
        completed[make_point(bs, "eagle3/block/greedy", 3)] = _evaluation(
            make_point(bs, "eagle3/block/greedy", 3), 1020.0
        )
    assert recommend(SPACE, completed).combo.label == "eagle3/block/greedy"


def test_bucket_never_simulated_for_the_combo_copies_a_neighbour_and_says_so():
    completed = {}
    for bs in (1, 8, 32):
        point = make_point(bs, "eagle3/standard/greedy", 4)
        completed[point] = _evaluation(point, 1000.0)
    recommendation = recommend(SPACE, completed)
    last = recommendation.choices[-1]
    assert last.batch_size == 128 and last.num_speculative_tokens == 4 and last.evaluation is None
    assert any("batch size 128: not simulated; K copied from batch size 32" in n for n in recommendation.notes)


def test_speculation_off_everywhere_is_a_valid_all_zero_schedule():
    completed = {}
    for bs in SPACE.batch_sizes:
        completed[Point.off(bs)] = _evaluation(Point.off(bs), 1000.0)
        completed[make_point(bs, "ngram/standard/greedy", 1)] = _evaluation(
            make_point(bs, "ngram/standard/greedy", 1), 800.0
        )
    recommendation = recommend(SPACE, completed)
    assert recommendation.schedule == ((1, 256, 0),)
    assert recommendation.num_speculative_tokens == 1 and recommendation.speculation_off_everywhere
    assert any("does not pay off" in n and "serve without a speculative config" in n for n in recommendation.notes)


def test_comparison_noise_is_the_acceptance_noise_of_the_counters():
    import math

    import numpy as np

    from spectune.study._records import comparison_noise

    conditional = [0.8, 0.7, 0.6, 0.5]
    rng = np.random.default_rng(0)
    draws = rng.random((200_000, len(conditional))) < np.array(conditional)
    accepted = np.cumprod(draws, axis=1).sum(axis=1)  # drafts accepted per step: stop at the first rejection
    unconditional = list(np.cumprod(conditional))
    drafts = 5000
    metrics = StudyMetrics(
        num_drafts=drafts, acceptance_per_position=tuple(unconditional), mean_acceptance_length=1 + sum(unconditional)
    )
    expected = 1000.0 * math.sqrt(accepted.var() / drafts) / (1 + accepted.mean())
    assert comparison_noise(metrics, 1000.0, 1e9) == pytest.approx(expected, rel=0.02)
    assert comparison_noise(metrics, 1000.0, 1.0) == 1.0  # never more than the simulator's own error
    assert comparison_noise(StudyMetrics(num_drafts=0), 1000.0, 30.0) == 0.0  # plain decoding: nothing random
    assert comparison_noise(StudyMetrics(), 1000.0, 30.0) == 30.0  # no counters: the simulator's error


def test_ties_use_the_noise_not_common_to_the_bucket():
    counters = {"num_drafts": 100_000, "acceptance_per_position": [0.7, 0.5, 0.35], "mean_acceptance_length": 2.55}
    small = evaluate_metrics(
        SPACE,
        make_point(8, "eagle3/standard/greedy", 3),
        counters | {"throughput_tokens_per_s": 1000.0, "throughput_stderr_tokens_per_s": 60.0},
        0,
    )
    large = evaluate_metrics(
        SPACE,
        make_point(8, "eagle3/standard/greedy", 5),
        counters | {"throughput_tokens_per_s": 1030.0, "throughput_stderr_tokens_per_s": 60.0},
        0,
    )
    assert small.noise < 5 and large.noise < 5  # the 6 % drift of the load is shared by both
    assert choose_in_bucket([small, large]) is large  # 3 % apart: beyond 2 sigma and the 0.5 % floor

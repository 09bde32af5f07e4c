"""The search space: points, the shared K = 0 point, bucket ranges, persistence."""

import pytest
from study_doubles import make_space

from spectune.study import Point, StudySpace
from spectune.study._space import Candidate, Combo, Constraint, bucket_ranges


def test_points_are_distinct_and_k0_is_one_point_per_bucket():
    space = make_space(batch_sizes=(1, 8, 32), max_k=5)
    points = list(space.points())
    assert len(points) == len(set(points)) == space.size
    off = [p for p in points if p.num_speculative_tokens == 0]
    assert off == [Point.off(1), Point.off(8), Point.off(32)]
    # 5 combos (eagle3: 2 rules x 2 samplings, ngram: 1) x K 1..5, plus K = 0, per bucket
    assert space.size == 3 * (1 + 5 * 5)


def test_point_of_k0_ignores_the_combo():
    space = make_space()
    assert space.point(8, "eagle3/block/probabilistic", 0) == space.point(8, "ngram/standard/greedy", 0)
    assert space.point(8, "eagle3/block/probabilistic", 2) != space.point(8, "ngram/standard/greedy", 2)


def test_k_values_with_a_lower_bound_keep_zero():
    space = StudySpace(
        name="s",
        candidates=(Candidate("e", {"method": "eagle3"}),),
        combos=(Combo("e", "standard", "greedy"),),
        batch_sizes=(4,),
        min_num_speculative_tokens=3,
        max_num_speculative_tokens=5,
        max_batch_size=4,
    )
    assert space.k_values == (0, 3, 4, 5)
    assert [p.num_speculative_tokens for p in space.points()] == [0, 3, 4, 5]


@pytest.mark.parametrize(
    ("batch_sizes", "max_batch_size", "expected"),
    [
        ((1, 8, 32, 128), 256, [(1, 2), (3, 16), (17, 64), (65, 256)]),
        ((1, 2, 3), 3, [(1, 1), (2, 2), (3, 3)]),
        ((16,), 512, [(1, 512)]),
        ((4, 5, 100), 100, [(1, 4), (5, 22), (23, 100)]),
    ],
)
def test_bucket_ranges_are_contiguous_from_one_and_contain_their_bucket(batch_sizes, max_batch_size, expected):
    ranges = bucket_ranges(batch_sizes, max_batch_size)
    assert ranges == expected
    assert ranges[0][0] == 1 and ranges[-1][1] == max_batch_size
    for (_, end), (next_start, _) in zip(ranges, ranges[1:]):
        assert next_start == end + 1
    for batch_size, (start, end) in zip(batch_sizes, ranges):
        assert start <= batch_size <= end


def test_representative_bucket_is_the_heaviest_or_the_lower_median():
    assert make_space(batch_sizes=(1, 8, 32, 128)).representative_bucket() == 1
    assert make_space(batch_sizes=(1, 8, 32)).representative_bucket() == 1
    assert make_space(batch_sizes=(1, 8, 32), weights=(1, 1, 5)).representative_bucket() == 2


def test_space_round_trips_through_json():
    space = make_space(
        constraints=(Constraint(metric="tpot_p99_ms", op="<=", bound=50.0),), objectives=("throughput", "tpot_p99")
    )
    import json

    again = StudySpace.from_json(json.loads(json.dumps(space.to_json())))
    assert again == space
    assert list(again.points()) == list(space.points())


def test_constraint_violation_is_positive_only_when_the_slo_is_missed():
    le = Constraint(metric="tpot_p99_ms", op="<=", bound=50.0)
    ge = Constraint(metric="throughput_tokens_per_s", op=">=", bound=1000.0)
    assert le.violation(40.0) < 0 < le.violation(60.0)
    assert ge.violation(1200.0) < 0 < ge.violation(900.0)
    assert le.violation(float("nan")) == float("inf")


def test_inconsistent_space_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="batch_sizes must be distinct, sorted"):
        make_space(batch_sizes=(8, 1))
    with pytest.raises(ValueError, match="max_batch_size must be >= the largest batch size"):
        StudySpace("s", (), (Combo("e", "standard", "greedy"),), (1, 8), 1, 3, max_batch_size=4)


def test_a_point_holds_its_combo_and_k0_holds_none():
    space = make_space()
    combo = space.combo("eagle3/block/greedy")
    assert space.point(8, "eagle3/block/greedy", 3) == Point(8, combo, 3) and Point(8, combo, 3).label == combo.label
    assert space.point(8, "eagle3/block/greedy", 0) == Point.off(8) and Point.off(8).label == "off"
    with pytest.raises(TypeError, match="must be a Combo"):
        Point(8, "eagle3/block/greedy", 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no combo exactly when K = 0"):
        Point(8, None, 3)
    with pytest.raises(ValueError, match="no combo exactly when K = 0"):
        Point(8, combo, 0)


def test_points_sort_by_batch_size_label_k_and_refinement():
    ngram = make_space(methods=("ngram",)).combos[0]
    points = [Point(8, ngram, 1), Point.off(8), Point(1, ngram, 2), Point(1, ngram, 1, 1), Point(1, ngram, 1)]
    assert sorted(points) == [
        Point(1, ngram, 1),
        Point(1, ngram, 1, 1),
        Point(1, ngram, 2),
        Point(8, ngram, 1),
        Point.off(8),
    ]


def test_a_trial_of_a_combo_outside_the_space_is_refused_by_name():
    import optuna

    from spectune.errors import SpectuneError
    from spectune.study._records import trial_point

    space = make_space()
    labels = ["medusa/standard/greedy", *(c.label for c in space.combos)]
    distributions = {
        "batch_size": optuna.distributions.CategoricalDistribution([8]),
        "combo": optuna.distributions.CategoricalDistribution(labels),
        "num_speculative_tokens": optuna.distributions.IntDistribution(0, 6),
    }
    known = optuna.trial.create_trial(
        params={"batch_size": 8, "combo": labels[1], "num_speculative_tokens": 2},
        distributions=distributions,
        value=1.0,
    )
    assert trial_point(space, known) == space.point(8, labels[1], 2)
    foreign = optuna.trial.create_trial(
        params={"batch_size": 8, "combo": labels[0], "num_speculative_tokens": 2},
        distributions=distributions,
        value=1.0,
    )
    with pytest.raises(SpectuneError, match="trial -1: combo 'medusa/standard/greedy' is not one of the study's"):
        trial_point(space, foreign)

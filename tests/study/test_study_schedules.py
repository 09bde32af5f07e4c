"""K tables an engineer can trust: the plateau's low end, monotone tables from tie sets, adaptive precision.

The planted evaluator (``study_doubles.PlantedEvaluator``) returns exact throughputs from curves the
test chooses, with a stated noise, so each test knows the right answer.
"""

import dataclasses
from collections import Counter

import pytest
from study_doubles import PlantedEvaluator, SyntheticEvaluator, fingerprint, make_point, make_space, plateau_curve

from spectune.study import (
    SearchState,
    evaluate_metrics,
    load_outcome,
    recommend,
    run_study,
    structured_converged,
    structured_next_point,
    structured_next_points,
)
from spectune.study._recommend import bucket_tie_set, monotone_ks

EAGLE = "eagle3/standard/greedy"


def _space(batch_sizes, max_k=8):
    return make_space(batch_sizes=batch_sizes, max_k=max_k, methods=("eagle3",))


def _curves(space, plateaus, *, other_level=0.9):
    """Every combo of ``space`` with the planted plateaus; every combo but the first ``other_level`` as fast."""
    curves = {}
    for i, combo in enumerate(space.combos):
        for batch_size, (low, high) in zip(space.batch_sizes, plateaus):
            level = 1000.0 * batch_size * (1 if i == 0 else other_level)
            curves[(combo.label, batch_size)] = plateau_curve(
                low, high, max_k=space.max_num_speculative_tokens, level=level
            )
    return curves


def _search(space, evaluator, *, keep_combos=1, refine_budget=0.5, batched=False):
    """Run the structured search on a state in memory: one point at a time, or every needed point at once."""
    state = SearchState(space)
    while not structured_converged(state, keep_combos=keep_combos, refine_budget=refine_budget):
        if batched:
            points = structured_next_points(state, keep_combos=keep_combos, refine_budget=refine_budget)
        else:
            points = [structured_next_point(state, keep_combos=keep_combos, refine_budget=refine_budget)]
        assert points and points[0] is not None
        for point in points:
            assert point not in state.completed
            state.completed[point] = evaluate_metrics(space, point, evaluator(point), len(state.completed))
    return state


def test_the_search_finds_each_plateaus_low_end_and_the_k_below_it():
    plateaus = [(5, 8), (5, 8), (4, 7), (3, 6), (2, 4), (1, 2)]  # the raw best is each plateau's high end
    space = _space((1, 2, 4, 16, 64, 256))
    state = _search(space, PlantedEvaluator(_curves(space, plateaus)))
    recommendation = recommend(space, state.completed)
    assert recommendation.combo.label == EAGLE
    assert space.batch_sizes[space.representative_bucket()] == 4
    for i, (batch_size, (low, _)) in enumerate(zip(space.batch_sizes, plateaus)):
        assert make_point(batch_size, EAGLE, low) in state.completed
        assert bucket_tie_set(space, EAGLE, batch_size, state.completed).ks[0] == low
        # The K below, which does not tie -- below the representative batch size only while it is not
        # below the low end of the next larger batch size (a table using it would rise there).
        needed = batch_size >= 4 or low - 1 >= plateaus[i + 1][0]
        assert (space.point(batch_size, EAGLE, low - 1) in state.completed) == needed, batch_size
        if not needed:  # and the tie set says so
            assert (
                bucket_tie_set(space, EAGLE, batch_size, state.completed)
                .describe()
                .endswith(f"(K {low - 1} not simulated)")
            )
    # Overlapping tie sets share one K (vLLM captures CUDA graphs per K): two rows instead of five.
    assert [c.num_speculative_tokens for c in recommendation.choices] == [5, 5, 5, 5, 2, 2]
    assert recommendation.schedule == ((1, 32, 5), (33, 256, 2))
    assert len(state.completed) <= 0.35 * space.size


def test_a_noisy_plateau_still_gives_a_non_increasing_table():
    plateaus = [(5, 8), (5, 8), (4, 7), (4, 7), (3, 6), (2, 4), (1, 3)]
    space = make_space(batch_sizes=(1, 2, 4, 8, 16, 64, 256), max_k=8)
    for seed in range(5):
        curves = _curves(make_space(batch_sizes=space.batch_sizes, max_k=8), plateaus)
        noisy = PlantedEvaluator(curves, noise=0.004)
        state = _search(space, lambda p, noisy=noisy, seed=seed: _jitter(noisy(p), p, seed))
        ks = [c.num_speculative_tokens for c in recommend(space, state.completed).choices]
        assert ks == sorted(ks, reverse=True), f"seed {seed}: {ks}"


def _jitter(metrics, point, seed):
    """The planted value moved by up to +-0.4 % (deterministic per seed and point): inside the noise."""
    import hashlib

    u = int.from_bytes(hashlib.sha256(f"{seed}|{point.key}".encode()).digest()[:8], "big") / 2**64
    return metrics | {"throughput_tokens_per_s": metrics["throughput_tokens_per_s"] * (1 + 0.008 * (u - 0.5))}


def test_monotone_choice_takes_k_from_each_tie_set_and_merges_overlapping_neighbours():
    assert monotone_ks([[4, 5, 6, 7, 8], [5, 6, 7, 8], [3, 4, 5]]) == [5, 5, 5]  # one K for all: no change at all
    assert monotone_ks([[4, 5, 6, 7, 8], [5, 6, 7, 8], [2, 3]]) == [5, 5, 2]
    assert monotone_ks([[6], [4, 7], [5]]) == [6, 4, 5]  # one rise either way: the smaller K
    assert monotone_ks([[3], [6], [2]]) == [3, 6, 2]  # the rise cannot be avoided


def test_smallest_tied_k_alone_would_rise_and_the_monotone_table_does_not():
    space = _space((1, 4, 16))
    completed = {}
    plateaus = {1: range(4, 9), 4: range(5, 9), 16: range(3, 5)}  # smallest tie: 4, 5, 3 (a rise)
    for batch_size, tied in plateaus.items():
        for k in space.k_values:
            point = space.point(batch_size, EAGLE, k)
            value = 1000.0 if k in tied else 800.0
            completed[point] = evaluate_metrics(
                space, point, {"throughput_tokens_per_s": value, "throughput_stderr_tokens_per_s": 1.0}, 0
            )
    recommendation = recommend(space, completed)
    assert [c.num_speculative_tokens for c in recommendation.choices] == [5, 5, 3]
    assert not any("rises" in note for note in recommendation.notes)
    assert recommendation.choices[0].ties.describe() == "K 4\u20138 within 0.5%"


def test_a_real_increase_outside_the_noise_is_kept_and_explained():
    space = _space((1, 8, 64))
    curves = _curves(space, [(3, 3), (6, 6), (2, 2)])  # sharp peaks: 3, then 6, then 2
    state = _search(space, PlantedEvaluator(curves, noise=0.002))
    recommendation = recommend(space, state.completed)
    assert [c.num_speculative_tokens for c in recommendation.choices] == [3, 6, 2]
    assert recommendation.schedule == ((1, 2, 3), (3, 22, 6), (23, 256, 2))
    rises = [note for note in recommendation.notes if "rises" in note]
    assert len(rises) == 1 and rises[0].startswith("K rises from 3 at batch size 1 to 6 at batch size 8")


def _two_combos(gap, noise):
    """One bucket; eagle3/block/greedy ``gap`` faster than the earlier eagle3/standard/greedy at every K."""
    space = make_space(batch_sizes=(8,), max_k=3, methods=("eagle3",))
    space = dataclasses.replace(space, combos=space.combos[:1] + space.combos[2:3])
    curve = {0: 400.0, 1: 700.0, 2: 1000.0, 3: 900.0}
    curves = {
        (space.combos[0].label, 8): curve,
        (space.combos[1].label, 8): {k: v * (1 + gap) for k, v in curve.items()},
    }
    return space, PlantedEvaluator(curves, noise=noise)


def test_adaptive_precision_separates_two_combos_one_percent_apart():
    space, evaluator = _two_combos(0.01, noise=0.006)  # 2 sigma of the difference: 1.7 %, then 0.85 % at 4x requests
    assert [c.label for c in space.combos] == [EAGLE, "eagle3/block/greedy"]
    one_pass = _search(space, evaluator, keep_combos=2, refine_budget=0.0)
    assert recommend(space, one_pass.completed).combo.label == EAGLE  # a tie: the earlier combo
    assert any("within the noise" in n for n in recommend(space, one_pass.completed).notes)
    refined = _search(space, evaluator, keep_combos=2, refine_budget=2.0)
    assert recommend(space, refined.completed).combo.label == "eagle3/block/greedy"
    extra = [p for p in refined.completed if p.refinement]
    assert sorted(extra) == sorted(
        [make_point(8, EAGLE, 2, 1), make_point(8, "eagle3/block/greedy", 2, 1)]
    )  # only the contested points


def test_adaptive_precision_stops_at_its_budget_and_calls_the_rest_a_tie():
    space, evaluator = _two_combos(0.01, noise=0.006)
    state = _search(space, evaluator, keep_combos=2, refine_budget=0.5)  # 8 refined simulations' worth > 0.5 x 7
    assert not [p for p in state.completed if p.refinement]
    assert recommend(space, state.completed).combo.label == EAGLE


def test_adaptive_precision_narrows_a_tie_set_that_changes_the_table():
    space = _space((1, 64), max_k=6)
    curves = {
        (EAGLE, 1): {0: 300.0, 1: 600.0, 2: 800.0, 3: 985.0, 4: 1000.0, 5: 990.0, 6: 950.0},  # 3 is 1.5 % below
        (EAGLE, 64): {0: 9000.0, 1: 9500.0, 2: 9000.0, 3: 8000.0, 4: 7000.0, 5: 6000.0, 6: 5000.0},
    }
    for combo in space.combos[1:]:
        for batch_size in (1, 64):
            curves[(combo.label, batch_size)] = {k: v * 0.8 for k, v in curves[(EAGLE, batch_size)].items()}
    evaluator = PlantedEvaluator(curves, noise=0.008)  # 2 sigma 2.3 %: K 3 ties by noise alone
    coarse = _search(space, evaluator, refine_budget=0.0)
    assert bucket_tie_set(space, EAGLE, 1, coarse.completed).ks == (3, 4, 5)
    assert [c.num_speculative_tokens for c in recommend(space, coarse.completed).choices] == [3, 1]
    fine = _search(space, evaluator, refine_budget=2.0)
    ties = bucket_tie_set(space, EAGLE, 1, fine.completed)
    assert ties.refinement >= 1 and 3 not in ties.ks
    assert [c.num_speculative_tokens for c in recommend(space, fine.completed).choices] == [4, 1]
    assert {p.batch_size for p in fine.completed if p.refinement} == {1}  # batch size 64 needed no precision


@pytest.mark.parametrize("noise", [0.004, 0.01])
def test_batched_steps_evaluate_what_one_at_a_time_does_and_little_more(noise):
    # Batched, a warm K search probes its start's two neighbours with it (one of them wasted when the
    # optimum moved), and a bucket starts from its neighbour's best before the neighbour is settled (a
    # start the neighbour's later results move wastes what it probed); one at a time the search learns
    # each result before the next probe.
    space = make_space(batch_sizes=(1, 4, 16, 64, 256), max_k=8)
    evaluator = SyntheticEvaluator(noise=noise)
    one = _search(space, evaluator, keep_combos=2)
    batched = _search(space, evaluator, keep_combos=2, batched=True)
    assert set(one.completed) <= set(batched.completed)
    assert len(batched.completed) <= 1.25 * len(one.completed)
    assert recommend(space, one.completed).schedule == recommend(space, batched.completed).schedule


def test_batches_hold_independent_steps():
    space = make_space(batch_sizes=(1, 4, 16, 64, 256), max_k=8)
    evaluator = SyntheticEvaluator(noise=0.0)
    state = SearchState(space)
    widths = []
    while points := structured_next_points(state, keep_combos=2):
        if structured_converged(state, keep_combos=2):
            break
        widths.append(len(points))
        for point in points:
            state.completed[point] = evaluate_metrics(space, point, evaluator(point), 0)
    assert max(widths) >= 8  # the first combo's whole curve at once, with the plain-decoding baselines
    # Warm searches probe a start with both its neighbours, and a bucket hands its start on while its
    # plateau is probed: about five points a round (a round at a time: fewer than one in three).
    assert len(widths) <= len(state.completed) / 4


def test_the_walk_starts_a_bucket_before_its_neighbour_is_settled():
    # Nine buckets, the representative one (16) in the middle: walked bucket by bucket, settling each before
    # the next starts, the noise-free double took 12 rounds; pipelined, a bucket starts from its neighbour's
    # best so far, and four buckets on a side climb at once.
    space = make_space(batch_sizes=(1, 2, 4, 8, 16, 32, 64, 128, 256), max_k=8)
    evaluator = SyntheticEvaluator(noise=0.0)
    state = SearchState(space)
    rounds, overlapped = 0, False
    while not structured_converged(state, keep_combos=2):
        points = structured_next_points(state, keep_combos=2)
        rounds += 1
        for combo in {p.combo.label for p in points if p.combo is not None}:
            larger = {
                p.batch_size for p in points if p.combo is not None and p.combo.label == combo and p.batch_size > 16
            }
            overlapped |= len(larger) >= 2
        for point in points:
            state.completed[point] = evaluate_metrics(space, point, evaluator(point), 0)
    assert overlapped  # one combo's K searches at two larger buckets in one round
    assert rounds <= 10
    exhaustive = {p: evaluate_metrics(space, p, evaluator(p), 0) for p in space.points()}
    assert recommend(space, state.completed).schedule == recommend(space, exhaustive).schedule


@pytest.mark.parametrize("workers", [1, 2])
def test_workers_share_a_refining_search_without_simulating_a_point_twice(tmp_path, workers):
    space, evaluator = _two_combos(0.01, noise=0.006)
    calls = tmp_path / "calls.log"
    evaluator.call_log = str(calls)
    storage = str(tmp_path / "s.journal")
    run_study(
        space,
        evaluator,
        fingerprint(),
        storage=storage,
        strategy="structured",
        keep_combos=2,
        refine_budget=2.0,
        workers=workers,
    )
    outcome = load_outcome(storage, space.name)
    assert outcome.recommendation.combo.label == "eagle3/block/greedy"
    simulated = Counter(line.split(" ", 1)[1] for line in calls.read_text().splitlines())
    assert max(simulated.values()) == 1 and any("requests x4" in key for key in simulated)
    assert (
        run_study(
            space, evaluator, fingerprint(), storage=storage, strategy="structured", keep_combos=2, refine_budget=2.0
        ).completed_trials
        == 0
    )


def test_screening_keeps_a_combo_tied_with_the_last_kept_one_or_refines_them_apart():
    space = make_space(batch_sizes=(1, 8, 64), max_k=3, methods=("eagle3",))
    space = dataclasses.replace(space, combos=space.combos[:1] + space.combos[2:3])  # standard/greedy, block/greedy
    curve = {0: 400.0, 1: 700.0, 2: 1000.0, 3: 900.0}
    curves = {}
    for batch_size in space.batch_sizes:
        curves[(EAGLE, batch_size)] = curve
        curves[("eagle3/block/greedy", batch_size)] = {k: v * 1.01 for k, v in curve.items()}
    evaluator = PlantedEvaluator(curves, noise=0.006)  # 1 % apart: tied at first, told apart at 4x requests
    tied = _search(space, evaluator, keep_combos=1, refine_budget=0.0)
    followed = {p.label for p in tied.completed if p.batch_size != 8 and not p.is_off}
    assert followed == {EAGLE, "eagle3/block/greedy"}  # within noise of the kept one: followed too
    refined = _search(space, evaluator, keep_combos=1, refine_budget=2.0)
    assert {p for p in refined.completed if p.refinement} >= {
        make_point(8, EAGLE, 2, 1),
        make_point(8, "eagle3/block/greedy", 2, 1),
    }
    followed = {p.label for p in refined.completed if p.batch_size != 8 and not p.is_off}
    assert followed == {"eagle3/block/greedy"}  # told apart at the screening bucket: only the faster one


def test_a_combo_whose_first_runs_never_filled_the_batch_is_refined_not_screened_out():
    # The best combo's points at the screening bucket ran too short for a steady state: their batch
    # stayed half full and they report 60 % of their throughput. Taken at face value they would drop
    # the combo at screening; they say nothing about the bucket, so they tie until simulated with more
    # requests, and the note says why.
    space = make_space(batch_sizes=(1, 4, 16, 64), max_k=6, methods=("eagle3",))
    rep = space.batch_sizes[space.representative_bucket()]
    best = "eagle3/block/probabilistic"
    curves = _curves(space, [(4, 5), (4, 5), (3, 4), (2, 3)], other_level=0.95)
    for batch_size in space.batch_sizes:
        curves[(best, batch_size)] = {k: v * 1.1 for k, v in curves[(EAGLE, batch_size)].items() if k > 0} | {
            0: curves[(best, batch_size)][0]
        }
    evaluator = PlantedEvaluator(curves, noise=0.003, short=frozenset({(best, rep)}))
    state = _search(space, evaluator, refine_budget=1.0)  # two tie sets at 4x: more than half this small search
    recommendation = recommend(space, state.completed)
    assert recommendation.combo.label == best
    assert any(p.label == best and p.batch_size == rep and p.refinement == 1 for p in state.completed)
    # Without more requests, the recommendation says which points to distrust (and only those).
    first_pass = {p: e for p, e in state.completed.items() if not p.refinement and p.label in (best, "off")}
    notes = [n for n in recommend(space, first_pass).notes if "stayed well below" in n]
    assert len(notes) == 1 and notes[0].startswith(f"batch size {rep}: the batch stayed well below {rep} (mean K ")


def test_the_table_takes_a_measured_k_over_an_underfilled_one_in_its_tie_set():
    space = _space((16,), max_k=6)
    curve = {0: 400.0, 1: 700.0, 2: 900.0, 3: 996.0, 4: 1000.0, 5: 560.0, 6: 550.0}

    def evaluated(k, fill):
        metrics = {
            "throughput_tokens_per_s": curve[k],
            "throughput_stderr_tokens_per_s": 3.0,
            "mean_batch_size": 16 * fill,
        }
        return evaluate_metrics(space, space.point(16, EAGLE, k), metrics, k)

    # K 1 and 2 also underfilled: K 1 ties with the best through its own noise, yet the table may not take it.
    completed = {
        e.point: e
        for e in [
            evaluated(0, 0.99),
            evaluated(1, 0.5),
            evaluated(2, 0.99),
            evaluated(3, 0.99),
            evaluated(4, 0.99),
            evaluated(5, 0.5),
            evaluated(6, 0.55),
        ]
    }
    ties = bucket_tie_set(space, EAGLE, 16, completed)
    assert ties.ks == (1, 3, 4, 5, 6) and ties.choosable == (3, 4)
    recommendation = recommend(space, completed)
    assert [c.num_speculative_tokens for c in recommendation.choices] == [3]
    assert any("the batch stayed well below 16 (mean K 1: 8.0, K 5: 8.0, K 6: 8.8)" in n for n in recommendation.notes)
    # Every speculating K underfilled, the best of them above K = 0: K = 0 ties only through their noise.
    unmeasured = {e.point: e for e in [evaluated(0, 0.99), evaluated(3, 0.5), evaluated(4, 0.5)]}
    ties = bucket_tie_set(space, EAGLE, 16, unmeasured)
    assert ties.ks == (0, 3, 4) and ties.choosable == (3, 4)

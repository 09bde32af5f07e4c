"""The structure-aware search: finds the optimum of unimodal curves with few probes, never re-proposes."""

import random

from study_doubles import SyntheticEvaluator, make_space, true_metrics

from spectune.study import (
    SearchState,
    _structured,
    evaluate_metrics,
    recommend,
    structured_converged,
    structured_next_point,
    structured_next_points,
)
from spectune.study._structured import next_k, next_ks

KS = tuple(range(0, 11))


def _random_unimodal(rng: random.Random) -> dict[int, float]:
    """Strictly rising to a random peak, strictly falling after it."""
    peak = rng.randrange(len(KS))
    values = {}
    level = 100.0
    for k in range(peak, -1, -1):
        values[k] = level
        level -= rng.uniform(0.5, 10.0)
    level = 100.0
    for k in range(peak + 1, len(KS)):
        level -= rng.uniform(0.5, 10.0)
        values[k] = level
    return values


def _search(curve: dict[int, float], *, start: int, prefer_lower: bool = False) -> tuple[int, int]:
    known = {0: curve[0]}
    while (k := next_k(known, KS, start=start, prefer_lower=prefer_lower)) is not None:
        assert k not in known, "re-proposed an evaluated K"
        known[k] = curve[k]
    return max(known, key=known.get), len(known)


def test_hill_climb_finds_the_peak_of_every_unimodal_curve():
    rng = random.Random(7)
    for _ in range(300):
        curve = _random_unimodal(rng)
        best, _ = _search(curve, start=rng.randrange(1, len(KS)), prefer_lower=rng.random() < 0.5)
        assert best == max(curve, key=curve.get)


def test_search_from_the_peak_costs_three_probes():
    curve = {k: -abs(k - 4) for k in KS}
    assert _search(curve, start=4) == (4, 4)  # K = 0 (known), then 4, 3 and 5


def test_a_search_probes_its_start_with_both_neighbours_at_once():
    known = {0: 1.0}
    assert next_ks(known, KS, start=4, prefer_lower=False) == [4, 5, 3]
    assert next_ks(known, KS, start=10, prefer_lower=False) == [10, 9]  # no K above the range
    assert next_ks(known, KS, start=4, prefer_lower=True) == [4, 3]  # the K above once 4 proves best
    assert next_ks({0: 1.0, 4: 9.0}, KS, start=4, prefer_lower=True) == [3, 5]
    assert next_ks({0: 1.0, 3: 8.0, 4: 9.0, 5: 7.0}, KS, start=4, prefer_lower=True) == []
    # The optimum moved down: only the K below the new best is left to bracket it.
    assert next_ks({0: 1.0, 3: 9.5, 4: 9.0, 5: 7.0}, KS, start=4, prefer_lower=True) == [2]


def test_structured_search_finds_the_exhaustive_optimum_of_the_noise_free_double():
    space = make_space(batch_sizes=(1, 2, 4, 8, 16, 32, 64, 128), max_k=10)
    evaluator = SyntheticEvaluator(noise=0.0)
    state = SearchState(space)
    while not structured_converged(state, keep_combos=2):
        point = structured_next_point(state, keep_combos=2)
        assert point is not None and point not in state.completed
        state.completed[point] = evaluate_metrics(space, point, evaluator(point), len(state.completed))
    exhaustive = {p: evaluate_metrics(space, p, evaluator(p), 0) for p in space.points()}
    found, truth = recommend(space, state.completed), recommend(space, exhaustive)
    assert found.combo == truth.combo
    assert found.schedule == truth.schedule
    assert len(state.completed) <= 0.25 * space.size


def test_never_proposes_a_point_held_by_a_running_trial():
    space = make_space(batch_sizes=(8,), max_k=4)
    state = SearchState(space)
    first = structured_next_point(state, keep_combos=2)
    state.claimed.add(first)
    second = structured_next_point(state, keep_combos=2)
    assert second is not None and second != first
    state.claimed.update(space.points())
    assert structured_next_point(state, keep_combos=2) is None
    assert not structured_converged(state, keep_combos=2)  # held points may still fail


def test_a_point_that_failed_three_times_is_given_up():
    space = make_space(batch_sizes=(8,), max_k=3)
    state = SearchState(space)
    first = structured_next_point(state, keep_combos=2)
    state.failures[first] = 2
    assert structured_next_point(state, keep_combos=2) == first  # re-proposed after failures
    state.failures[first] = 3
    assert structured_next_point(state, keep_combos=2) != first


def test_search_continues_past_convergence_until_every_point_is_taken():
    space = make_space(batch_sizes=(1, 32), max_k=3)
    evaluator = SyntheticEvaluator()
    state = SearchState(space)
    seen = []
    while (point := structured_next_point(state, keep_combos=1)) is not None:
        seen.append(point)
        state.completed[point] = evaluate_metrics(space, point, evaluator(point), len(seen))
    assert sorted(seen) == sorted(space.points())


def test_slo_steers_the_search_to_feasible_k():
    from spectune.study._space import Constraint

    limit = 6.0  # p99 TPOT (ms) of the double: met only with enough accepted tokens per step at bs 8
    space = make_space(
        batch_sizes=(8,),
        max_k=8,
        methods=("eagle3",),
        constraints=(Constraint(metric="tpot_p99_ms", op="<=", bound=limit),),
    )
    evaluator = SyntheticEvaluator(noise=0.0)
    state = SearchState(space)
    while not structured_converged(state, keep_combos=4):
        point = structured_next_point(state, keep_combos=4)
        state.completed[point] = evaluate_metrics(space, point, evaluator(point), 0)
    choice = recommend(space, state.completed).choices[0]
    assert choice.evaluation.feasible
    assert true_metrics(choice.evaluation.point)["tpot_p99_ms"] <= limit


def test_the_needed_points_follow_the_results_not_an_answer_reused_from_other_results():
    # Two searches over one space whose results differ only in their noise, asked in turn: each answer is
    # the one computed afresh, though both states hold the same points under the same trial numbers
    # until the noise moves a decision (answers are reused only while the results themselves are equal).
    space = make_space(batch_sizes=(1, 4, 16), max_k=6)
    states = [SearchState(space), SearchState(space)]
    evaluators = [SyntheticEvaluator(seed=1, noise=0.03), SyntheticEvaluator(seed=2, noise=0.03)]
    diverged = False
    for _ in range(60):
        answers = []
        for state in states:
            answers.append(structured_next_points(state, keep_combos=2))
            _structured._needed_cache.clear()
            assert structured_next_points(state, keep_combos=2) == answers[-1]
        diverged |= answers[0] != answers[1] and states[0].completed.keys() == states[1].completed.keys()
        for state, evaluator, answer in zip(states, evaluators, answers):
            if answer:
                point = answer[0]
                state.completed[point] = evaluate_metrics(space, point, evaluator(point), len(state.completed))
    assert diverged

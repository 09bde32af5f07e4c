"""Policies as a searched dimension: static K, K table, adaptive verification (one K max or a table),
SGLang adaptive steps -- the search, the comparison, the wording, and resuming after SIGKILL.

The evaluator is the closed-form double (``study_doubles``), scaled per runtime where a test plants which
policy wins: these tests are about the study's decisions, not about what a policy is worth (the
simulator's tests say that).
"""

import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import optuna
from study_doubles import SyntheticEvaluator, fingerprint, make_space

from spectune.errors import SpectuneError
from spectune.study import (
    SearchState,
    evaluate_metrics,
    load_outcome,
    recommend,
    run_study,
    structured_converged,
    structured_next_points,
    structured_single_k_points,
)
from spectune.study._policies import policy_scores
from spectune.study._runner import BATCH_POINTS

HERE = Path(__file__).resolve().parent
ALL_POLICIES = ("static", "k_table", "adaptive_verification", "adaptive_verification_table", "sglang_adaptive")


class RuntimeScaled(SyntheticEvaluator):
    """The closed-form double with each runtime's throughput scaled by ``factors`` (a planted winner)."""

    def __init__(self, factors: dict[str, float], **options) -> None:
        super().__init__(**options)
        self.factors = factors

    def __call__(self, point):
        metrics = super().__call__(point)
        factor = self.factors.get(point.combo.runtime, 1.0) if point.combo is not None else 1.0
        metrics["throughput_tokens_per_s"] *= factor
        metrics["throughput_stderr_tokens_per_s"] *= factor
        return metrics


def _outcome(tmp_path, evaluator, *, strategy="exhaustive", policies=ALL_POLICIES, **space_options):
    space = make_space(policies=policies, **space_options)
    storage = str(tmp_path / f"{strategy}.journal")
    run_study(space, evaluator, fingerprint(), storage=storage, strategy=strategy)
    return load_outcome(storage, space.name)


def test_the_default_space_has_the_combos_and_labels_of_a_study_without_policies():
    assert [c.label for c in make_space().combos] == [c.label for c in make_space(policies=("k_table",)).combos]
    labels = [c.label for c in make_space(policies=ALL_POLICIES, methods=("eagle3", "ngram")).combos]
    assert "eagle3/standard/greedy/vllm_adaptive" in labels and "ngram/standard/greedy/vllm_adaptive" in labels
    # SGLang's adaptive steps: EAGLE/EAGLE3 chains verified token by token only
    assert [label for label in labels if label.endswith("sglang_adaptive")] == [
        "eagle3/standard/greedy/sglang_adaptive"
    ]


def test_a_static_k_is_the_best_single_k_over_every_bucket_found_by_brute_force(tmp_path):
    outcome = _outcome(tmp_path, SyntheticEvaluator(), policies=("static",), batch_sizes=(1, 8, 64), max_k=5)
    recommendation = outcome.recommendation
    space = outcome.space
    assert recommendation.policy == "static" and len(recommendation.schedule) == 1

    def aggregate(label, k):
        values = [outcome.completed[space.point(b, label, k)].throughput for b in space.batch_sizes]
        return math.exp(sum(math.log(v) for v in values) / len(values))

    best = max((aggregate(c.label, k), c.label, k) for c in space.combos for k in space.k_values[1:])
    chosen = aggregate(recommendation.combo.label, recommendation.schedule[0][2])
    assert chosen >= best[0] * (1 - 0.005)  # the best, or a smaller K / earlier combo within the tie rule
    assert recommendation.schedule[0][2] <= best[2] or recommendation.combo.label != best[1]


def test_the_structured_search_finds_every_policys_exhaustive_answer(tmp_path):
    options = dict(batch_sizes=(1, 8, 32, 128), max_k=6, methods=("eagle3",))
    exhaustive = _outcome(tmp_path, SyntheticEvaluator(), **options)
    structured = _outcome(tmp_path, SyntheticEvaluator(), strategy="structured", **options)
    assert structured.num_evaluations < exhaustive.num_evaluations
    truth = {s.policy: s for s in policy_scores(exhaustive.space, exhaustive.completed)}
    found = {s.policy: s for s in policy_scores(structured.space, structured.completed)}
    assert set(found) == set(truth) == set(ALL_POLICIES)
    for policy, score in truth.items():
        ks = [c.num_speculative_tokens for c in found[policy].score.choices]
        assert ks == [c.num_speculative_tokens for c in score.score.choices], policy
        assert found[policy].combo == score.combo, policy
    assert structured.recommendation.policy == exhaustive.recommendation.policy


def _search_rounds(space, evaluator) -> tuple[int, SearchState]:
    """The structured search with every round's points evaluated at once (a worker per point): its
    rounds and its final state."""
    state = SearchState(space)
    rounds = 0
    while not structured_converged(state, keep_combos=2):
        rounds += 1
        needed = structured_next_points(state, keep_combos=2)
        state.single_k |= structured_single_k_points(state, keep_combos=2)  # as the trials record it
        for point in needed:
            state.completed[point] = evaluate_metrics(space, point, evaluator(point), len(state.completed))
    return rounds, state


def test_the_runtime_policies_add_few_rounds_to_the_k_table_and_static_k_search():
    # A policy's buckets start from its K-as-served twin's results, side by side, not neighbour after
    # neighbour; static K and the sensitivity points run beside the policies' and the refinements' rounds.
    for noise in (0.0, 0.01):
        for batch_sizes in ((1, 8, 32, 128), (1, 2, 4, 8, 16, 32, 64, 128, 256)):
            options = dict(batch_sizes=batch_sizes, max_k=8, assumed_auc=True)
            evaluator = SyntheticEvaluator(noise=noise)
            alone, _ = _search_rounds(make_space(policies=("static", "k_table"), **options), evaluator)
            every, _ = _search_rounds(make_space(policies=ALL_POLICIES, **options), evaluator)
            assert every <= alone + 3, (noise, batch_sizes, alone, every)  # +6 to +9 before


def test_the_other_policies_leave_the_k_tables_refinements_as_they_were():
    # The refinement budget is a share of the work that searched the tables it refines, spent by their own
    # refinements: the points of a policy that cannot win, and those only a single K (static K) asked for,
    # make no tie set of the K table less certain, so they buy it no precision (static K's once bought
    # the decision study a 16x refinement the K table alone does not make).
    def refined(policies, batch_sizes, noise):
        space = make_space(batch_sizes=batch_sizes, max_k=8, policies=policies, assumed_auc=True)
        _, state = _search_rounds(space, RuntimeScaled({"vllm_adaptive": 0.85, "sglang_adaptive": 0.85}, noise=noise))
        return {
            (p.batch_size, p.combo and p.combo.label, p.num_speculative_tokens, p.refinement)
            for p in state.completed
            if p.refinement and (p.combo is None or p.combo.runtime == "none")
        }

    for batch_sizes in ((1, 8, 32, 128), (1, 2, 4, 8, 16, 32, 64, 128, 256)):
        for noise in (0.02, 0.03):
            alone = refined(("k_table",), batch_sizes, noise)
            assert alone  # the noise leaves decisions open: the K table is refined
            for policies in (("static", "k_table"), ALL_POLICIES):
                assert refined(policies, batch_sizes, noise) == alone, (policies, batch_sizes, noise)


def test_a_study_records_the_points_only_a_single_k_asked_for_and_refines_as_without_static_k(tmp_path):
    # The same through storage: a trial that takes such a point says so, the search read back from storage
    # leaves it out of the budget, and the K table is refined as without static K.
    def run(policies):
        space = make_space(batch_sizes=(1, 2, 4, 8, 16, 32, 64, 128, 256), max_k=8, policies=policies)
        storage = str(tmp_path / f"{'-'.join(policies)}.journal")
        run_study(space, SyntheticEvaluator(noise=0.02), fingerprint(), storage=storage, strategy="structured")
        journal = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(storage))
        study = optuna.load_study(study_name=space.name, storage=journal)
        return SearchState.from_trials(space, study.get_trials(deepcopy=False))

    alone, with_static = run(("k_table",)), run(("static", "k_table"))
    assert with_static.single_k  # static K asked for points the tables' search did not
    followed = {p.combo.label for p in with_static.completed if p.combo and p.batch_size == 1}
    assert all(p.combo.label in followed and not p.refinement for p in with_static.single_k)
    assert {p for p in with_static.completed if p.refinement} == {p for p in alone.completed if p.refinement}


def _runtime_points(outcome, runtime):
    return [p for p in outcome.completed if p.combo is not None and p.combo.runtime == runtime]


def test_a_runtime_policy_that_cannot_win_is_bracketed_at_every_bucket_not_settled(tmp_path):
    options = dict(batch_sizes=(1, 8, 32, 128), max_k=6, methods=("eagle3",))
    behind = RuntimeScaled({"vllm_adaptive": 0.85, "sglang_adaptive": 0.85})
    exhaustive = _outcome(tmp_path, behind, **options)
    structured = _outcome(tmp_path, behind, strategy="structured", **options)
    space = structured.space
    rep = space.batch_sizes[space.representative_bucket()]
    kept_here = {p.combo.label for p in structured.completed if p.combo and p.batch_size != rep}
    for runtime in ("vllm_adaptive", "sglang_adaptive"):
        points = _runtime_points(structured, runtime)
        followed = {p.combo.label for p in points if p.batch_size != rep}
        assert len(followed) == 1, (runtime, followed)  # one combo, not keep_combos
        assert not [p for p in points if p.refinement], runtime  # no precision spent on a loser
        # screened only on the rule/sampling the K-as-served runtime keeps (SGLang has one combo: itself)
        screened = {p.combo for p in points if p.batch_size == rep}
        twins = {(c.candidate, c.rejection_sample_method, c.draft_sample_method) for c in map(space.combo, kept_here)}
        assert runtime == "sglang_adaptive" or all(
            (c.candidate, c.rejection_sample_method, c.draft_sample_method) in twins for c in screened
        )
        # bracketed: its best K at every bucket is the exhaustive optimum of that combo (unimodal double)
        (label,) = followed
        for b in space.batch_sizes:
            found = max(
                (
                    e
                    for p, e in structured.completed.items()
                    if p.combo and p.combo.label == label and p.batch_size == b and not p.refinement
                ),
                key=lambda e: e.throughput,
            )
            truth = max(
                (
                    e
                    for p, e in exhaustive.completed.items()
                    if p.combo and p.combo.label == label and p.batch_size == b and not p.refinement
                ),
                key=lambda e: e.throughput,
            )
            assert found.point == truth.point, (runtime, b)
    scores = {s.policy: s for s in policy_scores(space, structured.completed)}
    assert set(scores) == set(ALL_POLICIES)  # every policy is still reported, a single K max included
    assert len({c.num_speculative_tokens for c in scores["adaptive_verification"].score.choices}) == 1
    assert structured.recommendation.policy == exhaustive.recommendation.policy == "k_table"
    contending = _outcome(tmp_path / "contending", SyntheticEvaluator(), strategy="structured", **options)
    assert len(_runtime_points(structured, "vllm_adaptive")) < len(_runtime_points(contending, "vllm_adaptive"))


def test_a_runtime_policy_within_reach_of_the_k_table_is_settled_as_the_table_is(tmp_path):
    options = dict(batch_sizes=(1, 8, 32, 128), max_k=6, methods=("eagle3",))
    close = RuntimeScaled({"vllm_adaptive": 0.99})  # within CONTENTION_MARGIN: it must be searched in full
    exhaustive = _outcome(tmp_path, close, **options)
    structured = _outcome(tmp_path, close, strategy="structured", **options)
    truth = {s.policy: s for s in policy_scores(exhaustive.space, exhaustive.completed)}
    found = {s.policy: s for s in policy_scores(structured.space, structured.completed)}
    for policy in ("adaptive_verification", "adaptive_verification_table"):
        ks = [c.num_speculative_tokens for c in found[policy].score.choices]
        assert ks == [c.num_speculative_tokens for c in truth[policy].score.choices], policy
        assert found[policy].combo == truth[policy].combo, policy
    followed = {
        p.combo.label
        for p in _runtime_points(structured, "vllm_adaptive")
        if p.batch_size != structured.space.batch_sizes[structured.space.representative_bucket()]
    }
    assert len(followed) == 2  # keep_combos, as the K-as-served runtime


def test_adaptive_verification_that_wins_outside_the_noise_is_recommended_and_named(tmp_path):
    outcome = _outcome(
        tmp_path, RuntimeScaled({"vllm_adaptive": 1.06}), batch_sizes=(1, 8, 64), max_k=5, methods=("eagle3",)
    )
    recommendation = outcome.recommendation
    assert recommendation.combo.runtime == "vllm_adaptive" and recommendation.adaptive_verification
    # one K max ties with a table of them unless the table is worth more than the noise: the simpler is named
    assert recommendation.policy in ("adaptive_verification", "adaptive_verification_table")
    sentence = next(n for n in recommendation.notes if n.startswith("policies: "))
    assert "is best" in sentence or "either" in sentence
    assert re.search(r"adaptive verification( over a K table)? \(K <= \d\)", sentence)


def test_a_policy_within_noise_of_the_k_table_ties_and_the_k_table_is_recommended(tmp_path):
    outcome = _outcome(
        tmp_path,
        RuntimeScaled({"vllm_adaptive": 1.002}, noise=0.01),
        policies=("k_table", "adaptive_verification_table"),
        batch_sizes=(1, 8, 64),
        max_k=5,
        methods=("eagle3",),
    )
    recommendation = outcome.recommendation
    assert recommendation.policy == "k_table" and recommendation.combo.runtime == "none"
    sentence = next(n for n in recommendation.notes if n.startswith("policies: "))
    # "policies: the K table within 0.2% of adaptive verification over a K table (K <= 4): either; the K table is
    # recommended (on a tie: ...)", or the other way round when the noise puts the table ahead
    adaptive = r"adaptive verification over a K table \(K <= \d\)"
    assert re.fullmatch(
        rf"policies: (the K table within \d+\.\d% of {adaptive}: either; the K table is recommended \(on a tie: .*\)"
        rf"|{adaptive} within \d+\.\d% of the K table: either)",
        sentence,
    ), sentence


def test_sglang_adaptive_is_compared_but_vllms_best_policy_is_recommended(tmp_path):
    outcome = _outcome(
        tmp_path, RuntimeScaled({"sglang_adaptive": 1.1}), batch_sizes=(1, 8, 64), max_k=5, methods=("eagle3",)
    )
    recommendation = outcome.recommendation
    assert recommendation.policy != "sglang_adaptive" and recommendation.sglang is not None
    note = next(n for n in recommendation.notes if n.startswith("SGLang adaptive steps"))
    assert re.match(
        r"SGLang adaptive steps \(K <= \d\) on eagle3/standard/greedy/sglang_adaptive: [\d,]+ tokens/s, \+\d", note
    )
    assert note.endswith("sglang.txt serves it")


def test_a_study_without_more_than_one_policy_says_nothing_about_policies(tmp_path):
    outcome = _outcome(tmp_path, SyntheticEvaluator(), policies=("k_table",), batch_sizes=(1, 8), max_k=3)
    assert not [n for n in outcome.recommendation.notes if n.startswith("policies")]
    assert outcome.recommendation == recommend(outcome.space, outcome.completed)


_KILLED_RUN = """
import sys
sys.path.insert(0, {here!r})
from study_doubles import SyntheticEvaluator, fingerprint, make_space
from spectune.study import run_study
if __name__ == "__main__":
    run_study(make_space(batch_sizes=(1, 8, 64), max_k=4, methods=("eagle3",), policies={policies!r}, assumed_auc=True),
              SyntheticEvaluator(delay_s=0.05, call_log={calls!r}), fingerprint(), storage={storage!r},
              strategy="structured")
"""


def _wait_until_gone(group: int) -> None:
    for _ in range(200):
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)


def test_a_study_over_policies_resumes_after_sigkill_and_never_simulates_a_point_twice(tmp_path):
    # nothing measures confidence_auc: the resumed run ends with adaptive verification's points at other values
    space = make_space(batch_sizes=(1, 8, 64), max_k=4, methods=("eagle3",), policies=ALL_POLICIES, assumed_auc=True)
    storage = str(tmp_path / "s.journal")
    calls = tmp_path / "calls.log"
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent(_KILLED_RUN.format(here=str(HERE), calls=str(calls), storage=storage, policies=ALL_POLICIES))
    )
    process = subprocess.Popen([sys.executable, str(script)], start_new_session=True)
    before = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            try:
                outcome = load_outcome(storage, space.name)
            except SpectuneError:  # not created yet
                outcome = None
            # past the screening, into the runtimes' chains: points of every runtime stored
            done = (
                {t.point.combo.runtime for t in outcome.trials if t.state == "COMPLETE" and t.point.combo}
                if outcome
                else set()
            )
            if len(done) == 3:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                _wait_until_gone(process.pid)
                before = load_outcome(storage, space.name)
                break
            time.sleep(0.05)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert before is not None and process.returncode == -signal.SIGKILL, "the study never got going"
    kept = {t.number: (t.point, t.metrics) for t in before.trials if t.state == "COMPLETE"}
    runtimes_done = {t.point.combo.runtime for t in before.trials if t.state == "COMPLETE" and t.point.combo}
    assert len(runtimes_done) == 3  # killed with points of every runtime stored

    run_study(space, SyntheticEvaluator(call_log=str(calls)), fingerprint(), storage=storage, strategy="structured")
    after = load_outcome(storage, space.name)
    assert all((after.trials[n].point, after.trials[n].metrics) == point for n, point in kept.items())
    points = [t.point for t in after.trials if t.state == "COMPLETE"]
    assert len(points) == len(set(points))
    simulated = Counter(line.split()[1] for line in calls.read_text().splitlines())
    assert sum(n - 1 for n in simulated.values()) <= BATCH_POINTS  # only what the kill interrupted
    whole = str(tmp_path / "whole.journal")
    run_study(space, SyntheticEvaluator(), fingerprint(), storage=whole, strategy="structured")
    uninterrupted = load_outcome(whole, space.name)
    assert set(points) == {t.point for t in uninterrupted.trials if t.state == "COMPLETE"}
    assert any(p.confidence_auc is not None for p in points)
    assert after.recommendation.policy == uninterrupted.recommendation.policy
    assert after.recommendation.schedule == uninterrupted.recommendation.schedule


def test_sglang_txt_serves_the_simulated_adaptive_steps_unless_they_fall_behind_the_table(tmp_path):
    from spectune.export._sglang import sglang_export

    options = dict(batch_sizes=(1, 8, 64), max_k=5, methods=("eagle3",), policies=("k_table", "sglang_adaptive"))
    ahead = _outcome(tmp_path / "ahead", RuntimeScaled({"sglang_adaptive": 1.1}), **options).recommendation
    config = sglang_export(ahead).adaptive_config
    steps = [slot.candidate_steps for slot in config.slots.values()]
    assert any(len(s) > 1 for s in steps) and all(s == list(range(1, len(s) + 1)) or s == [0] for s in steps)
    behind = _outcome(tmp_path / "behind", RuntimeScaled({"sglang_adaptive": 0.8}), **options).recommendation
    note = next(n for n in behind.notes if n.startswith("SGLang adaptive steps"))
    assert note.endswith("sglang.txt serves the K table instead") and re.search(r": [\d,]+ tokens/s, -\d", note)
    pinned = sglang_export(behind).adaptive_config  # the table varies here: pinned singleton slots
    assert {k: s.candidate_steps for k, s in pinned.slots.items()} == {r[0]: [r[2]] for r in behind.schedule}


def test_adaptive_precision_settles_each_policys_own_table_not_only_the_overall_winners(tmp_path):
    from study_doubles import PlantedEvaluator

    from spectune.study import StudySpace
    from spectune.study._precision import precision_requests
    from spectune.study._space import Candidate, Combo

    plain, adaptive = Combo("eagle3", "standard", "greedy"), Combo("eagle3", "standard", "greedy", "vllm_adaptive")
    space = StudySpace(
        name="precision",
        candidates=(Candidate("eagle3", {"method": "eagle3", "model": "org/head"}),),
        combos=(plain, adaptive),
        batch_sizes=(1, 8),
        min_num_speculative_tokens=1,
        max_num_speculative_tokens=4,
        max_batch_size=64,
        policies=("k_table", "adaptive_verification_table"),
    )
    curves = {
        (plain.label, 1): {0: 400, 1: 700, 2: 900, 3: 1000, 4: 950},
        (plain.label, 8): {0: 3000, 1: 5000, 2: 6000, 3: 5500, 4: 5000},
        (adaptive.label, 1): {0: 400, 1: 700, 2: 890, 3: 850, 4: 800},
        # K 2 ties with K 3 only through the noise (1.8 % below), and the table would take it
        (adaptive.label, 8): {0: 3000, 1: 4000, 2: 4420, 3: 4500, 4: 4000},
    }
    storage = str(tmp_path / "s.journal")
    run_study(space, PlantedEvaluator(curves, noise=0.01), fingerprint(), storage=storage, strategy="exhaustive")
    groups = precision_requests(space, load_outcome(storage, space.name).completed)
    assert [sorted(p.num_speculative_tokens for p in g) for g in groups] == [[2, 3]]
    assert all(p.label == adaptive.label and p.batch_size == 8 and p.refinement == 1 for p in groups[0])

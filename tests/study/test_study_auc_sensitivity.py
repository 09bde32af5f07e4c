"""How a study shows adaptive verification moving with a confidence_auc nothing measures (``_sensitivity``):
the points it adds (each simulated once, after the adaptive table is known, kept across a resume), the
synthesized rows' AUC, the gaps and the verdict its note gives, and nothing extra where the AUC is measured
or no adaptive policy is searched.

The evaluator plants exact curves (``PlantedEvaluator``, no noise) and scales adaptive verification's
throughput at each confidence_auc by a factor the test chooses, and the space plants the synthesized rows'
AUC by draft position, so every number of the note is known.
"""

import math
import re
from collections import Counter

import pytest
import torch
from study_doubles import PlantedEvaluator, fingerprint

from spectune.config import load_document
from spectune.simulator import _document_run
from spectune.simulator._acceptance_estimate import BankFeatures, BinormalFeatures, binormal_separation
from spectune.simulator._policy_setup import confidence_auc
from spectune.study import Point, StudySpace, load_outcome, run_study, space_from_document
from spectune.study._document import simulation_document
from spectune.study._sensitivity import SENSITIVITY_AUCS
from spectune.study._space import Candidate, Combo
from spectune.workload._confidence import draft_confidence_auc

PLAIN = Combo("eagle3", "standard", "greedy")
ADAPTIVE = Combo("eagle3", "standard", "greedy", "vllm_adaptive")
CURVES = {
    (PLAIN.label, 1): {0: 400, 1: 700, 2: 900, 3: 1000, 4: 950},
    (PLAIN.label, 8): {0: 3000, 1: 5000, 2: 6000, 3: 5500, 4: 5000},
    (ADAPTIVE.label, 1): {0: 400, 1: 700, 2: 850, 3: 900, 4: 880},
    (ADAPTIVE.label, 8): {0: 3000, 1: 4800, 2: 5400, 3: 5000, 4: 4600},
}
K_TABLE = math.sqrt(1000 * 6000)  # K 3 at batch size 1, K 2 at 8
ADAPTIVE_TABLE = math.sqrt(900 * 5400)  # K <= 3 at 1, K <= 2 at 8: 10 % behind
TABLE_POLICIES = ("k_table", "adaptive_verification_table")
# The synthesized rows' AUC by draft position at every bucket; the adaptive table draws positions 0-2 at
# batch size 1 and 0-1 at 8: mean 0.812, from 0.74 to 0.86.
SYNTHESIZED = [0.86, 0.8, 0.74, 0.7]


class AucPlanted(PlantedEvaluator):
    """The planted curves; adaptive verification's throughput times ``factors[auc]`` where a point is simulated
    at another confidence_auc, and times ``factors[None]`` (default 1) at the acceptance's own."""

    def __init__(self, factors: dict[float | None, float], **options) -> None:
        super().__init__(CURVES, **options)
        self.factors = factors

    def __call__(self, point: Point) -> dict[str, object]:
        metrics = super().__call__(point)
        if point.combo is not None and point.combo.runtime == "vllm_adaptive":
            metrics["throughput_tokens_per_s"] *= self.factors.get(point.confidence_auc, 1.0)  # type: ignore[operator]
        return metrics


def _space(policies=TABLE_POLICIES, assumed_at=(1, 8), name="auc", synthesized=SYNTHESIZED) -> StudySpace:
    """``synthesized``: the rows' AUC by position at each bucket nothing measures (None: a space stored before
    it held them), or a mapping from batch size to it."""
    facts = {} if assumed_at is None else {"confidence_auc_assumed_at": list(assumed_at)}
    if assumed_at and synthesized is not None:
        by_batch = synthesized if isinstance(synthesized, dict) else dict.fromkeys(assumed_at, synthesized)
        facts["synthesized_confidence_auc"] = {"greedy": {str(b): aucs for b, aucs in by_batch.items()}}
    return StudySpace(
        name=name,
        candidates=(Candidate("eagle3", {"method": "eagle3", "model": "org/head"}),),
        combos=tuple(c for c in (PLAIN, ADAPTIVE) if c.runtime == "none" or set(policies) - {"k_table", "static"}),
        batch_sizes=(1, 8),
        min_num_speculative_tokens=1,
        max_num_speculative_tokens=4,
        max_batch_size=64,
        policies=policies,
        context={"candidates": {"eagle3": facts}},
    )


def _run(tmp_path, space, evaluator, *, strategy="structured", n_trials=None, journal="s.journal"):
    storage = str(tmp_path / journal)
    run_study(space, evaluator, fingerprint(), storage=storage, strategy=strategy, n_trials=n_trials)
    return load_outcome(storage, space.name)


def _note(outcome) -> str:
    return next(n for n in outcome.recommendation.notes if n.startswith("confidence_auc "))


def _calls(path) -> Counter:
    return Counter(line.split()[1] for line in path.read_text().splitlines())


@pytest.mark.parametrize("strategy", ["structured", "exhaustive"])
def test_the_adaptive_table_is_simulated_at_each_auc_once_after_it_is_known(tmp_path, strategy):
    calls = tmp_path / "calls.log"
    outcome = _run(tmp_path, _space(), AucPlanted({0.6: 0.95, 0.95: 1.05}, call_log=str(calls)), strategy=strategy)
    moved = [t for t in outcome.trials if t.point.confidence_auc is not None]
    # the adaptive table's chosen points (K <= 3 at 1, K <= 2 at 8), at each value
    assert sorted(t.point.key for t in moved) == sorted(
        f"bs={b}|{ADAPTIVE.label}|K={k}|confidence_auc={auc:g}" for auc in SENSITIVITY_AUCS for b, k in ((1, 3), (8, 2))
    )
    assert all(t.state == "COMPLETE" for t in moved)
    assert min(t.number for t in moved) > max(t.number for t in outcome.trials if t.point.confidence_auc is None)
    assert set(_calls(calls).values()) == {1}
    # the rest of the study is the study whose confidence_auc is measured: same points, same answer
    measured = _run(tmp_path, _space(assumed_at=()), AucPlanted({}), strategy=strategy, journal="measured.journal")
    assert [t.point for t in outcome.trials if t not in moved] == [t.point for t in measured.trials]
    ours, theirs = outcome.recommendation, measured.recommendation
    assert (ours.policy, ours.combo, ours.schedule) == (theirs.policy, theirs.combo, theirs.schedule)
    assert ours.aggregate_throughput_tokens_per_s == theirs.aggregate_throughput_tokens_per_s
    assert [n for n in ours.notes if not n.startswith("confidence_auc ")] == list(theirs.notes)
    assert outcome.partial_note is None


def test_the_auc_points_survive_a_resume_and_are_not_simulated_again(tmp_path):
    calls = tmp_path / "calls.log"
    evaluator = AucPlanted({0.6: 0.95, 0.95: 1.05}, call_log=str(calls))
    searched = len(_run(tmp_path, _space(assumed_at=()), AucPlanted({}), journal="measured.journal").trials)
    cut = _run(tmp_path, _space(), evaluator, n_trials=searched + 1)  # stopped after one of the four
    assert sum(t.point.confidence_auc is not None for t in cut.trials) == 1
    assert cut.partial_note is not None and "not simulated yet" in _note(cut)
    resumed = _run(tmp_path, _space(), evaluator)
    assert [(t.point, t.metrics) for t in resumed.trials[: len(cut.trials)]] == [
        (t.point, t.metrics) for t in cut.trials
    ]
    assert set(_calls(calls).values()) == {1}
    whole = _run(tmp_path, _space(), AucPlanted({0.6: 0.95, 0.95: 1.05}), journal="whole.journal")
    assert {t.point for t in resumed.trials} == {t.point for t in whole.trials}
    assert _note(resumed) == _note(whole) and resumed.partial_note is None


def _gap(factor: float) -> str:
    return f"{ADAPTIVE_TABLE * factor / K_TABLE - 1:+.1%}"


SYNTHESIZED_HEAD = "the simulation ranks drafts by the synthesized drafter's logits"
HEAD = (
    f"confidence_auc is not measured for eagle3: {SYNTHESIZED_HEAD} (AUC 0.81 on its rows, 0.74-0.86 by draft "
    "position): "
)
MEAN = (0.86 + 0.8 + 0.74 + 0.86 + 0.8) / 5
ENTRY = "adaptive verification over a K table (K <= 3)"


def test_the_note_gives_the_synthesized_auc_each_values_gap_and_that_the_k_table_stays(tmp_path):
    outcome = _run(tmp_path, _space(), AucPlanted({0.6: 0.95, 0.95: 1.05}))
    assert outcome.recommendation.policy == "k_table"
    assert _note(outcome) == (
        f"{HEAD}{ENTRY} against the K table: -10.0% at 0.81 (synthesized), {_gap(0.95)} at 0.6, {_gap(1.05)} at "
        "0.95: the K table stays recommended"
    )
    assert (_gap(0.95), _gap(1.05)) == ("-14.5%", "-5.5%")
    sensitivity = outcome.recommendation.auc_sensitivity
    assert sensitivity.base.confidence_auc == pytest.approx(MEAN)
    assert [sensitivity.describe_value(o) for o in sensitivity.outcomes] == ["0.81 (synthesized)", "0.6", "0.95"]


def test_the_note_says_the_answer_flips_and_near_which_value(tmp_path):
    outcome = _run(tmp_path, _space(), AucPlanted({0.6: 0.95, 0.95: 1.2}))
    assert outcome.recommendation.policy == "k_table"
    # where adaptive verification's margin over the K table (its log gap less the 0.5 % tie floor: no
    # noise here) crosses 0, linear between the synthesized rows' mean AUC and 0.95
    low, high = math.log(0.9) - 0.005, math.log(0.9 * 1.2) - 0.005
    crossing = MEAN + (0.95 - MEAN) * low / (low - high)
    assert f"{crossing:.2f}" == "0.90"
    assert _note(outcome) == (
        f"{HEAD}{ENTRY} against the K table: -10.0% at 0.81 (synthesized), -14.5% at 0.6, +8.0% at 0.95: the answer "
        f"flips: {ENTRY} would be recommended at 0.95 (it switches near 0.90, linearly interpolated)"
    )
    sensitivity = outcome.recommendation.auc_sensitivity
    assert [o.recommended.policy for o in sensitivity.outcomes] == ["k_table", "k_table", "adaptive_verification_table"]


def test_an_adaptive_winner_that_a_weaker_estimate_would_unseat_is_named(tmp_path):
    # adaptive verification 8 % ahead as simulated; at 0.6 it falls 2.8 % behind the K table
    outcome = _run(tmp_path, _space(), AucPlanted({None: 1.2, 0.6: 1.2 * 0.9, 0.95: 1.2 * 1.05}))
    assert outcome.recommendation.policy == "adaptive_verification_table"
    note = _note(outcome)
    assert note.startswith(
        f"{HEAD}{ENTRY} against the K table: {_gap(1.2)} at 0.81 (synthesized), {_gap(1.08)} at 0.6, {_gap(1.26)} "
        "at 0.95: the answer flips: the K table would be recommended at 0.6 (it switches near 0."
    ), note
    assert float(re.search(r"near (0\.\d+),", note).group(1)) == pytest.approx(
        MEAN - (MEAN - 0.6) * (math.log(1.08) - 0.005) / ((math.log(1.08) - 0.005) - (math.log(0.972) - 0.005)),
        abs=0.005,
    )


def test_only_the_buckets_whose_auc_nothing_measures_move(tmp_path):
    outcome = _run(tmp_path, _space(assumed_at=(1,)), AucPlanted({0.6: 0.95, 0.95: 1.05}))
    moved = {t.point for t in outcome.trials if t.point.confidence_auc is not None}
    assert {(p.batch_size, p.num_speculative_tokens) for p in moved} == {(1, 3)}
    half = math.sqrt(0.95) * ADAPTIVE_TABLE / K_TABLE - 1  # only batch size 1 of the two moves
    # the AUC over the rows batch size 1 draws from: positions 0-2
    assert _note(outcome).startswith(
        f"confidence_auc is not measured for eagle3 at batch sizes 1: {SYNTHESIZED_HEAD} (AUC 0.80 on its rows, "
        f"0.74-0.86 by draft position): {ENTRY} against the K table: -10.0% at 0.80 (synthesized), {half:+.1%} at 0.6"
    )


def test_the_synthesized_auc_says_when_it_differs_between_batch_sizes(tmp_path):
    space = _space(synthesized={1: SYNTHESIZED, 8: [0.9, 0.88, 0.8, 0.7]})
    outcome = _run(tmp_path, space, AucPlanted({0.6: 0.95, 0.95: 1.05}))
    assert _note(outcome).startswith(
        f"confidence_auc is not measured for eagle3: {SYNTHESIZED_HEAD} (AUC 0.84 on its rows, 0.74-0.90 by draft "
        f"position and batch size): {ENTRY} against the K table: -10.0% at 0.84 (synthesized), "
    )


def test_a_study_stored_before_the_synthesized_auc_says_it_assumed_the_default(tmp_path):
    # its simulations drew the estimate's features at 0.75: the note says so
    outcome = _run(tmp_path, _space(synthesized=None), AucPlanted({0.6: 0.95, 0.95: 1.05}))
    assert _note(outcome) == (
        f"confidence_auc 0.75 is assumed (the default: nothing measures it for eagle3): {ENTRY} against the K table: "
        f"-10.0% at 0.75 (assumed), {_gap(0.95)} at 0.6, {_gap(1.05)} at 0.95: the K table stays recommended"
    )
    sensitivity = outcome.recommendation.auc_sensitivity
    assert [sensitivity.describe_value(o) for o in sensitivity.outcomes] == ["0.75 (assumed)", "0.6", "0.95"]


def test_without_an_estimate_free_policy_the_note_moves_against_its_own_number(tmp_path):
    outcome = _run(tmp_path, _space(policies=("adaptive_verification",)), AucPlanted({0.6: 0.9, 0.95: 1.1}))
    entry = outcome.recommendation.auc_sensitivity.entry
    assert entry.max_num_speculative_tokens == 2  # positions 0-1 at both batch sizes
    assert _note(outcome) == (
        f"confidence_auc is not measured for eagle3: {SYNTHESIZED_HEAD} (AUC 0.83 on its rows, 0.80-0.86 by draft "
        f"position): adaptive verification (K <= 2): {entry.aggregate_throughput_tokens_per_s:,.0f} tokens/s at 0.83 "
        "(synthesized), -10.0% at 0.6, +10.0% at 0.95 (no policy the estimate does not touch was searched to hold it "
        "against)"
    )


@pytest.mark.parametrize(
    ("policies", "assumed_at"),
    [
        (TABLE_POLICIES, ()),  # measured at every batch size
        (TABLE_POLICIES, None),  # a study stored before spaces said (nothing simulated at other values either)
        (("static", "k_table"), (1, 8)),  # no adaptive verification searched
    ],
)
def test_nothing_is_added_where_the_auc_is_measured_or_no_adaptive_policy_is_searched(tmp_path, policies, assumed_at):
    calls = tmp_path / "calls.log"
    space = _space(policies=policies, assumed_at=assumed_at)
    outcome = _run(tmp_path, space, AucPlanted({0.6: 0.9, 0.95: 1.1}, call_log=str(calls)))
    assert all(t.point.confidence_auc is None for t in outcome.trials)
    assert "confidence_auc" not in calls.read_text()
    assert outcome.recommendation.auc_sensitivity is None
    assert not [n for n in outcome.recommendation.notes if "confidence_auc" in n]


def test_a_point_at_another_auc_keeps_every_other_points_identity():
    plain = Point(8, ADAPTIVE, 2, refinement=1)
    assert plain.key == f"bs=8|{ADAPTIVE.label}|K=2|requests x4"  # as before the field existed
    moved = Point(8, ADAPTIVE, 2, refinement=1, confidence_auc=0.6)
    assert moved.key == f"bs=8|{ADAPTIVE.label}|K=2|requests x4|confidence_auc=0.6"
    assert moved != plain and moved.base == Point(8, ADAPTIVE, 2, confidence_auc=0.6)
    assert sorted([moved, plain]) == [plain, moved]
    with pytest.raises(ValueError, match="confidence_auc changes only adaptive verification's points"):
        Point(8, PLAIN, 2, confidence_auc=0.6)
    with pytest.raises(ValueError, match=r"confidence_auc must be in \[0.5, 1\], got 0.4"):
        Point(8, ADAPTIVE, 2, confidence_auc=0.4)


STUDY = """\
kind: study
name: tiny
workload: {num_requests: 16, prompt_tokens: 64, output_tokens: 16, temperature: 0.7, vocab_size: 128, max_num_seqs: 64}
hardware: h100-sxm
target_model: llama-3.1-8b
candidates:
  - name: eagle3
    speculative: {method: eagle3, model: RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3}
    acceptance: ACCEPTANCE
search:
  num_speculative_tokens: {min: 1, max: 3}
  draft_sample_methods: [greedy, probabilistic]
  policies: POLICIES
schedule:
  batch_sizes: [1, 8, 64]
"""
RATES = "{unconditional_rates: [0.73, 0.52, 0.35]"
BINS = ", bins: [{min_running: 1, max_running: 4, conditional_rates: [0.8], confidence_auc: 0.9}, {min_running: 5, max_running: 64, conditional_rates: [0.7]}]"


def _document(tmp_path, acceptance=RATES + "}", policies="[k_table, adaptive_verification]"):
    path = tmp_path / "study.yaml"
    path.write_text(STUDY.replace("ACCEPTANCE", acceptance).replace("POLICIES", policies))
    return load_document(path, expect="study").model


@pytest.mark.parametrize(
    ("acceptance", "policies", "assumed"),
    [
        (RATES + "}", "[k_table, adaptive_verification]", [1, 8, 64]),
        (RATES + ", confidence_auc: 0.8}", "[k_table, adaptive_verification_table]", []),
        (RATES + BINS + "}", "[adaptive_verification]", [8, 64]),  # the bin of 1-4 measures it
        (RATES + "}", "[static, k_table, sglang_adaptive]", None),  # no adaptive verification: not said
    ],
)
def test_the_space_says_where_nothing_measures_the_documents_auc(tmp_path, acceptance, policies, assumed):
    facts = space_from_document(_document(tmp_path, acceptance, policies)).context["candidates"]["eagle3"]
    assert facts.get("confidence_auc_assumed_at") == assumed
    synthesized = facts.get("synthesized_confidence_auc")
    if not assumed:
        assert synthesized is None
        return
    # per draft sampling of the adaptive combos, per such batch size, one AUC per position up to K max 3
    assert set(synthesized) == {"greedy", "probabilistic"}
    assert all(list(by_batch) == [str(b) for b in assumed] for by_batch in synthesized.values())
    aucs = [auc for by_batch in synthesized.values() for by_position in by_batch.values() for auc in by_position]
    assert len(aucs) == 2 * len(assumed) * 3 and all(0.6 < auc < 0.95 for auc in aucs), synthesized


def _features(document):
    """The feature sampler of the adaptive-verification policy a simulation of ``document`` builds."""
    made, real = [], _document_run.runtime_policy

    def recording(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_document_run, "runtime_policy", recording)
        run = _document_run.DocumentRun(document, torch.device("cpu"), None)
    (policy,) = made
    return policy.features, run


@pytest.mark.parametrize("sampling", ["greedy", "probabilistic"])
def test_the_spaces_auc_is_that_of_the_rows_a_simulation_draws_its_features_from(tmp_path, sampling):
    document = _document(tmp_path, RATES + BINS + "}")
    space = space_from_document(document)
    synthesized = space.context["candidates"]["eagle3"]["synthesized_confidence_auc"][sampling]
    for batch_size in (8, 64):
        point = space.point(batch_size, f"eagle3/standard/{sampling}/vllm_adaptive", 3)
        features, run = _features(simulation_document(document, point))
        assert isinstance(features, BankFeatures)  # drawn from the rows of the bin at its batch size
        rows = [draft_confidence_auc(run._synthesizer(batch_size), j, 0) for j in range(3)]
        assert synthesized[str(batch_size)] == pytest.approx(rows, abs=1e-4)


def test_a_point_at_another_auc_simulates_it_in_place_of_the_acceptances(tmp_path):
    document = _document(tmp_path, RATES + BINS + "}")
    space = space_from_document(document)
    label = "eagle3/standard/greedy/vllm_adaptive"
    own = simulation_document(document, space.point(1, label, 2))
    assert (confidence_auc(own, 1), confidence_auc(own, 8)) == (0.9, None)  # None: the synthesized rows' own
    moved = simulation_document(document, Point(8, space.combo(label), 2, confidence_auc=0.6))
    assert (confidence_auc(moved, 1), confidence_auc(moved, 8)) == (0.6, 0.6)  # bins too: the point says
    assert moved.speculative.enable_adaptive_verification and moved.workload.concurrency == 8
    assert moved.acceptance.model_copy(update={"confidence_auc": None, "bins": own.acceptance.bins}) == own.acceptance
    # the simulations draw the estimate's features so: the bin's value at 1, the rows' own at 8, the point's
    measured, _ = _features(own)
    unmeasured, _ = _features(simulation_document(document, space.point(8, label, 2)))
    sensitivity, _ = _features(moved)
    assert isinstance(measured, BinormalFeatures) and measured.separation == binormal_separation(0.9)
    assert isinstance(unmeasured, BankFeatures)
    assert isinstance(sensitivity, BinormalFeatures) and sensitivity.separation == binormal_separation(0.6)


def test_on_a_noisy_study_of_every_policy_the_auc_points_change_nothing_else(tmp_path):
    from study_doubles import SyntheticEvaluator, make_space

    policies = ("static", "k_table", "adaptive_verification", "adaptive_verification_table", "sglang_adaptive")
    options = dict(batch_sizes=(1, 8, 32, 128), max_k=6, methods=("eagle3",), policies=policies)
    outcomes = [
        _run(tmp_path, make_space(assumed_auc=assumed, **options), SyntheticEvaluator(noise=0.02), journal=f"{assumed}")
        for assumed in (False, True)
    ]
    plain, assumed = outcomes
    moved = [t.point for t in assumed.trials if t.point.confidence_auc is not None]
    assert moved and any(p.refinement for p in plain.completed)  # refinements were made, under a budget
    assert [t.point for t in assumed.trials if t.point.confidence_auc is None] == [t.point for t in plain.trials]
    ours, theirs = assumed.recommendation, plain.recommendation
    assert (ours.policy, ours.combo, ours.schedule, ours.policies) == (
        theirs.policy,
        theirs.combo,
        theirs.schedule,
        theirs.policies,
    )


def test_the_auc_points_neither_spend_nor_widen_the_refinement_budget(tmp_path):
    # At batch size 8, K 3 ties with the best (K 2) only through the noise, and the table takes it (K 3 at
    # batch size 1 too: no change of K): a refinement of the two would settle it (8 steps of work: each 4x
    # the requests). The budget is set just short of that; the four AUC points, counted as search work,
    # would lift it past.
    curves = CURVES | {(PLAIN.label, 8): {0: 3000, 1: 5000, 2: 6000, 3: 5900, 4: 5500}}
    roomy_storage = str(tmp_path / "roomy.journal")
    space = _space(assumed_at=())
    evaluator = PlantedEvaluator(curves, noise=0.01)
    run_study(space, evaluator, fingerprint(), storage=roomy_storage, strategy="structured", refine_budget=2.0)
    roomy = load_outcome(roomy_storage, space.name)
    assert {(p.batch_size, p.num_speculative_tokens) for p in roomy.completed if p.refinement} == {(8, 2), (8, 3)}
    # The budget is a share of the work searched on the runtime it refines (the K table's) and K = 0;
    # adaptive verification, 10 % behind, is not refined and adds none of it.
    searched = sum(not p.refinement and (p.combo is None or p.combo.runtime == "none") for p in roomy.completed)
    budget = 8 / (searched + 2)  # budget x searched < 8 < budget x (searched + 4)
    runs = {}
    for assumed_at in ((), (1, 8)):
        storage = str(tmp_path / f"{len(assumed_at)}.journal")
        space = _space(assumed_at=assumed_at)
        evaluator = PlantedEvaluator(curves, noise=0.01)
        run_study(space, evaluator, fingerprint(), storage=storage, strategy="structured", refine_budget=budget)
        runs[assumed_at] = load_outcome(storage, space.name)
    plain, assumed = runs[()], runs[(1, 8)]
    assert not [p for p in plain.completed if p.refinement]
    assert sum(p.confidence_auc is not None for p in assumed.completed) == 4
    assert [t.point for t in assumed.trials if t.point.confidence_auc is None] == [t.point for t in plain.trials]

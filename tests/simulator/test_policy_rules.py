"""vLLM 0.33.0 adaptive verification's rules (budget, admission, cost tables, estimate) and SGLang 0.5.23's
step slots, on hand-made inputs against brute force and hand-worked sequences."""

import itertools
import math

import numpy as np
import pytest

from spectune.config import SglangAdaptive
from spectune.config._policy import SglangAdaptiveSlot
from spectune.simulator._acceptance_estimate import BinormalFeatures, OnlineAcceptanceEstimator
from spectune.simulator._adaptive_verification import (
    CostTables,
    admit_top_slots,
    choose_budget,
    cost_tables_from_curves,
    profile_token_counts,
    profiled_cost_tables,
    vllm_capture_sizes,
)
from spectune.simulator._sglang_adaptive import AdaptiveSteps, StepSlot


def _brute_force_budget(survival, scheduled, num_sampling, non_draft, tables):
    slots = sorted((survival[r, p] for r in range(len(scheduled)) for p in range(scheduled[r])), reverse=True)
    best, best_ratio = 0, -math.inf
    for b in range(len(slots) + 1):
        if non_draft + b >= len(tables.verify_s):
            break
        ratio = (num_sampling + sum(slots[:b])) / (tables.draft_s[len(scheduled)] + tables.verify_s[non_draft + b])
        if ratio > best_ratio + 1e-15:
            best, best_ratio = b, ratio
    return best


@pytest.mark.parametrize("seed", range(40))
def test_budget_is_the_brute_force_argmax(seed: int) -> None:
    rng = np.random.default_rng(seed)
    requests, width = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    survival = np.cumprod(rng.random((requests, width)), axis=1)
    scheduled = rng.integers(0, width + 1, size=requests)
    non_draft = requests + int(rng.integers(0, 5))
    tables = CostTables(
        draft_s=np.cumsum(rng.random(requests + 2)),
        verify_s=np.cumsum(
            rng.random(non_draft + requests * width + 3) * rng.integers(0, 2, non_draft + requests * width + 3)
        )
        + 1.0,
    )
    got = choose_budget(survival, scheduled, requests, non_draft, tables)
    assert got == _brute_force_budget(survival, scheduled, requests, non_draft, tables)


def test_admission_is_the_global_top_b_and_prefix_closed() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        requests, width = int(rng.integers(1, 7)), int(rng.integers(1, 7))
        # flat runs (confidence 1) make ties along a request: they must still admit a prefix
        confidences = np.where(rng.random((requests, width)) < 0.3, 1.0, rng.random((requests, width)).round(1))
        survival = np.cumprod(confidences, axis=1)
        scheduled = rng.integers(0, width + 1, size=requests)
        budget = int(rng.integers(0, int(scheduled.sum()) + 1))
        admitted = admit_top_slots(survival, scheduled, budget)
        assert admitted.sum() == budget
        assert np.all(admitted <= scheduled)
        chosen = [survival[r, p] for r in range(requests) for p in range(admitted[r])]
        left = [survival[r, p] for r in range(requests) for p in range(admitted[r], scheduled[r])]
        if chosen and left:
            assert min(chosen) >= max(left)  # nothing left out scores above something admitted


def _stable_top_slots(survival: np.ndarray, scheduled: np.ndarray, budget: int) -> np.ndarray:
    """The admission by definition: the budget first slots of a stable sort, best first, position-major."""
    requests, width = survival.shape
    scores = np.where(np.arange(width)[None, :] < scheduled[:, None], survival, -np.inf)
    order = np.argsort(-scores.T.ravel(), kind="stable")[:budget]
    return np.bincount(order % requests, minlength=requests)


@pytest.mark.parametrize("full", [True, False])
def test_admission_breaks_ties_as_a_stable_sort_position_major(full: bool) -> None:
    rng = np.random.default_rng(11)
    for _ in range(300):
        requests, width = int(rng.integers(1, 9)), int(rng.integers(1, 8))
        # coarse confidences: many equal survivals within and across requests
        confidences = np.where(rng.random((requests, width)) < 0.4, 1.0, rng.integers(1, 4, (requests, width)) / 4)
        survival = np.cumprod(confidences, axis=1)
        scheduled = np.full(requests, width) if full else rng.integers(0, width + 1, size=requests)
        budget = int(rng.integers(0, int(scheduled.sum()) + 1))
        expected = _stable_top_slots(survival, scheduled, budget)
        assert np.array_equal(admit_top_slots(survival, None if full else scheduled, budget), expected)
        if full:  # no schedule means K each, the same budget
            assert choose_budget(survival, None, requests, requests, _tables(requests, width)) == choose_budget(
                survival, scheduled, requests, requests, _tables(requests, width)
            )


def _tables(requests: int, width: int) -> CostTables:
    sizes = requests * (width + 1) + 2
    return CostTables(draft_s=np.linspace(1.0, 2.0, requests + 1), verify_s=1.0 + np.sqrt(np.arange(sizes)) / 8)


def test_flat_verify_cost_up_to_a_capture_size_admits_up_to_the_edge_not_past() -> None:
    # the target costs 10 ms up to 16 tokens (one captured size), 20 ms at 32: four requests decode, each
    # with 7 drafts nearly sure to pass, so every draft up to 16 tokens is free and the next one doubles the step
    draft_curve = [(1, 1.0e-3), (2, 1.0e-3), (4, 1.0e-3)]
    verify_curve = [(1, 10e-3), (16, 10e-3), (32, 20e-3)]
    tables = cost_tables_from_curves(draft_curve, verify_curve, 8, 64, capture_limit=32)
    assert tables.verify_s[5] == tables.verify_s[16] == pytest.approx(10e-3)
    assert tables.verify_s[17] == pytest.approx(20e-3)  # pads to the next captured size
    survival = np.full((4, 7), 0.9) ** np.arange(1, 8)[None, :]
    budget = choose_budget(survival, np.full(4, 7), 4, 4, tables)
    assert budget == 16 - 4


def test_cost_table_interpolates_past_the_capture_limit_without_blending_across_it() -> None:
    tables = cost_tables_from_curves([(1, 1.0)], [(8, 1.0), (16, 2.0), (32, 3.0), (64, 5.0)], 4, 100, capture_limit=16)
    assert tables.verify_s[9] == 2.0  # padded: the next captured size's cost
    assert tables.verify_s[17] == pytest.approx(3.0)  # past the limit: the first point above it, not a blend with 2.0
    assert tables.verify_s[48] == pytest.approx(4.0)  # interpolated between 32 and 64
    assert tables.verify_s[96] == pytest.approx(7.0)  # linear past the last point


def test_vllm_capture_sizes_and_profile_shapes() -> None:
    # max_num_seqs 4, K 3: ceiling min(4 x 4 x 2, 512) = 32, grid 1 2 4 8 16 24 32 plus uniform decodes of
    # 1, 2, 4 requests (4, 8, 16 tokens)
    assert vllm_capture_sizes(4, 4, 8192) == [1, 2, 4, 8, 16, 24, 32]
    assert vllm_capture_sizes(24, 3, 8192)[:8] == [1, 2, 3, 4, 6, 8, 12, 16]
    assert vllm_capture_sizes(256, 1, 8192)[-3:] == [480, 496, 512]
    assert profile_token_counts([1, 2, 4, 8], 40) == [1, 2, 4, 8, 12, 16, 32, 40]


def test_binormal_features_rank_with_the_asked_auc() -> None:
    rng = np.random.default_rng(0)
    accepted = rng.random((4000, 1)) < 0.6
    for auc in (0.5, 0.7, 0.9):
        features = BinormalFeatures(auc, seed=1).draw(accepted)[:, 0]
        pos, neg = features[accepted[:, 0]], features[~accepted[:, 0]]
        # Mann-Whitney: the share of (accepted, rejected) pairs ranked right
        ranks = np.argsort(np.argsort(np.concatenate((pos, neg)))) + 1
        empirical = (ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg))
        assert abs(empirical - auc) < 0.02, (auc, empirical)


def test_estimator_learns_the_acceptance_from_an_informative_feature() -> None:
    rng = np.random.default_rng(5)
    estimator = OnlineAcceptanceEstimator(3)
    features_model = BinormalFeatures(0.9, seed=6)
    rates = np.array([0.8, 0.5, 0.3])
    for _ in range(1000):
        would = rng.random((16, 3)) < rates
        accepted = np.argmin(np.concatenate((would, np.zeros((16, 1), bool)), axis=1), axis=1)
        features = features_model.draw(would)
        estimates = estimator.predict(features)
        estimator.observe(features, estimates, accepted, np.full(16, 3))
    assert estimator.slope > 0.5  # moved from its cold start towards the feature's signal
    would = rng.random((20000, 3)) < rates
    estimates = estimator.predict(features_model.draw(would))
    # calibrated per position: the mean estimate is the acceptance, and accepted drafts score higher
    assert np.allclose(estimates.mean(axis=0), rates, atol=0.05), estimates.mean(axis=0)
    assert np.all(estimates[would].mean() > estimates[~would].mean() + 0.2)


def test_estimator_waits_100_steps_between_refits() -> None:
    estimator = OnlineAcceptanceEstimator(2)
    features = np.ones((4, 2))
    for _ in range(99):
        estimator.observe(features, estimator.predict(features), np.full(4, 2), np.full(4, 2))
    assert estimator.slope == 0.5 and np.all(estimator.intercepts == -0.2)
    estimator.observe(features, estimator.predict(features), np.full(4, 2), np.full(4, 2))
    assert np.all(estimator.intercepts > -0.2)  # every draft accepted: the estimate rises


def _slot(candidates, initial, **overrides) -> StepSlot:
    config = SglangAdaptive(slots={1: SglangAdaptiveSlot(candidate_steps=candidates)}, **overrides)
    return StepSlot(config.slot_parameters(1), initial)


def test_sglang_slot_starts_at_the_initial_steps_or_the_middle_candidate() -> None:
    assert (_slot([1, 3, 5, 7], 3).steps, _slot([1, 3, 5, 7], 3).ema) == (3, 2.0)
    assert _slot([1, 3, 5, 7], 4).steps == 5  # not a candidate: candidates[4 // 2]
    assert _slot([0, 1, 3], 2).steps == 1


def test_sglang_slot_hand_worked_step_up() -> None:
    # alpha 0.5, warm-up 2, interval 2: EMA from 2.0 with every request accepting 5 drafts
    slot = _slot([1, 3, 5, 7], 3, ema_alpha=0.5, warmup_batches=2, update_interval=2)
    seen = []
    for _ in range(6):
        slot.update(np.array([5, 5]))
        seen.append((slot.steps, slot.ema))
    # EMA 3.5, 4.25 (warm-up), 4.625, 4.8125 -> decide: no drop (4.8 > 1 - 0.5 - 0.25), rise past 3 - 0.5 and
    # 5 - 0.5 but not 7 - 0.5; at batch 6, 4.95 > 5 - 0.5 - 0.25: no drop from 7, nothing above it
    assert seen == [(3, 3.5), (3, 4.25), (3, 4.625), (7, 4.8125), (7, 4.90625), (7, 4.953125)]


def test_sglang_slot_hand_worked_step_down_to_zero_and_probe_back() -> None:
    slot = _slot([0, 1, 3], 1, ema_alpha=1.0, warmup_batches=0, update_interval=1, down_hysteresis=0.0)
    slot.update(np.array([0, 0]))  # EMA 0 <= 0.5: drop to 0
    assert (slot.steps, slot.ema) == (0, 0.0)
    slot.update(np.array([0, 0]))  # at 0 the EMA holds; the decision probes the next candidate
    assert (slot.steps, slot.ema) == (1, 0.0)
    slot.update(np.array([3, 3]))  # EMA 3 > 1 - 0.5 and > 3 - 0.5: rises twice
    assert slot.steps == 3


def test_sglang_slot_ceiling_caps_a_kept_step() -> None:
    slot = _slot([1, 2, 3, 4], 4, ema_alpha=1.0, warmup_batches=0, update_interval=1, ceiling_coeff=1.0)
    slot.update(np.array([2, 3]))  # EMA 2.5: no drop below 4 (2.5 <= 2.25? no) -> keep 4, ceiling ceil(2.5) = 3
    assert slot.steps == 3


def test_sglang_routing_feeds_the_slot_the_batch_pads_to() -> None:
    config = SglangAdaptive(
        slots={1: SglangAdaptiveSlot(candidate_steps=[3]), 4: SglangAdaptiveSlot(candidate_steps=[1, 2])},
        warmup_batches=0,
        update_interval=1,
        ema_alpha=1.0,
    )
    steps = AdaptiveSteps(config, initial_steps=1, capture_sizes=[1, 2, 4, 8])
    assert [steps.k_for_batch(b) for b in (1, 2, 3, 4, 9)] == [3, 3, 1, 1, 1]
    steps.verified(3, np.array([2, 2, 2]))  # 3 pads to 4: key 4's slot learns, rises to 2
    assert steps.k_for_batch(4) == 2 and steps.k_for_batch(1) == 3


@pytest.mark.parametrize(("candidates", "initial"), list(itertools.product([[0], [2], [0, 4]], [1, 2])))
def test_singleton_or_zero_slots_never_leave_their_candidates(candidates, initial) -> None:
    slot = _slot(candidates, initial, warmup_batches=0, update_interval=1)
    for accepted in ([0], [5], [1], [0]):
        slot.update(np.array(accepted))
        assert slot.steps in candidates


def test_the_start_up_profile_replays_vllm_dummy_run_shapes_on_the_cost_model() -> None:
    asked = []

    def timer(batch: int, k: int, context: float):
        asked.append((batch, k, context))
        return (1e-3 * batch, 1e-3 * batch * (k + 1), 0.0, 0.0)  # drafting by requests, verify by tokens

    # max_num_seqs 4, K 3, 64 batched tokens: captured 1 2 4 8 16 24 32, then 48 and 64 past the limit
    tables = profiled_cost_tables(timer, 3, max_num_seqs=4, max_num_batched_tokens=64)
    assert {context for _, _, context in asked} == {8192}
    # N <= 4 tokens: N one-token requests; past that, 4 requests (64 // (K + 1) = 16 allows more) of N / 4 each
    assert tables.verify_s[3] == pytest.approx(4e-3)  # pads to the captured 4: four requests of one token
    assert tables.verify_s[16] == pytest.approx(16e-3)
    # past the limit only the points past it count: 40 sits below the first (48: four requests of 12 tokens)
    assert tables.verify_s[40] == pytest.approx(48e-3)
    assert tables.verify_s[56] == pytest.approx(56e-3)  # between 48 and 64
    assert tables.draft_s[1] == pytest.approx(1e-3) and tables.draft_s[4] == pytest.approx(4e-3)

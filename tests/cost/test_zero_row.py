"""The K = 0-in-a-table cost term: a 0 row of a speculative deployment still pays the drafter."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from spectune.config import CostModelConfig, HardwareConfig, TargetModelSpec, default_drafter, load_document
from spectune.cost import RooflineCostModel, build_cost_model
from spectune.study import evaluate_metrics, recommend, space_from_document

sys.path.insert(0, str(Path(__file__).parents[1] / "study"))
from study_doubles import SyntheticEvaluator  # noqa: E402

QUICKSTART = Path(__file__).parents[2] / "studies" / "quickstart.yaml"
HARDWARE = HardwareConfig.model_validate("h100-sxm")
TARGET = TargetModelSpec.model_validate("llama-3.1-8b")
EAGLE = default_drafter("eagle3", TARGET)
CONTEXT = 664.0


def _models(mode: str, k: int = 5):
    config = CostModelConfig(zero_k_draft_cost=mode)
    return build_cost_model(HARDWARE, TARGET, EAGLE, config, num_speculative_tokens=k), RooflineCostModel(
        HARDWARE, TARGET, EAGLE, CostModelConfig()
    )


@pytest.mark.parametrize(("mode", "draft_k"), [("draft_prefill", 1), ("all_draft_steps", 5)])
def test_a_zero_row_pays_the_drafter_pass_and_other_k_do_not(mode: str, draft_k: int) -> None:
    taxed, plain = _models(mode)
    for batch_size in (2, 189, 256):
        extra = taxed.step_time(batch_size, 0, CONTEXT).total_s - plain.step_time(batch_size, 0, CONTEXT).total_s
        assert extra == pytest.approx(plain.drafting_time(batch_size, draft_k, CONTEXT), rel=1e-12)
        assert extra > 0.03 * plain.step_time(batch_size, 0, CONTEXT).total_s  # a visible share of a plain step
        assert taxed.step_time(batch_size, 3, CONTEXT) == plain.step_time(batch_size, 3, CONTEXT)


def test_no_term_without_it_without_a_drafter_or_with_a_lookup_drafter() -> None:
    none, plain = _models("none")
    assert none.step_time(256, 0, CONTEXT) == plain.step_time(256, 0, CONTEXT)
    config = CostModelConfig(zero_k_draft_cost="all_draft_steps")
    no_drafter = build_cost_model(HARDWARE, TARGET, None, config)
    ngram = build_cost_model(HARDWARE, TARGET, default_drafter("ngram", TARGET), config, num_speculative_tokens=5)
    baseline = RooflineCostModel(HARDWARE, TARGET, None, CostModelConfig()).step_time(256, 0, CONTEXT)
    assert no_drafter.step_time(256, 0, CONTEXT) == baseline
    assert ngram.step_time(256, 0, CONTEXT).total_s == baseline.total_s


def _quickstart_at_256(mode: str):
    document = load_document(QUICKSTART, expect="study").model
    schedule = document.schedule.model_copy(update={"batch_sizes": [1, 8, 32, 256]})
    return document.model_copy(
        update={"schedule": schedule, "cost_model": document.cost_model.model_copy(update={"zero_k_draft_cost": mode})}
    )


def _recommend(document):
    space = space_from_document(document)
    evaluator = SyntheticEvaluator(noise=0.0)

    def metrics(point):
        values = evaluator(point)
        values["mean_step_ms"] = (
            values["tpot_p99_ms"] / 1.25 * values["mean_acceptance_length"]
        )  # the double's step time
        return values

    completed = {p: evaluate_metrics(space, p, metrics(p), 0) for p in space.points()}
    return space, completed, recommend(space, completed)


def test_quickstart_at_256_says_whether_the_zero_row_or_speculation_off_wins_and_by_how_much() -> None:
    document = _quickstart_at_256("draft_prefill")
    space, completed, recommendation = _recommend(document)
    tax = space.context["zero_row"]["draft_ms"]["eagle3"]["256"][-1]
    roofline = RooflineCostModel(document.hardware, document.target_model, EAGLE, document.cost_model)
    assert tax == pytest.approx(1e3 * roofline.drafting_time(256, 1, 600 + 128 / 2))
    assert "ngram" not in space.context["zero_row"]["draft_ms"]  # a lookup drafter keeps no KV cache
    last = recommendation.choices[-1]
    off = completed[space.point(256, recommendation.combo.label, 0)]
    assert off.throughput > last.evaluation.throughput  # with the drafter paid, speculation off is faster at 256
    note = next(n for n in recommendation.notes if n.startswith("batch sizes 91-256"))
    assert f"{off.throughput:,.0f} tokens/s here, {off.throughput / last.evaluation.throughput - 1:.1%} more" in note
    overall = next(n for n in recommendation.notes if n.startswith("over all buckets"))
    assert "this schedule wins by" in overall  # speculation pays at the small batch sizes
    # without the term, the plain-decoding point is the 0 row itself: no such note, and K = 0 at 256
    _, _, untaxed = _recommend(_quickstart_at_256("none"))
    assert untaxed.choices[-1].num_speculative_tokens == 0 and not any(
        n.startswith("over all buckets") for n in untaxed.notes
    )


def test_the_term_makes_the_zero_row_slower_by_the_drafter_share() -> None:
    space, completed, recommendation = _recommend(_quickstart_at_256("all_draft_steps"))
    combo = recommendation.combo
    from spectune.study._zero_row import zero_row_evaluation

    off = completed[space.point(256, combo.label, 0)]
    taxed = zero_row_evaluation(space, combo, 256, off)
    step, tax = off.metrics.mean_step_ms, taxed.zero_row_draft_ms
    assert taxed.throughput == pytest.approx(off.throughput * step / (step + tax))
    assert taxed.metrics.tpot_p99_ms == pytest.approx(off.metrics.tpot_p99_ms * (step + tax) / step)

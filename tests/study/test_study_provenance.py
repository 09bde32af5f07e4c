"""Marks on a recommendation: K past the measured positions, another draft sampling or temperature, the range's edge."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from study_doubles import SyntheticEvaluator, make_space

from spectune.config import load_document
from spectune.study import (
    StudySpace,
    document_fingerprint,
    evaluate_metrics,
    provenance_notes,
    recommend,
    recommendation_provenance,
    space_from_document,
)

QUICKSTART = Path(__file__).parents[2] / "studies" / "quickstart.yaml"


def _context(measured_positions: int, measured_with: str = "greedy", measured_temperature: float | None = 0.0) -> dict:
    facts = {
        "measured_positions": measured_positions,
        "measured_with": measured_with,
        "measured_temperature": measured_temperature,
        "extrapolation": "repeat_last",
    }
    return {"temperatures": [0.0], "candidates": {"eagle3": facts, "ngram": facts}}


def _recommendation(space: StudySpace, throughput_of=None):
    evaluator = SyntheticEvaluator(noise=0.0)
    completed = {}
    for point in space.points():
        metrics = evaluator(point)
        if throughput_of is not None:
            metrics["throughput_tokens_per_s"] = throughput_of(point, metrics["throughput_tokens_per_s"])
        completed[point] = evaluate_metrics(space, point, metrics, 0)
    return recommend(space, completed), completed


def _marks(space: StudySpace, **kwargs) -> dict[int, set[str]]:
    recommendation, completed = _recommendation(space, **kwargs)
    return {
        b.batch_size: {m.code for m in b.marks} for b in recommendation_provenance(recommendation, completed)
    }, recommendation


def test_k_past_the_measured_positions_is_marked_and_k_within_is_not() -> None:
    space = dataclasses.replace(make_space(max_k=8), context=_context(measured_positions=3))
    marks, recommendation = _marks(space)
    ks = {c.batch_size: c.num_speculative_tokens for c in recommendation.choices}
    assert any(k > 3 for k in ks.values()) and any(0 < k <= 3 for k in ks.values())
    for batch_size, k in ks.items():
        assert ("extrapolated_k" in marks[batch_size]) == (k > 3), (batch_size, k)


def test_draft_sampling_and_temperature_other_than_measured_are_marked() -> None:
    space = dataclasses.replace(make_space(), context=_context(3, measured_with="greedy", measured_temperature=0.7))
    marks, recommendation = _marks(space)
    assert recommendation.combo.draft_sample_method == "probabilistic"
    speculating = [b for b, c in zip(marks, recommendation.choices, strict=True) if c.num_speculative_tokens > 0]
    assert speculating and all({"draft_sampling", "temperature"} <= marks[b] for b in speculating)
    same = dataclasses.replace(
        make_space(), context=_context(3, measured_with="probabilistic", measured_temperature=0.0)
    )
    marks, _ = _marks(same)
    assert not any({"draft_sampling", "temperature"} & codes for codes in marks.values())


def test_fastest_k_at_the_top_of_the_range_says_widen_it_even_when_a_tie_picked_a_smaller_k() -> None:
    space = make_space(max_k=4)

    def rising(point, throughput):  # at batch size 1 throughput still rises at K = 4, by less than a tie
        return throughput * (1 + 0.001 * point.num_speculative_tokens) if point.batch_size == 1 else throughput

    recommendation, completed = _recommendation(space, throughput_of=rising)
    provenance = {b.batch_size: b for b in recommendation_provenance(recommendation, completed)}
    assert "range_edge" in {m.code for m in provenance[1].marks}
    assert any(
        "widen search.num_speculative_tokens.max" in note for note in provenance_notes(tuple(provenance.values()))
    )
    wide = make_space(max_k=12)
    recommendation, completed = _recommendation(wide)
    assert not any(
        m.code == "range_edge" for b in recommendation_provenance(recommendation, completed) for m in b.marks
    )


def test_the_study_space_carries_the_profile_facts_through_storage_json() -> None:
    document = load_document(QUICKSTART, expect="study").model
    space = space_from_document(document)
    facts = space.context["candidates"]["eagle3"]
    assert (
        facts["measured_positions"] == 3
        and facts["measured_with"] == "greedy"
        and facts["extrapolation"] == "repeat_last"
    )
    assert StudySpace.from_json(space.to_json()).context == space.context
    assert space.context["prompt_tokens"] == 600 and space.context["output_tokens"] == 128


def test_the_extrapolation_rule_is_part_of_the_study_hash() -> None:
    document = load_document(QUICKSTART, expect="study").model
    candidates = list(document.candidates)
    candidates[0] = candidates[0].model_copy(
        update={"acceptance": candidates[0].acceptance.model_copy(update={"extrapolation": "geometric_decay"})}
    )
    changed = document.model_copy(update={"candidates": candidates})
    assert document_fingerprint(changed)["document_sha256"] != document_fingerprint(document)["document_sha256"]

"""A bucket where a combo meets no SLO counts against it: it is never left out of the comparison."""

from study_doubles import PointByPoint, fingerprint, make_space

from spectune.config._metrics import parse_constraint
from spectune.study import load_outcome, run_study

# (candidate, batch size) -> (throughput tokens/s, tpot_p99 ms) at every K >= 1; K = 0 misses the SLO.
_CURVES = {
    ("eagle3", 1): (100.0, 8.0),
    ("eagle3", 8): (1000.0, 8.0),
    ("ngram", 1): (150.0, 12.0),
    ("ngram", 8): (1100.0, 8.0),
}


class _Planted(PointByPoint):
    def __call__(self, point):
        if point.is_off:
            throughput, tpot = (50.0, 20.0) if point.batch_size == 1 else (400.0, 20.0)
        else:
            throughput, tpot = _CURVES[(point.combo.candidate, point.batch_size)]
            throughput *= 1 + 0.01 * point.num_speculative_tokens
        return {
            "throughput_tokens_per_s": throughput,
            "throughput_stderr_tokens_per_s": 0.0,
            "tpot_p99_ms": tpot,
            "mean_batch_size": float(point.batch_size),
        }


def test_a_combo_missing_the_slo_at_one_batch_size_loses_to_one_meeting_it_everywhere(tmp_path):
    space = make_space(
        name="slo",
        batch_sizes=(1, 8),
        max_k=2,
        methods=("eagle3", "ngram"),
        constraints=(parse_constraint("tpot_p99_ms <= 10"),),
    )
    journal = str(tmp_path / "study.journal")
    run_study(space, _Planted(), fingerprint(), storage=journal, strategy="exhaustive")
    recommendation = load_outcome(journal, "slo").recommendation
    assert recommendation is not None
    assert recommendation.combo.candidate == "eagle3"
    assert all(c.evaluation is not None and c.evaluation.feasible for c in recommendation.choices)
    ngram = next(s for s in recommendation.ranking if s.combo.candidate == "ngram")
    assert ngram.infeasible_batch_sizes == (1,)
    assert recommendation.ranking[-1] is ngram
    assert any(
        n.startswith("ngram/") and "no config meets the SLOs at batch size(s) 1" in n for n in recommendation.notes
    )
    assert f"{recommendation.combo.label}: meets the SLOs at every batch size" in recommendation.notes


class _OffMeetsAtOne(_Planted):
    def __call__(self, point):
        metrics = super().__call__(point)
        if point.is_off and point.batch_size == 1:
            metrics["tpot_p99_ms"] = 5.0
        return metrics


def test_a_bucket_whose_drafts_miss_the_slo_is_scored_at_the_k0_the_table_would_serve(tmp_path):
    space = make_space(
        name="slo",
        batch_sizes=(1, 8),
        max_k=2,
        methods=("eagle3", "ngram"),
        constraints=(parse_constraint("tpot_p99_ms <= 10"),),
    )
    journal = str(tmp_path / "study.journal")
    run_study(space, _OffMeetsAtOne(), fingerprint(), storage=journal, strategy="exhaustive")
    recommendation = load_outcome(journal, "slo").recommendation
    assert recommendation is not None
    ngram = next(s for s in recommendation.ranking if s.combo.candidate == "ngram")
    assert ngram.infeasible_batch_sizes == ()
    assert [(c.batch_size, c.num_speculative_tokens) for c in ngram.choices] == [(1, 0), (8, 2)]
    # sqrt(50 * 1100 * 1.02): K = 0's 50 tokens/s at batch size 1 is in the mean, not left out of it
    assert abs(ngram.aggregate_throughput_tokens_per_s - (50.0 * 1122.0) ** 0.5) < 1e-6
    assert recommendation.combo.candidate == "eagle3"

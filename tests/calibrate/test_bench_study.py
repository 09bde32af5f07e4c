"""The loop's last step: a study on the step-time table calibrated from bench results finds the surface's best K."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from spectune.calibrate import calibrate
from spectune.calibrate._bench_table import step_time_csv
from spectune.config import load_document
from spectune.study import SimulationEvaluator, document_fingerprint, load_outcome, run_study, space_from_document

from .bench_synthetic import write_bench_results

RATE = 0.85
RIDGE_TOKENS = 24


def sharp_surface(batch_size: int, k: int) -> float:
    """Flat until B*(K+1) reaches the ridge, then steep: each bucket's best K sits at its kink, >= 5 % clear of the next."""
    return 6.0 + 0.2 * k + 0.5 * max(batch_size * (k + 1) - RIDGE_TOKENS, 0)


def surface_best_k(batch_size: int, ks: range) -> int:
    length = {k: sum(RATE**i for i in range(k + 1)) for k in ks}
    throughput = {k: batch_size * length[k] / sharp_surface(batch_size, k) for k in ks}
    return max(throughput, key=throughput.__getitem__)


@pytest.mark.slow
def test_study_on_the_calibrated_table_recommends_the_surfaces_best_k(tmp_path: Path) -> None:
    batch_sizes, ks = (4, 8, 24), range(0, 7)
    write_bench_results(tmp_path / "results", concurrencies=batch_sizes, ks=ks, conditional_rates=[RATE] * 6,
                        surface=sharp_surface, output_len=128, input_len=64)  # fmt: skip
    (tmp_path / "step-times.csv").write_text(step_time_csv(calibrate([tmp_path / "results"]).bench))
    study = {
        "kind": "study", "name": "loop", "seed": 0,
        "workload": {"num_requests": 256, "prompt_tokens": 64, "output_tokens": 128, "temperature": 0.0, "vocab_size": 128, "max_num_seqs": 64},
        "hardware": "h100-sxm", "target_model": "llama-3.1-8b",
        "cost_model": {"method": "measured", "step_times": "step-times.csv"},
        "candidates": [{"name": "eagle3", "speculative": {"method": "eagle3", "model": "org/eagle3", "rejection_sample_method": "standard",
                                                          "draft_sample_method": "greedy"},
                        "acceptance": {"conditional_rates": [RATE]}}],
        "search": {"num_speculative_tokens": {"min": 1, "max": 6}},
        "schedule": {"batch_sizes": list(batch_sizes), "requests_per_batch_size": 4, "min_requests": 32},
    }  # fmt: skip
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    document = load_document(tmp_path / "study.yaml", expect="study").model
    space = space_from_document(document)
    storage = str(tmp_path / "study.journal")
    run_study(
        space, SimulationEvaluator(document), document_fingerprint(document), storage=storage, strategy="exhaustive"
    )
    recommendation = load_outcome(storage, space.name).recommendation
    chosen = {c.batch_size: c.num_speculative_tokens for c in recommendation.choices}
    assert chosen == {b: surface_best_k(b, ks) for b in batch_sizes}
    assert len(set(chosen.values())) == 3  # a different K per bucket: the test can tell them apart

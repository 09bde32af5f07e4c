"""A measured step-time table with repeats widens the tie sets by its spread; a table without MAD does not."""

from __future__ import annotations

from pathlib import Path

import yaml

from spectune.config import load_document
from spectune.study import evaluate_metrics, space_from_document
from spectune.study._recommend import is_tie

ROWS = [(1, 0, 6.0), (64, 0, 7.4), (1, 2, 6.9), (64, 2, 12.4), (1, 4, 7.8), (64, 4, 17.8)]


def _space(tmp_path: Path, mad_fraction: float | None):
    header = "batch_size,num_speculative_tokens,step_time_ms" + (
        ",concurrency,step_time_mad_ms" if mad_fraction else ""
    )
    lines = [header] + [f"{b},{k},{t}" + (f",{b},{t * mad_fraction:.4f}" if mad_fraction else "") for b, k, t in ROWS]
    (tmp_path / "step-times.csv").write_text("\n".join(lines) + "\n")
    study = {
        "kind": "study", "name": "spread", "seed": 0,
        "workload": {"num_requests": 64, "prompt_tokens": 64, "output_tokens": 64, "temperature": 0.0, "vocab_size": 128,
                     "max_num_seqs": 64},
        "hardware": "h100-sxm", "target_model": "llama-3.1-8b",
        "cost_model": {"method": "measured", "step_times": "step-times.csv"},
        "candidates": [{"name": "eagle3", "speculative": {"method": "eagle3", "model": "org/eagle3"},
                        "acceptance": {"conditional_rates": [0.8]}}],
        "search": {"num_speculative_tokens": {"min": 1, "max": 4}},
        "schedule": {"batch_sizes": [1, 64]},
    }  # fmt: skip
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    return space_from_document(load_document(tmp_path / "study.yaml", expect="study").model)


def _evaluation(space, k: int, throughput: float):
    combo = space.combos[0]
    point = space.point(64, combo.label, k)
    metrics = {"throughput_tokens_per_s": throughput, "throughput_stderr_tokens_per_s": 1.0, "num_drafts": None}
    return evaluate_metrics(space, point, metrics, trial_number=k)


def test_repeats_spread_turns_a_3_percent_gap_into_a_tie(tmp_path: Path) -> None:
    noisy = _space(tmp_path, mad_fraction=0.02)
    best, other = _evaluation(noisy, 4, 1000.0), _evaluation(noisy, 2, 970.0)
    assert best.noise > 25.0  # 1.4826 x 2 % of 1,000 tokens/s, with the simulator's 1 tokens/s beside it
    assert is_tie(best, other)


def test_without_a_measured_spread_the_gap_stays_a_difference(tmp_path: Path) -> None:
    plain = _space(tmp_path, mad_fraction=None)
    assert "step_time_spread" not in plain.context
    best, other = _evaluation(plain, 4, 1000.0), _evaluation(plain, 2, 970.0)
    assert best.noise == 1.0
    assert not is_tie(best, other)

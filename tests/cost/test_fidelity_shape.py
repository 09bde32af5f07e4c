"""Consistency checks from public measurements, as checks of the simulated shape (not of a number).

A dense target at short context (EAGLE-3 paper, Table 3): the speculative gain falls as the batch grows.
Acceptance (vLLM PR 41044's per-position rates, concurrency 1 to 8): it does not move with the batch.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from spectune.cli import app

DOCUMENT = Path(__file__).resolve().parents[2] / "benchmarks" / "fidelity" / "a2-sglang-h100" / "eagle3.yaml"


def _simulate(batch: int) -> dict[str, float]:
    result = CliRunner().invoke(
        app,
        [
            "simulate",
            str(DOCUMENT),
            "--json",
            "--set",
            f"workload.concurrency={batch}",
            "--set",
            f"workload.num_requests={2 * batch}",
        ],
    )
    assert result.exit_code == 0, result.output
    parsed: dict[str, float] = json.loads(result.stdout)
    return parsed


def test_gain_falls_with_batch_for_a_dense_target_at_short_context() -> None:
    gains = [_simulate(batch)["speedup_vs_no_spec"] for batch in (2, 16, 64)]
    assert gains[0] > gains[1] > gains[2] > 1.0, gains


def test_acceptance_does_not_move_with_batch_size() -> None:
    lengths = [_simulate(batch)["mean_acceptance_length"] for batch in (2, 64)]
    assert abs(lengths[0] - lengths[1]) < 0.1, lengths

"""Consistency checks from public measurements, as checks of the simulated shape (not of a number).

A dense target at short context (EAGLE-3 paper, Table 3): the speculative gain falls as the batch grows.
At long context (MagicDec, 32000-token prefill, static batch 32..128) it rises with the batch instead: the KV
cache read grows with B while the drafter (with a 512-token StreamingLLM cache) stays cheap.
Acceptance (vLLM PR 41044's per-position rates, concurrency 1 to 8): it does not move with the batch.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from spectune.cli import app

SUITE = Path(__file__).resolve().parents[2] / "benchmarks" / "fidelity"
DOCUMENT = SUITE / "a2-sglang-h100" / "eagle3.yaml"
LONG_CONTEXT = SUITE / "a5-magicdec-long-context" / "self-spec.yaml"


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


def _decode_tokens_per_s(batch: int, *overrides: str) -> float:
    """Output tokens over the simulated time outside prefill (MagicDec times decoding only)."""
    arguments = ["simulate", str(LONG_CONTEXT), "--json", "--set", f"workload.concurrency={batch}"]
    arguments += ["--set", f"workload.num_requests={batch}", "--set", "workload.max_num_batched_tokens=1048576"]
    for item in overrides:
        arguments += ["--set", item]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    parsed = json.loads(result.stdout)
    decode_s = parsed["simulated_time_s"] * (1 - parsed["step_time_share"]["prefill"])
    return float(parsed["output_tokens"]) / decode_s


def test_gain_rises_with_batch_at_long_context() -> None:
    off = "speculative.num_speculative_tokens_per_batch_size=[[1,1024,0]]"
    gains = [_decode_tokens_per_s(batch) / _decode_tokens_per_s(batch, off) for batch in (8, 32, 128)]
    assert 1.0 < gains[0] < gains[1] < gains[2], gains

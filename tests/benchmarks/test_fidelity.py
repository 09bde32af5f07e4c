"""The fidelity suite: its documents stay valid and ``benchmarks/fidelity.py --quick`` runs on the CPU."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted((ROOT / "benchmarks" / "fidelity").glob("*/*.yaml"))


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_suite_document_simulates(document: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "spectune", "simulate", str(document), "--json", "--set", "simulation.max_steps=5"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_quick_replay_writes_results_and_docs(tmp_path: Path) -> None:
    out, docs = tmp_path / "fidelity.csv", tmp_path / "fidelity.md"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "fidelity.py"), "--quick", "--out", str(out), "--docs", str(docs)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    with out.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    measured = (ROOT / "benchmarks" / "fidelity" / "a8-qwen3-moe-h100" / "measured.csv").read_text().splitlines()
    assert len(rows) == len(measured) - 1
    for row in rows:
        assert row["commit"] and row["date"] and row["machine"]
        assert abs(float(row["simulated"]) / float(row["measured"]) - 1 - float(row["error"])) < 1e-3
    text = docs.read_text()
    assert "## a8-qwen3-moe-h100" in text and "## Summary (unfitted anchors)" in text
    assert "not replayable: tree drafting" in text and "`eagle3-chain.yaml`: A8" in text

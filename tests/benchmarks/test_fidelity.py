"""The fidelity suite: its documents stay valid and ``benchmarks/fidelity.py --quick`` runs on the CPU."""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

from spectune.cli import app

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "benchmarks" / "fidelity"
DOCUMENTS = sorted(SUITE.glob("*/*.yaml"))
MEASURED = sorted(SUITE.glob("*/measured.csv"))
# what fidelity.py reads besides the JSON keys of ``spectune simulate --json``
DERIVED = {"decode_tokens_per_s"}


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_suite_document_simulates(document: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "spectune", "simulate", str(document), "--json", "--set", "simulation.max_steps=5"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def quick_replay(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``benchmarks/fidelity.py --quick`` run once for the tests that read its CSV and page."""
    folder = tmp_path_factory.mktemp("fidelity")
    out, docs = folder / "fidelity.csv", folder / "fidelity.md"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "fidelity.py"), "--quick", "--out", str(out), "--docs", str(docs)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out, docs


def test_quick_replay_writes_results_and_docs(quick_replay: tuple[Path, Path]) -> None:
    out, docs = quick_replay
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
    assert "## Where the simulated time falls short" in text


def test_quick_replay_reports_the_time_each_baseline_step_lacks_per_layer_and_all_reduce(
    quick_replay: tuple[Path, Path],
) -> None:
    out, docs = quick_replay
    with out.open(newline="") as handle:
        rows = {(row["point"], row["metric"]): row for row in csv.DictReader(handle)}
    # A8 at batch 1 and 4 on TP 2: Qwen3-30B-A3B has 48 layers, two all-reduces each
    for point, batch in (("no-SD bs1", 1), ("no-SD bs4", 4)):
        row = rows[point, "baseline_throughput_tokens_per_s"]
        assert (row["target_layers"], row["allreduces_per_pass"]) == ("48", "96")
        step_ms = {name: 1e3 * batch / float(row[name]) for name in ("measured", "simulated")}
        assert float(row["missing_ms_per_step"]) == pytest.approx(step_ms["measured"] - step_ms["simulated"], abs=1e-3)
        per_layer_us = 1e3 * float(row["missing_ms_per_step"]) / 48
        assert f"| a8-qwen3-moe-h100 | {point} | {float(row['missing_ms_per_step']):+.2f} | {per_layer_us:.1f} |" in (
            docs.read_text()
        )
    assert rows["eagle3 3/1/4 bs1", "speedup_vs_no_spec"]["missing_ms_per_step"]
    speculative = rows["eagle3 3/1/4 bs1", "throughput_tokens_per_s"]
    too_fast = float(speculative["simulated"]) > float(speculative["measured"])
    assert (float(speculative["missing_ms_per_step"]) > 0) == too_fast
    assert f"| eagle3 3/1/4 bs1 | throughput_tokens_per_s | {float(speculative['missing_ms_per_step']):+.2f} |" in (
        docs.read_text()
    )


@pytest.mark.parametrize(
    ("metric", "measured", "simulated"), [("throughput_tokens_per_s", 100.0, 160.0), ("tpot_p50_ms", 30.0, 12.0)]
)
def test_an_absolute_speculative_point_lacks_the_difference_of_its_steps(
    metric: str, measured: float, simulated: float
) -> None:
    fidelity = _fidelity_module()
    tokens_per_step, batch = 2.0, 4
    result = {"mean_acceptance_length": tokens_per_step}

    def step_ms(value: float) -> float:  # per request, a step emits tokens_per_step tokens
        return tokens_per_step * value if metric == "tpot_p50_ms" else 1e3 * batch * tokens_per_step / value

    missing = fidelity.missing_ms_per_step(metric, measured, simulated, result, batch)
    assert missing == pytest.approx(step_ms(measured) - step_ms(simulated), rel=1e-12)


@pytest.mark.parametrize(
    ("metric", "quantity", "rate"),
    [("speedup_vs_no_spec", "throughput_tokens_per_s", 300.0), ("tpot_speedup_vs_no_spec", "tpot_p50_ms", 4.0)],
)
@pytest.mark.parametrize(("simulated", "measured"), [(1.4, 1.1), (0.8, 0.95)])
def test_the_extra_speculative_step_time_turns_the_simulated_speedup_into_the_measured_one(
    metric: str, quantity: str, rate: float, simulated: float, measured: float
) -> None:
    fidelity = _fidelity_module()
    result = {"mean_acceptance_length": 2.5, quantity: rate}
    extra_ms = fidelity.missing_ms_per_step(metric, measured, simulated, result, 3)
    tokens_per_step = 2.5
    step_ms = tokens_per_step * rate if quantity == "tpot_p50_ms" else 1e3 * tokens_per_step * 3 / rate
    # the speedup scales with 1 / (speculative step time) when the baseline is held
    assert simulated * step_ms / (step_ms + extra_ms) == pytest.approx(measured, rel=1e-9)
    assert (extra_ms > 0) == (simulated > measured)


def test_a_run_that_drafted_nothing_counts_one_token_a_step() -> None:
    fidelity = _fidelity_module()
    result = {"mean_acceptance_length": None, "tpot_p50_ms": 15.0}
    extra_ms = fidelity.missing_ms_per_step("tpot_speedup_vs_no_spec", 0.8, 0.9, result, None)
    assert 0.9 * 15.0 / (15.0 + extra_ms) == pytest.approx(0.8, rel=1e-9)


def _points(table: Path) -> list[dict[str, str]]:
    with table.open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("table", MEASURED, ids=lambda p: p.parent.name)
def test_every_measured_point_names_a_document_its_overrides_fit_and_a_quantity_simulate_reports(table: Path) -> None:
    points = _points(table)
    runs = {(row["document"], row["set"]) for row in points}
    runs |= {(row["document"], row["versus"]) for row in points if row.get("versus")}
    for document, overrides in sorted(runs):
        arguments = ["simulate", str(table.parent / document), "--json", "--set", "simulation.max_steps=3"]
        for item in overrides.split():
            arguments += ["--set", item]
        result = CliRunner().invoke(app, arguments)
        assert result.exit_code == 0, f"{table.parent.name}/{document} {overrides}: {result.output}"
        reported = set(json.loads(result.stdout)) | DERIVED
        for row in points:
            if row["document"] == document and row["set"] == overrides:
                assert (row.get("read") or row["metric"]) in reported, row
                assert float(row["measured"]) > 0 and row["source"].startswith("https://"), row


def test_not_replayable_entries_give_a_reason_and_a_source() -> None:
    entries = _points(SUITE / "not-replayable.csv")
    assert {entry["anchor"] for entry in entries} >= {"A6", "A8"}
    for entry in entries:
        assert entry["what"] and entry["reason"] and entry["source"].startswith("https://"), entry


def _fidelity_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fidelity", ROOT / "benchmarks" / "fidelity.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_docs_and_readme_line_are_generated_from_the_committed_results() -> None:
    fidelity = _fidelity_module()
    rows = _points(ROOT / "benchmarks" / "results" / "fidelity-latest.csv")
    assert (ROOT / "docs" / "fidelity.md").read_text() == fidelity.render(rows), (
        "docs/fidelity.md is stale; rerun python benchmarks/fidelity.py"
    )
    assert fidelity.readme_row(rows) in (ROOT / "README.md").read_text().splitlines()
    replayed = {row["anchor"] for row in rows}
    assert replayed == {table.parent.name for table in MEASURED}, "the committed results miss an anchor"

"""``spectune calibrate`` on ``vllm bench sweep serve`` trees: cells by (concurrency, forced K), medians of repeats,
refusals naming the file and the cell, and what was skipped."""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from spectune.cli import app
from spectune.config import read_step_time_table
from spectune.errors import DocumentError

from .bench_synthetic import write_bench_results
from .sweep_synthetic import write_sweep_tree

runner = CliRunner()
RATES = [0.8, 0.75, 0.7, 0.65]
KS, GLOBAL_K, CONCURRENCIES = (0, 2, 4), 4, (1, 8, 64)


def _step_time_ms(record: dict) -> float:
    """The estimator of docs/calibration.md, written out independently: decode time over decode steps."""
    decode_time = record["mean_tpot_ms"] * (record["total_output_tokens"] - record["completed"])
    steps = record.get("spec_decode_num_drafts") or (record["total_output_tokens"] - record["completed"])
    return decode_time / steps


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(line for line in path.read_text().splitlines() if not line.startswith("#")))


def test_sweep_tree_gives_each_cells_median_with_its_mad_and_concurrency(tmp_path: Path) -> None:
    tree = tmp_path / "results" / "sweep"
    write_sweep_tree(tree, ks=KS, global_k=GLOBAL_K, concurrencies=CONCURRENCIES, conditional_rates=RATES)
    (tree / "SERVE--k2-BENCH--c8" / "warmup.json").write_text("{}")
    out = tmp_path / "new" / "dir" / "profile.yaml"  # the folders do not exist yet
    result = runner.invoke(app, ["calibrate", str(tmp_path / "results"), "--out", str(out), "--method", "eagle3"])
    assert result.exit_code == 0, result.output
    rows = _rows(out.parent / "step-times.csv")
    assert {(int(r["concurrency"]), int(r["num_speculative_tokens"])) for r in rows} == {
        (c, k) for c in CONCURRENCIES for k in KS
    }
    for row in rows:
        c, k = int(row["concurrency"]), int(row["num_speculative_tokens"])
        records = json.loads((tree / f"SERVE--k{k}-BENCH--c{c}" / "summary.json").read_text())
        times = [_step_time_ms(r) for r in records]
        assert len(times) == 3 and len(set(times)) == 3  # three distinct repeats, so the median is a choice
        median = statistics.median(times)
        assert float(row["step_time_ms"]) == round(median, 4)
        assert float(row["step_time_mad_ms"]) == round(statistics.median(abs(t - median) for t in times), 4)
    table = read_step_time_table(out.parent / "step-times.csv")
    assert {p.concurrency for p in table.points} == set(CONCURRENCIES)
    assert out.is_file()
    profile = yaml.safe_load(out.read_text())
    assert len(profile["conditional_rates"]) == GLOBAL_K  # acceptance from the K=4 runs, positions cut at nothing
    assert "skipped: a copy of a record of summary.json beside it (and 26 more files like it)" in result.output
    assert "skipped: an unmeasured warm-up run" in result.output


def test_k0_rows_are_measured_with_the_drafter_loaded(tmp_path: Path) -> None:
    """A forced K = 0 pays the drafter (the generator's 8 % tax), and calibrate keeps it in the K = 0 rows."""
    write_sweep_tree(tmp_path / "sweep", ks=KS, global_k=GLOBAL_K, concurrencies=CONCURRENCIES, conditional_rates=RATES)
    out = tmp_path / "profile.yaml"
    assert runner.invoke(app, ["calibrate", str(tmp_path / "sweep"), "--out", str(out)]).exit_code == 0
    rows = {
        (int(r["concurrency"]), int(r["num_speculative_tokens"])): float(r["step_time_ms"])
        for r in _rows(tmp_path / "step-times.csv")
    }
    # default_surface(1, 0) = 6.0 ms plain; with the drafter loaded it is 6.48 ms
    assert 6.3 < rows[(1, 0)] < 6.7


def _spoiled(tmp_path: Path, spoil) -> tuple[int, str]:
    write_sweep_tree(
        tmp_path / "sweep", ks=KS, global_k=GLOBAL_K, concurrencies=CONCURRENCIES, conditional_rates=RATES, spoil=spoil
    )
    result = runner.invoke(app, ["calibrate", str(tmp_path / "sweep"), "--out", str(tmp_path / "profile.yaml")])
    return result.exit_code, result.output


def test_a_noisy_cell_is_refused_naming_its_file_and_cell(tmp_path: Path) -> None:
    def spoil(k: int, c: int, run: int, record: dict) -> None:
        if (k, c) == (2, 8) and run != 1:
            record["mean_tpot_ms"] *= 0.88 if run == 0 else 1.15  # two of three runs 12-15 % off: MAD ~12 %

    code, output = _spoiled(tmp_path, spoil)
    assert code == 1
    assert "SERVE--k2-BENCH--c8/summary.json [0]" in output and "cell (concurrency 8, K=2) is too noisy" in output
    assert "more than the 5.0% allowed" in output and "Traceback" not in output
    assert not (tmp_path / "step-times.csv").exists()


def test_one_slow_repeat_does_not_move_the_median(tmp_path: Path) -> None:
    def spoil(k: int, c: int, run: int, record: dict) -> None:
        if (k, c) == (2, 8) and run == 2:
            record["mean_tpot_ms"] *= 1.5

    code, output = _spoiled(tmp_path, spoil)
    assert code == 0, output


def test_a_failed_run_is_refused_naming_the_file(tmp_path: Path) -> None:
    def spoil(k: int, c: int, run: int, record: dict) -> None:
        if (k, c, run) == (4, 1, 1):
            record["failed"] = 2
        if (k, c, run) == (0, 64, 2):
            record["num_prompts"] = record["completed"] + 3

    code, output = _spoiled(tmp_path, spoil)
    assert code == 1
    lines = [line for line in output.splitlines() if "rerun the cell" in line]
    assert any(
        "SERVE--k4-BENCH--c1/summary.json" in line and "[1].failed: 2 request(s) failed" in line for line in lines
    )
    assert any(
        "SERVE--k0-BENCH--c64/summary.json" in line and "[2].completed: 256 of num_prompts 259" in line
        for line in lines
    )


def test_a_cell_with_fewer_than_three_repeats_is_refused(tmp_path: Path) -> None:
    write_sweep_tree(
        tmp_path / "sweep", ks=KS, global_k=GLOBAL_K, concurrencies=CONCURRENCIES, conditional_rates=RATES, num_runs=2
    )
    result = runner.invoke(app, ["calibrate", str(tmp_path / "sweep"), "--out", str(tmp_path / "p.yaml")])
    assert result.exit_code == 1
    assert "cell (concurrency 1, K=0) has 2 run(s)" in result.output and "--num-runs 3" in result.output


def test_acceptance_past_the_forced_k_means_the_table_was_not_served(tmp_path: Path) -> None:
    def spoil(k: int, c: int, run: int, record: dict) -> None:
        if (k, c, run) == (2, 8, 0):
            record["spec_decode_per_position_acceptance_rates"][3] = 0.1

    code, output = _spoiled(tmp_path, spoil)
    assert code == 1
    assert "[0].spec_decode_per_position_acceptance_rates: position 3 accepted 0.1 of drafts" in output
    assert "the table forced K=2" in output


def test_calibrate_out_creates_its_folder_for_a_bench_folder(tmp_path: Path) -> None:
    """The issue's report: a missing --out folder failed after all the work, writing nothing."""
    write_bench_results(tmp_path / "bench", concurrencies=(1, 8), ks=(0, 2), conditional_rates=[0.8, 0.7])
    out = tmp_path / "out" / "deeper" / "profile.yaml"
    result = runner.invoke(app, ["calibrate", str(tmp_path / "bench"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.is_file() and (out.parent / "step-times.csv").is_file()
    assert {int(r["concurrency"]) for r in _rows(out.parent / "step-times.csv")} == {1, 8}


def test_calibrate_out_under_a_file_is_refused_before_reading(tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("")
    result = runner.invoke(app, ["calibrate", str(tmp_path / "missing"), "--out", str(tmp_path / "blocker" / "p.yaml")])
    assert result.exit_code == 1
    assert "is not a folder" in result.output and "missing" not in result.output.split("is not a folder")[1]


def test_the_docs_show_what_calibrate_prints_today() -> None:
    script = Path(__file__).parents[2] / "benchmarks" / "calibration_sweep_doc.py"
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_tree_mixing_the_two_protocols_is_refused(tmp_path: Path) -> None:
    write_sweep_tree(tmp_path / "sweep", ks=KS, global_k=GLOBAL_K, concurrencies=CONCURRENCIES, conditional_rates=RATES)
    plain = json.loads((tmp_path / "sweep" / "SERVE--k0-BENCH--c1" / "summary.json").read_text())[0]
    plain.pop("speculative_config")
    plain |= {"spectune_forced_k": "0", "spectune_drafter": "none", "spectune_protocol": "plain-k0"}
    (tmp_path / "sweep" / "plain").mkdir()
    (tmp_path / "sweep" / "plain" / "run=1.json").write_text(json.dumps(plain))
    result = runner.invoke(app, ["calibrate", str(tmp_path / "sweep"), "--out", str(tmp_path / "p.yaml")])
    assert result.exit_code == 1
    assert "plain/run=1.json: measured by the plain-k0 protocol" in result.output
    assert "calibrate one protocol at a time" in result.output


def test_max_spread_outside_0_1_is_a_usage_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["calibrate", str(tmp_path), "--out", str(tmp_path / "p.yaml"), "--max-spread", "0"])
    assert result.exit_code == 1
    assert result.output.strip() == "error: --max-spread: must be a fraction in (0, 1], got 0.0"


def test_a_looser_max_spread_accepts_the_noisy_cell(tmp_path: Path) -> None:
    def spoil(k: int, c: int, run: int, record: dict) -> None:
        if (k, c) == (2, 8) and run != 1:
            record["mean_tpot_ms"] *= 0.88 if run == 0 else 1.15

    write_sweep_tree(
        tmp_path / "sweep", ks=KS, global_k=GLOBAL_K, concurrencies=CONCURRENCIES, conditional_rates=RATES, spoil=spoil
    )
    out = tmp_path / "p.yaml"
    result = runner.invoke(app, ["calibrate", str(tmp_path / "sweep"), "--out", str(out), "--max-spread", "0.2"])
    assert result.exit_code == 0, result.output
    row = next(
        r for r in _rows(tmp_path / "step-times.csv") if (r["concurrency"], r["num_speculative_tokens"]) == ("8", "2")
    )
    assert float(row["step_time_mad_ms"]) / float(row["step_time_ms"]) > 0.1


def test_a_negative_mad_in_a_table_is_refused_naming_the_cell(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("batch_size,num_speculative_tokens,step_time_ms,step_time_mad_ms\n1,0,6.0,0.1\n8,0,6.5,-0.2\n")
    with pytest.raises(DocumentError) as caught:
        read_step_time_table(path)
    assert [str(p) for p in caught.value.problems] == [
        f"{path}:3: column 4 (step_time_mad_ms): must be a number of milliseconds in [0, 1e+06], got '-0.2'"
    ]


def test_summary_files_given_one_by_one_are_read_as_records(tmp_path: Path) -> None:
    summaries = write_sweep_tree(
        tmp_path / "sweep", ks=KS, global_k=GLOBAL_K, concurrencies=CONCURRENCIES, conditional_rates=RATES
    )
    result = runner.invoke(app, ["calibrate", *map(str, summaries), "--out", str(tmp_path / "p.yaml")])
    assert result.exit_code == 0, result.output
    assert len(_rows(tmp_path / "step-times.csv")) == len(KS) * len(CONCURRENCIES)

"""``spectune study run/show`` and ``spectune export`` as a user runs them, on real (tiny) simulations."""

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from spectune.cli import app
from spectune.errors import SpectuneError
from spectune.study import load_outcome

runner = CliRunner()


@pytest.fixture(scope="module")
def ran(tmp_path_factory, tiny_study):
    folder = tmp_path_factory.mktemp("cli")
    document = folder / "tiny.yaml"
    document.write_text(tiny_study(max_k=2))
    out = folder / "out"
    result = runner.invoke(app, ["study", "run", str(document), "--out", str(out)])
    return document, out, result


def test_run_prints_the_recommendation_and_writes_artefacts_that_validate(ran):
    document, out, result = ran
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert (
        lines[0]
        == f"study tiny: 2 batch sizes x 1 combos x K 1-2 (+ K=0) = 6 points; sampler exhaustive; storage {out}/study.journal"
    )
    assert lines[1].startswith("6 complete trials (6 simulations), 6 new in this run")
    assert lines[2].startswith("Recommendation: eagle3/standard/greedy")
    assert any(line.startswith('vllm serve TARGET --speculative-config \'{"method": "eagle3"') for line in lines)
    assert (
        lines[-1]
        == f"wrote {out}/: recommended.yaml, vllm.json, vllm-synthetic.json, sglang.txt, trtllm.yaml, measure.sh, trials.csv, "
        "report.html"
    )
    check = runner.invoke(app, ["validate", "--strict", str(out / "recommended.yaml"), str(out / "vllm.json")])
    assert check.exit_code == 0, check.output


def test_a_rerun_resumes_and_simulates_nothing_again(ran):
    document, out, _ = ran
    result = runner.invoke(app, ["study", "run", str(document), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1].startswith("6 complete trials (6 simulations), 0 new in this run")


def test_show_reads_the_study_by_name_or_by_document(ran):
    document, out, _ = ran
    by_name = runner.invoke(app, ["study", "show", "tiny", "--storage", str(out / "study.journal")])
    by_document = runner.invoke(app, ["study", "show", str(document), "--out", str(out)])
    assert by_name.exit_code == by_document.exit_code == 0, by_name.output + by_document.output
    assert by_name.output.splitlines()[0] == f"study tiny in {out}/study.journal: 6 complete; 6 simulations of 6 points"
    assert by_name.output == by_document.output


def test_export_rewrites_the_artefacts_from_storage_with_the_legacy_synthetic_form(ran, tmp_path):
    _, out, _ = ran
    result = runner.invoke(
        app,
        [
            "export",
            "tiny",
            "--storage",
            str(out / "study.journal"),
            "--out",
            str(tmp_path),
            "--vllm-synthetic-form",
            "legacy",
            "--vllm-version",
            "0.32",
        ],
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "vllm.json").read_text() == (out / "vllm.json").read_text()
    legacy = json.loads((tmp_path / "vllm-synthetic.json").read_text())
    assert "synthetic_acceptance_rate" in legacy and "synthetic_acceptance_rates" not in legacy


def test_a_changed_document_is_refused_with_a_clear_message(ran, tmp_path):
    document, out, _ = ran
    changed = tmp_path / "tiny.yaml"
    changed.write_text(document.read_text().replace("output_tokens: 64", "output_tokens: 65"))
    result = runner.invoke(app, ["study", "run", str(changed), "--out", str(out)])
    assert result.exit_code == 1
    assert (
        "error: study 'tiny' in" in result.output and "made from a different version of this document" in result.output
    )
    assert "Traceback" not in result.output


def test_two_workers_run_the_study_to_the_recommendation_of_one_and_leave_no_process(tmp_path, tiny_study):
    # The study starts its workers once its storage is ready: the same recommendation as one worker's.
    document = tmp_path / "tiny.yaml"
    document.write_text(tiny_study(max_k=2))
    before = set(multiprocessing.active_children())  # another test's may still be ending
    one = runner.invoke(app, ["study", "run", str(document), "--out", str(tmp_path / "one")])
    two = runner.invoke(app, ["study", "run", str(document), "--out", str(tmp_path / "two"), "--workers", "2"])
    assert one.exit_code == 0 and two.exit_code == 0, two.output
    # (on a one-GPU machine without MPS a note about the shared GPU comes first)
    assert any(
        line.startswith("6 complete trials (6 simulations), 6 new in this run") for line in two.output.splitlines()
    )
    assert (tmp_path / "two" / "vllm.json").read_text() == (tmp_path / "one" / "vllm.json").read_text()
    assert not set(multiprocessing.active_children()) - before


def test_bad_input_gets_one_located_line_and_exit_1(tmp_path, tiny_study):
    bad = tmp_path / "bad.yaml"
    bad.write_text(tiny_study(max_k=2).replace("batch_sizes: [1, 4]", "batch_sizes: [1, 32]"))
    result = runner.invoke(app, ["study", "run", str(bad), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert result.output.strip() == f"{bad}:19: schedule.batch_sizes[1]: must be <= workload.max_num_seqs (16), got 32"
    missing = runner.invoke(app, ["study", "show", "nosuch", "--storage", str(tmp_path / "none.journal")])
    assert missing.exit_code == 1 and "no journal file at" in missing.output
    workers = runner.invoke(app, ["study", "run", str(bad.with_name("x.yaml")), "--workers", "0"])
    assert workers.exit_code == 1 and "x.yaml" in workers.output


@pytest.mark.slow
def test_sigkill_during_a_real_study_then_rerun_keeps_every_completed_trial(tmp_path, tiny_study):
    document = tmp_path / "tiny.yaml"
    # Simulations long enough (100 requests per unit of batch size) that the kill lands between the
    # study's batches: with 8 requests each, all 8 trials sometimes completed before the first poll.
    document.write_text(
        tiny_study(max_k=3)
        .replace("num_requests: 8", "num_requests: 400")
        .replace("requests_per_batch_size: 3", "requests_per_batch_size: 100")
    )
    out = tmp_path / "out"
    command = [sys.executable, "-m", "spectune", "study", "run", str(document), "--out", str(out)]
    log = tmp_path / "first-run.log"
    with open(log, "w") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    storage = str(out / "study.journal")
    before = None
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and process.poll() is None:
            try:
                outcome = load_outcome(storage, "tiny")
            except SpectuneError:
                outcome = None
            if outcome is not None and sum(t.state == "COMPLETE" for t in outcome.trials) >= 3:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                before = load_outcome(storage, "tiny")
                break
            time.sleep(0.1)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert before is not None, log.read_text()
    kept = {t.number: (t.point, t.metrics) for t in before.trials if t.state == "COMPLETE"}
    assert 3 <= len(kept) < 8
    result = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr
    after = load_outcome(storage, "tiny")
    assert all((after.trials[n].point, after.trials[n].metrics) == value for n, value in kept.items())
    points = [t.point for t in after.trials if t.state == "COMPLETE"]
    assert len(points) == len(set(points)) == 8
    assert f"8 complete trials (8 simulations), {8 - len(kept)} new in this run" in result.stdout


def test_workers_sharing_a_gpu_without_mps_get_a_notice(tmp_path, monkeypatch):
    from spectune.cli._study import shared_gpu_notice

    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.cuda.device_count", lambda: 1)
    assert shared_gpu_notice("cuda", 1, tmp_path) is None  # one worker: nothing to share
    assert shared_gpu_notice("cpu", 8, tmp_path) is None
    notice = shared_gpu_notice("auto", 8, tmp_path)
    assert notice is not None and "--workers 8" in notice and "MPS" in notice and str(tmp_path) in notice
    (tmp_path / "control").touch()  # the MPS control daemon's pipe
    assert shared_gpu_notice("cuda:0", 8, tmp_path) is None


def test_workers_spread_over_the_gpus_share_none_and_get_no_notice(tmp_path, monkeypatch):
    from spectune.cli._study import shared_gpu_notice

    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.cuda.device_count", lambda: 2)
    assert shared_gpu_notice("cuda", 2, tmp_path) is None  # one worker a GPU
    notice = shared_gpu_notice("cuda", 4, tmp_path)
    assert notice is not None and "--workers 4 share 2 GPUs" in notice
    assert "share one GPU" in (shared_gpu_notice("cuda:1", 2, tmp_path) or "")  # pinned: both on cuda:1

"""What a hostile or unlucky user finds, as they run it: each case loses no data, writes nothing where
it should not, and answers with one located line (never a traceback, never a silent wrong answer).

Cases of many workers (TPE's repeated points, one Ctrl-C with ``--workers 2``) are in
``tests/study/test_study_runs.py``; the bounded reader and the atomic writer have focused tests in
``tests/test_files.py``, the journal's repair in ``tests/study/test_study_journal.py``.
"""

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spectune.cli import app
from spectune.errors import SpectuneError
from spectune.study import load_outcome

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _cli(*args: str):
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    return result


@pytest.fixture(scope="module")
def study(tmp_path_factory, tiny_study):
    """A finished 4-point study: (document, out folder, journal bytes)."""
    folder = tmp_path_factory.mktemp("hostile")
    document = folder / "tiny.yaml"
    document.write_text(tiny_study())
    out = folder / "out"
    result = _cli("study", "run", str(document), "--out", str(out))
    assert result.exit_code == 0, result.output
    return document, out, (out / "study.journal").read_bytes()


# 1. A corrupt journal ---------------------------------------------------------------------------


def _records(journal: bytes) -> list[bytes]:
    return journal.splitlines(keepends=True)


@pytest.mark.parametrize(
    ("case", "line"),
    [("garbage last line", None), ("garbage mid-file", 5), ("random bytes", 9), ("JSON without op_code", 12)],
)
def test_a_corrupt_journal_is_named_with_its_line_and_run_writes_nothing_after_it(study, tmp_path, case, line):
    document, _, good = study
    records = _records(good)
    bad = {
        "garbage last line": b"garbage{\n",
        "garbage mid-file": b"garbage{\n",
        "random bytes": bytes(range(128, 256)) + b"\n",
        "JSON without op_code": b'{"worker_id": "w", "study_id": 0}\n',
    }[case]
    number = len(records) + 1 if line is None else line
    records.insert(number - 1, bad)
    journal = tmp_path / "study.journal"
    journal.write_bytes(b"".join(records))
    shown = _cli("study", "show", "tiny", "--storage", str(journal))
    assert shown.exit_code == 1
    assert shown.output.startswith(f"error: {journal}:{number}: unreadable journal record")
    assert f"spectune study repair {journal}" in shown.output
    ran = _cli("study", "run", str(document), "--storage", str(journal), "--out", str(tmp_path / "out"))
    assert ran.exit_code == 1 and f"{journal}:{number}:" in ran.output
    assert journal.read_bytes() == b"".join(records)  # nothing appended after the bad line


def test_study_repair_keeps_every_readable_record_and_backs_the_file_up(study, tmp_path):
    document, _, good = study
    records = _records(good)
    damaged = b"".join([*records[:7], b"\x00\xff garbage\n", *records[7:], b'{"op_code": 6}\n'])
    journal = tmp_path / "study.journal"
    journal.write_bytes(damaged)
    repaired = _cli("study", "repair", str(journal))
    assert repaired.exit_code == 0, repaired.output
    assert repaired.output.splitlines()[:2] == [
        f"{journal}:8: dropped (not UTF-8 text)",
        f"{journal}:{len(records) + 2}: dropped (a record Optuna cannot apply: KeyError: 'trial_id')",
    ]
    assert (tmp_path / "study.journal.bak").read_bytes() == damaged
    assert journal.read_bytes() == good
    shown = _cli("study", "show", str(document), "--storage", str(journal))
    assert shown.exit_code == 0 and "4 complete" in shown.output


# 2. Reads are bounded whatever the file is --------------------------------------------------------


def test_validate_dev_zero_is_refused_at_the_size_limit():
    result = _cli("validate", "/dev/zero")
    assert result.exit_code == 1
    assert (
        result.output.splitlines()[0] == f"/dev/zero: holds more than {4 * 1024 * 1024} bytes (the limit); refusing it"
    )


def test_an_endless_pipe_on_stdin_is_refused_not_read_forever():
    yes = subprocess.Popen(["yes", "x: 1"], stdout=subprocess.PIPE)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "spectune", "simulate", "/dev/stdin"],
            stdin=yes.stdout,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        yes.kill()
        yes.wait()
        yes.stdout.close()
    assert result.returncode == 1
    assert result.stderr.strip() == f"/dev/stdin: holds more than {4 * 1024 * 1024} bytes (the limit); refusing it"


def test_a_fifo_holding_too_much_is_refused(tmp_path):
    fifo = tmp_path / "doc.yaml"
    os.mkfifo(fifo)

    def feed() -> None:
        try:
            with open(fifo, "wb") as sink:
                for _ in range(6):
                    sink.write(b"# " + b"x" * (1024 * 1024 - 3) + b"\n")
        except BrokenPipeError:
            pass  # the reader stopped at its limit

    writer = threading.Thread(target=feed)
    writer.start()
    result = _cli("validate", str(fifo))
    writer.join(timeout=30)
    assert result.exit_code == 1 and "holds more than" in result.output


def test_calibrate_from_dev_zero_is_refused_at_its_first_line(tmp_path):
    # One path: the same path given twice is read once (a second /dev/zero would be skipped, and said).
    result = _cli("calibrate", "/dev/zero", "--format", "vllm-log", "--out", str(tmp_path / "p.yaml"))
    assert result.exit_code == 1
    assert result.output.strip() == "/dev/zero:1: line longer than 1048576 bytes; refusing it"


# 3. calibrate refuses impossible counters, at their line --------------------------------------------


def _scrape(drafts: str, draft_tokens: str, accepted: int, per_position: tuple[int, ...]) -> str:
    labels = 'engine="0",model_name="m"'
    lines = [
        f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafts}",
        f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {draft_tokens}",
        f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {accepted}",
        *(
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{i}"}} {n}'
            for i, n in enumerate(per_position)
        ),
    ]
    return "\n".join(lines) + "\n"


def _calibrate_scrapes(tmp_path: Path, after: str):
    before, later = tmp_path / "before.prom", tmp_path / "after.prom"
    before.write_text(_scrape("0", "0", 0, (0, 0, 0)))
    later.write_text(after)
    return later, _cli("calibrate", str(before), str(later), "--out", str(tmp_path / "profile.yaml"))


def test_calibrate_refuses_more_drafts_than_draft_tokens(tmp_path):
    later, result = _calibrate_scrapes(tmp_path, _scrape("1000", "300", 100, (61, 30, 9)))
    assert result.exit_code == 1
    assert result.output.startswith(f"{later}:2: vllm:spec_decode_num_draft_tokens: went up by 300 between")
    assert "fewer than the drafts (1000)" in result.output
    assert not (tmp_path / "profile.yaml").exists()


def test_calibrate_refuses_a_counter_of_1e300_at_its_line(tmp_path):
    later, result = _calibrate_scrapes(tmp_path, _scrape("1e300", "3e300", 100, (61, 30, 9)))
    assert result.exit_code == 1
    assert result.output.startswith(
        f"{later}:1: vllm:spec_decode_num_drafts_total: a counter must be a whole number in [0, 2^53], got 1e300"
    )


def test_calibrate_refuses_a_histogram_entry_of_1e30_at_its_line(tmp_path):
    log = tmp_path / "requests.jsonl"
    good = {"speculative_decoding": {"acceptance_histogram": [3, 2, 1, 4], "num_spec_tokens": 3}}
    huge = {"speculative_decoding": {"acceptance_histogram": [10**30, 2, 1, 4], "num_spec_tokens": 3}}
    log.write_text(json.dumps(good) + "\n" + json.dumps(huge) + "\n")
    result = _cli("calibrate", str(log), "--out", str(tmp_path / "profile.yaml"))
    assert result.exit_code == 1
    assert result.output.startswith(
        f"{log}:2: speculative_decoding.acceptance_histogram: must be a list of K+1 >= 2 whole numbers in [0, 2^53]"
    )


def test_calibrate_refuses_a_nan_mean_acceptance_length(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text(
        "INFO SpecDecoding metrics: Mean acceptance length: nan, Accepted: 1235 tokens, Drafted: 2352 tokens, "
        "Per-position acceptance rate: 0.726, 0.505, 0.344, Avg Draft acceptance rate: 52.5%\n"
    )
    result = _cli("calibrate", str(log), "--out", str(tmp_path / "profile.yaml"))
    assert result.exit_code == 1
    assert (
        result.output.strip()
        == f"{log}:1: Mean acceptance length: must be a finite number in a window with drafts, got 'nan'"
    )


@pytest.mark.parametrize("value", ["-3", "nan"])
def test_calibrate_temperature_is_checked_as_an_option(tmp_path, value):
    result = _cli(
        "calibrate",
        str(REPO / "examples/logs/vllm-eagle3.log"),
        "--out",
        str(tmp_path / "p.yaml"),
        f"--temperature={value}",
    )
    assert result.exit_code == 1
    assert result.output.strip() == f"error: --temperature: must be a number in [0, 10], got {float(value)}"


# 4. Output paths ------------------------------------------------------------------------------------


def test_export_never_writes_through_a_symlink_in_the_output_folder(study, tmp_path):
    _, out, _ = study
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "vllm.json").symlink_to("../victim.txt")
    result = _cli("export", "tiny", "--storage", str(out / "study.journal"), "--out", str(folder))
    assert result.exit_code == 1  # a link spectune did not put there is the user's, like any file
    assert result.output.startswith(f"error: --out {folder}: vllm.json: not written by spectune")
    assert victim.read_text() == "precious\n"
    assert (folder / "vllm.json").readlink() == Path("../victim.txt")
    assert sorted(p.name for p in folder.iterdir()) == ["vllm.json"]


def test_a_write_that_fails_midway_leaves_the_previous_artefacts_whole(study, tmp_path):
    _, out, _ = study
    folder = tmp_path / "export"
    command = [
        sys.executable,
        "-m",
        "spectune",
        "export",
        "tiny",
        "--storage",
        str(out / "study.journal"),
        "--out",
        str(folder),
    ]
    subprocess.run(command, check=True, capture_output=True)
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    limit = len(before["report.html"]) // 2

    def small_files() -> None:  # a full disk, in effect: any file past `limit` bytes fails to grow
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    failed = subprocess.run(
        [*command, "--vllm-synthetic-form", "legacy", "--vllm-version", "0.32"],
        capture_output=True,
        text=True,
        preexec_fn=small_files,
    )
    assert failed.returncode == 1 and "internal error" not in failed.stderr, failed.stderr
    assert f"cannot write {folder}/" in failed.stderr
    assert (folder / "report.html").read_bytes() == before["report.html"]
    assert sorted(p.name for p in folder.iterdir()) == sorted(before)  # no temporary file left behind


def test_study_run_checks_out_before_it_runs_anything(tmp_path, tiny_study):
    document = tmp_path / "tiny.yaml"
    document.write_text(tiny_study())
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    journal = tmp_path / "s.journal"
    result = _cli("study", "run", str(document), "--storage", str(journal), "--out", str(not_a_folder))
    assert result.exit_code == 1
    assert result.output.strip() == f"error: --out {not_a_folder}: exists and is not a folder"
    assert not journal.exists()


def test_export_into_a_path_under_a_file_is_refused(study, tmp_path):
    _, out, _ = study
    (tmp_path / "file").write_text("x")
    result = _cli("export", "tiny", "--storage", str(out / "study.journal"), "--out", str(tmp_path / "file" / "x"))
    assert result.exit_code == 1
    assert (
        result.output.strip()
        == f"error: --out {tmp_path / 'file' / 'x'}: cannot write {tmp_path / 'file' / 'x' / 'recommended.yaml'}: {tmp_path / 'file'} is not a folder"
    )


def test_exporting_a_study_without_trials_removes_another_studys_recommendation(study, tmp_path):
    _, out, good = study
    folder = tmp_path / "export"
    assert _cli("export", "tiny", "--storage", str(out / "study.journal"), "--out", str(folder)).exit_code == 0
    empty = tmp_path / "empty.journal"  # the same study before its first trial: the study records only
    empty.write_bytes(b"".join(line for line in _records(good) if json.loads(line)["op_code"] < 4))
    result = _cli("export", "tiny", "--storage", str(empty), "--out", str(folder))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == (
        f"removed {folder}/: recommended.yaml, vllm.json, vllm-synthetic.json, sglang.txt, trtllm.yaml, measure.sh "
        "(an earlier export's)"
    )
    assert sorted(p.name for p in folder.iterdir()) == [".spectune-manifest.json", "report.html", "trials.csv"]


# 5. --n-trials 0 -------------------------------------------------------------------------------------


def test_n_trials_0_is_refused_before_anything_runs(tmp_path, tiny_study):
    document = tmp_path / "tiny.yaml"
    document.write_text(tiny_study())
    result = _cli("study", "run", str(document), "--out", str(tmp_path / "out"), "--n-trials", "0")
    assert result.exit_code == 1
    assert result.output.startswith("error: --n-trials: must be >= 1, got 0")
    assert not (tmp_path / "out" / "study.journal").exists()


# 6. Smaller ones -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once_without_a_traceback(tmp_path, tiny_study):
    document = tmp_path / "tiny.yaml"
    document.write_text(tiny_study(max_k=3))
    out = tmp_path / "out"
    command = [sys.executable, "-m", "spectune", "study", "run", str(document), "--out", str(out), "--no-progress"]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            try:
                if sum(t.state == "COMPLETE" for t in load_outcome(str(out / "study.journal"), "tiny").trials) >= 1:
                    break
            except SpectuneError:
                pass
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)  # the next trial has just started
        seen = []
        for line in iter(process.stderr.readline, ""):  # up to the first Ctrl-C's notice
            seen.append(line)
            if line.startswith("stopping after"):
                break
        process.send_signal(signal.SIGINT)  # mid-trial, most likely
        stdout, rest = process.communicate(timeout=120)
        stderr = "".join(seen) + rest
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert seen[-1] == "stopping after the running trials (Ctrl-C again to stop now)\n"
    # Mid-trial, the second Ctrl-C stops at once; if the trial had just ended, the run ends as after one.
    assert stderr.splitlines()[-1].startswith("interrupted: ") or "stopped early (Ctrl-C)" in stdout


def test_a_simulation_that_refuses_its_input_mid_study_is_one_error_line_without_tracebacks(tmp_path, tiny_study):
    """A prompt longer than one replica's KV cache is found by the simulation itself: the batch's trials
    fail (Optuna's one-line notices), the run ends with the located error, and no traceback is logged."""
    document = tmp_path / "tiny.yaml"
    # A context limit past the prompt: the preset's 131072 would refuse it at validation.
    text = tiny_study().replace("prompt_tokens: 64", "prompt_tokens: 900000")
    text = text.replace(
        "target_model: llama-3.1-8b", "target_model: {preset: llama-3.1-8b, max_model_len_tokens: 1048576}"
    )
    document.write_text(text)
    command = [sys.executable, "-m", "spectune", "study", "run", str(document), "--out", str(tmp_path / "out")]
    result = subprocess.run([*command, "--no-progress"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines()[-1].startswith("error: request 0 needs 900000 tokens of KV cache"), result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def test_validate_refuses_a_step_time_table_that_does_not_cover_k(tmp_path):
    table = tmp_path / "steps.csv"
    table.write_text("batch_size,num_speculative_tokens,step_time_ms\n1,0,7\n64,0,9\n1,1,8\n64,1,10\n1,2,9\n64,2,12\n")
    source = (REPO / "configs/simulations/llama-3.1-8b-eagle3-h100.yaml").read_text()
    document = tmp_path / "sim.yaml"
    document.write_text(
        source.replace("../profiles/", f"{REPO}/configs/profiles/")
        + "cost_model:\n  method: measured\n  step_times: steps.csv\n"
    )
    result = _cli("validate", str(document))
    assert result.exit_code == 1
    assert result.output.splitlines()[0] == (
        f"{document}:{len(source.splitlines()) + 3}: cost_model.step_times: {table} measures K 0..2, but this document needs "
        "K 3; K is interpolated between measured values, never extrapolated: measure it"
    )


def test_set_of_an_unknown_field_is_blamed_on_the_option():
    document = REPO / "configs/simulations/llama-3.1-8b-eagle3-h100.yaml"
    result = _cli("simulate", str(document), "--set", "nonexistent.field=1")
    assert result.exit_code == 1
    assert result.output.strip() == "--set nonexistent.field=1: nonexistent: unknown field (got 'nonexistent')"


def test_a_document_without_kind_gets_one_line_naming_the_missing_kind(tmp_path):
    source = (REPO / "configs/simulations/llama-3.1-8b-eagle3-h100.yaml").read_text()
    document = tmp_path / "sim.yaml"
    document.write_text(source.replace("kind: simulation\n", ""))
    result = _cli("validate", str(document))
    assert result.exit_code == 1
    assert result.output.splitlines()[0] == (
        f"{document}:1: kind: required: without it a file is a bare speculative config, but name, seed, speculative, "
        "acceptance are fields of spectune documents; add 'kind: simulation' (kinds: acceptance_profile, simulation, study)"
    )
    assert "did you mean" not in result.output


def test_a_symlink_loop_is_reported_as_one(tmp_path):
    (tmp_path / "a.yaml").symlink_to("b.yaml")
    (tmp_path / "b.yaml").symlink_to("a.yaml")
    result = _cli("validate", str(tmp_path / "a.yaml"))
    assert result.exit_code == 1
    assert (
        result.output.splitlines()[0] == f"{tmp_path / 'a.yaml'}: symbolic link loop (the link points back to itself)"
    )

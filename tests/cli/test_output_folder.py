"""``--out`` as a user meets it: spectune overwrites or removes only files it wrote there, says what it
removed, and a folder it cannot write into is refused before any simulation, naming only ``--out``."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spectune.cli import app

runner = CliRunner()


def _cli(*args: str):
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    return result


@pytest.fixture(scope="module")
def journal(tmp_path_factory, tiny_study):
    """A finished 4-point study's journal, kept outside any --out folder."""
    folder = tmp_path_factory.mktemp("outfolder")
    document = folder / "tiny.yaml"
    document.write_text(tiny_study())
    result = _cli("study", "run", str(document), "--out", str(folder / "first"), "--storage", str(folder / "s.journal"))
    assert result.exit_code == 0, result.output
    return folder / "s.journal"


def _refusal(folder: Path, name: str) -> str:
    return (
        f"error: --out {folder}: {name}: not written by spectune (or changed since; .spectune-manifest.json there "
        "lists what spectune wrote), and an artefact of that name would replace it: move or delete it, or choose "
        "another --out"
    )


# Files spectune did not write --------------------------------------------------------------------


def test_study_run_into_a_folder_holding_the_users_vllm_file_refuses_before_the_study(tmp_path, tiny_study):
    # The reported case: a study with no completed trial deleted deploy/vllm-synthetic.json, exit 0.
    document = tmp_path / "tiny.yaml"
    document.write_text(tiny_study())
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    (deploy / "vllm-synthetic.json").write_text('{"mine": 1}\n')
    storage = tmp_path / "j.journal"
    result = _cli("study", "run", str(document), "--out", str(deploy), "--storage", str(storage))
    assert result.exit_code == 1
    assert result.output.strip() == _refusal(deploy, "vllm-synthetic.json")
    assert (deploy / "vllm-synthetic.json").read_text() == '{"mine": 1}\n'
    assert sorted(p.name for p in deploy.iterdir()) == ["vllm-synthetic.json"]
    assert not storage.exists()  # refused before the study, not after it


def test_export_of_a_study_without_trials_keeps_the_users_vllm_json(journal, tmp_path):
    good = journal.read_bytes()
    empty = tmp_path / "empty.journal"  # the study before its first trial: its study records only
    empty.write_bytes(b"".join(line for line in good.splitlines(keepends=True) if json.loads(line)["op_code"] < 4))
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    (deploy / "vllm.json").write_text('{"mine": 1}\n')
    result = _cli("export", "tiny", "--storage", str(empty), "--out", str(deploy))
    assert result.exit_code == 1
    assert result.output.strip() == _refusal(deploy, "vllm.json")
    assert (deploy / "vllm.json").read_text() == '{"mine": 1}\n'


def test_an_artefact_the_user_edited_is_refused_and_kept(journal, tmp_path):
    folder = tmp_path / "out"
    assert _cli("export", "tiny", "--storage", str(journal), "--out", str(folder)).exit_code == 0
    edited = (folder / "vllm.json").read_text().replace('"method"', '"method" ', 1)
    (folder / "vllm.json").write_text(edited)
    result = _cli("export", "tiny", "--storage", str(journal), "--out", str(folder))
    assert result.exit_code == 1
    assert result.output.strip() == _refusal(folder, "vllm.json")
    assert (folder / "vllm.json").read_text() == edited


def test_export_again_replaces_its_own_files_and_leaves_the_users_others_alone(journal, tmp_path):
    folder = tmp_path / "out"
    assert _cli("export", "tiny", "--storage", str(journal), "--out", str(folder)).exit_code == 0
    (folder / "notes.txt").write_text("mine\n")
    manifest = json.loads((folder / ".spectune-manifest.json").read_text())
    assert sorted(manifest["files"]) == sorted(
        p.name for p in folder.iterdir() if p.name not in ("notes.txt", ".spectune-manifest.json")
    )
    legacy = ("--vllm-synthetic-form", "legacy")
    refused = _cli("export", "tiny", "--storage", str(journal), "--out", str(folder), *legacy)
    assert refused.exit_code == 1  # vLLM 0.33.0, the default release, refuses the scalar form
    assert "--vllm-synthetic-form legacy: vLLM 0.33.0 refuses the scalar synthetic_acceptance_rate" in refused.output
    again = _cli("export", "tiny", "--storage", str(journal), "--out", str(folder), *legacy, "--vllm-version", "0.32")
    assert again.exit_code == 0, again.output
    assert "synthetic_acceptance_rate" in json.loads((folder / "vllm-synthetic.json").read_text())
    assert (folder / "notes.txt").read_text() == "mine\n"


# --out checked before any simulation ---------------------------------------------------------------


def test_a_non_utf8_out_is_refused_before_the_study(tmp_path, tiny_study):
    document = tmp_path / "tiny.yaml"
    document.write_text(tiny_study())
    out = os.fsdecode(os.fsencode(tmp_path) + b"/bad\xff")  # as Python hands such a byte on argv
    storage = tmp_path / "s.journal"
    result = _cli("study", "run", str(document), "--out", out, "--storage", str(storage))
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"error: --out {tmp_path}/bad\\xff: the folder name is not UTF-8 text; spectune writes it into its "
        "messages and report.html: give a UTF-8 name"
    )
    assert not storage.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]


def _read_only_mount_command(folder: Path, command: list[str]) -> list[str]:
    """``command`` in a private mount namespace where ``folder`` is bind-mounted read-only (it fails for
    root too, unlike mode 555; the mount vanishes with the namespace)."""
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(folder), *command]


def _read_only_mounts_work(tmp_path: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = tmp_path / "probe"
    probe.mkdir()
    done = subprocess.run(_read_only_mount_command(probe, ["touch", str(probe / "x")]), capture_output=True, text=True)
    probe.rmdir()
    return "Read-only file system" in done.stderr


def test_a_read_only_out_is_refused_before_the_study_naming_only_out(tmp_path, tiny_study):
    if not _read_only_mounts_work(tmp_path):
        pytest.skip("needs unshare and mount (a private mount namespace) to make a folder read-only for root")
    document = tmp_path / "tiny.yaml"
    document.write_text(tiny_study())
    out = tmp_path / "ro"
    out.mkdir()
    for storage in ([], ["--storage", str(tmp_path / "s.journal")]):  # the default journal is OUT/study.journal
        command = [sys.executable, "-m", "spectune", "study", "run", str(document), "--out", str(out), *storage]
        done = subprocess.run(_read_only_mount_command(out, command), capture_output=True, text=True)
        assert done.returncode == 1, done.stdout + done.stderr
        assert done.stdout == ""  # nothing ran: no study line, no trial
        assert done.stderr.strip() == f"error: --out {out}: cannot write there: Read-only file system"
    assert not (tmp_path / "s.journal").exists()
    assert list(out.iterdir()) == []


# A full disk ---------------------------------------------------------------------------------------

_FULL_DISK_SCRIPT = r"""
import json, os, subprocess, sys
folder, first, second = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
def snapshot():
    return {name: open(os.path.join(folder, name), "rb").read().hex() for name in sorted(os.listdir(folder))}
assert subprocess.run(first, capture_output=True).returncode == 0
before = snapshot()
filler = os.path.join(os.path.dirname(folder), "filler")
with open(filler, "wb", buffering=0) as handle:  # the tmpfs holds the folder and the filler: fill it to the last page
    try:
        while True:
            handle.write(b"\0" * 4096)
    except OSError:
        pass
# Room for each small file in turn, not for report.html (the largest) nor for the whole set.
report_pages = -(-len(bytes.fromhex(before["report.html"])) // 4096)
assert report_pages >= 2, report_pages
os.truncate(filler, (-(-os.path.getsize(filler) // 4096) - (report_pages - 1)) * 4096)
failed = subprocess.run(second, capture_output=True, text=True)
after = snapshot()
os.unlink(filler)
print(json.dumps({"rc": failed.returncode, "stderr": failed.stderr, "same": before == after,
                  "before": sorted(before), "after": sorted(after)}))
"""


def test_a_full_disk_mid_export_leaves_the_other_studys_set_whole(tmp_path, tiny_study):
    # The reported case: after a full disk the folder held one study's recommended.yaml and another's
    # report.html. Here a real (small) tmpfs fills up while the second study's set is written.
    if not _read_only_mounts_work(tmp_path):
        pytest.skip("needs unshare and mount (a private mount namespace) for a small tmpfs")
    journals = {}
    for name in ("tiny", "other"):
        document = tmp_path / f"{name}.yaml"
        document.write_text(tiny_study(name=name))
        journals[name] = tmp_path / f"{name}.journal"
        ran = _cli(
            "study", "run", str(document), "--out", str(tmp_path / f"out-{name}"), "--storage", str(journals[name])
        )
        assert ran.exit_code == 0, ran.output
    disk = tmp_path / "disk"
    disk.mkdir()
    folder = disk / "deploy"

    def export(name: str) -> str:
        return json.dumps(
            [sys.executable, "-m", "spectune", "export", name, "--storage", str(journals[name]), "--out", str(folder)]
        )

    script = f'mount -t tmpfs -o size=256k tmpfs "{disk}" && exec "$@"'
    command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]
    done = subprocess.run(
        [*command, sys.executable, "-c", _FULL_DISK_SCRIPT, str(folder), export("tiny"), export("other")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["rc"] == 1, result
    assert result["same"], result  # byte for byte the first study's set, no temporary folder left
    assert "No space left on device" in result["stderr"] and "are unchanged" in result["stderr"], result["stderr"]
    assert ".spectune-manifest.json" in result["before"] and "report.html" in result["before"]


def test_export_names_the_releases_it_writes_for(journal, tmp_path):
    result = _cli("export", "tiny", "--storage", str(journal), "--out", str(tmp_path / "o"), "--vllm-version", "0.20")
    assert result.exit_code == 1
    assert result.output.strip() == "error: --vllm-version: must be one of 0.33.0, 0.32, got '0.20'"

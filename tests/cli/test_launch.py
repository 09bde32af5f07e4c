"""The entry point: the app, a plain exit, and one clear line for a Ctrl-C or a refused --workers."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Runs the entry point in a fresh interpreter and reports, after it returns, how it ended and which
# processes it started: an entry point that left by os._exit would report nothing.
_RUN_AND_REPORT = textwrap.dedent(
    """
    import multiprocessing.process, sys

    started = []
    start = multiprocessing.process.BaseProcess.start

    def recorded(self):
        started.append(self.name)
        start(self)

    multiprocessing.process.BaseProcess.start = recorded
    sys.argv = ["spectune", *sys.argv[1:]]
    from spectune._launch import main

    try:
        main()
    except SystemExit as ended:
        print("exit", ended.code, "started", len(started), file=sys.stderr)
    """
)


def _run_and_report(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _RUN_AND_REPORT, *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_a_study_run_that_fails_before_its_study_starts_no_worker_and_leaves_through_system_exit(tmp_path):
    ran = _run_and_report("study", "run", "missing.yaml", "--workers", "2", cwd=tmp_path)
    lines = ran.stderr.strip().splitlines()
    assert ran.returncode == 0 and len(lines) == 2 and "missing.yaml" in lines[0], ran.stderr
    assert lines[1] == "exit 1 started 0"  # no process spawned for a study that never began


def test_every_command_returns_its_status_through_system_exit_with_its_output_written(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: simulation\nworkload: {}\n")
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # stdout into a pipe: block-buffered
    checked = subprocess.run(
        [sys.executable, "-m", "spectune", "validate", str(bad)], capture_output=True, text=True, env=buffered
    )
    assert checked.returncode == 1
    assert "bad.yaml" in checked.stdout + checked.stderr and "1 invalid" in checked.stdout
    usage = subprocess.run([sys.executable, "-m", "spectune", "study", "run"], capture_output=True, text=True)
    assert usage.returncode == 2 and "Missing argument" in usage.stderr
    helped = _run_and_report("--help", cwd=tmp_path)
    assert helped.stderr.strip().splitlines()[-1] == "exit 0 started 0", helped.stderr
    assert "Usage" in helped.stdout


def test_the_entry_point_loads_no_command_line_library_at_import():
    code = (
        "import sys; import spectune._launch as l; "
        "assert not {'typer', 'rich', 'pydantic', 'torch'} & set(sys.modules), sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("given", ["99999999999999999999", "1000", "0"])
def test_a_workers_count_past_the_machines_cap_is_refused_at_once_naming_the_range(given):
    from spectune._spawn import max_workers, usable_cores

    study = Path(__file__).resolve().parents[2] / "studies" / "quickstart.yaml"
    ran = subprocess.run(
        [sys.executable, "-m", "spectune", "study", "run", str(study), "--workers", given],
        capture_output=True,
        text=True,
        timeout=120,  # before the cap, the first spawned workers without end and never returned
    )
    assert ran.returncode == 1, ran.stderr
    expected = (
        f"error: --workers: must be 1 to {max_workers()} on this machine (4 a core of its {usable_cores()}, "
        f"at least 8), got {given}"
    )
    assert ran.stderr.strip().splitlines() == [expected]
    assert "Traceback" not in ran.stderr


def test_the_workers_cap_is_four_a_usable_core_and_never_below_eight(monkeypatch):
    from spectune import _spawn

    monkeypatch.setattr(_spawn, "usable_cores", lambda: 1)
    assert _spawn.max_workers() == 8 and _spawn.workers_error(8) is None and _spawn.workers_error(9) is not None
    monkeypatch.setattr(_spawn, "usable_cores", lambda: 16)
    assert _spawn.max_workers() == 64 and _spawn.workers_error(64) is None and _spawn.workers_error(65) is not None


# Runs the entry point with a Ctrl-C delivered while the named module is being imported: the moment is
# an event of the run itself (that import), not a clock. A shell starts spectune with SIGINT at its default
# disposition and unblocked; a child inherits both from the test process, which need not have them (one
# CI run's pytest worker passed SIGINT on ignored, and the study ran to its end), so the child sets them.
_INTERRUPTED_AT_IMPORT = """
import importlib.abc, os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {{signal.SIGINT}})

class InterruptAt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, InterruptAt())
sys.argv = ["spectune", *sys.argv[1:]]
from spectune._launch import main
main()
"""


@pytest.mark.parametrize(
    "module",
    [
        "typer",  # the entry point loading the command line (the first second)
        "optuna",  # inside 'study run', after its document was read, before the study begins
    ],
)
def test_ctrl_c_while_a_study_run_starts_is_one_line_and_exit_130(tmp_path, module):
    study = Path(__file__).resolve().parents[2] / "studies" / "quickstart.yaml"
    code = _INTERRUPTED_AT_IMPORT.format(module=module)
    ran = subprocess.run(
        [sys.executable, "-c", code, "study", "run", str(study), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (ran.returncode, ran.stderr.strip().splitlines()) == (
        130,
        ["interrupted (Ctrl-C): run the same command to resume"],
    ), ran.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())

"""The entry point starts the study's workers, or their fork server, before the command-line libraries load."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from spectune import _launch


@pytest.mark.parametrize(
    ("args", "workers"),
    [
        (["study", "run", "s.yaml", "--workers", "8"], 8),
        (["study", "run", "--workers=3", "s.yaml"], 3),
        (["study", "run", "s.yaml"], 1),
        (["study", "run", "s.yaml", "--workers", "many"], 1),  # the app reports it
        (["study", "export", "s.yaml", "--workers", "8"], 1),
        (["validate", "--workers", "8"], 1),
    ],
)
def test_the_workers_of_a_study_run_are_read_from_the_command_line(args, workers):
    assert _launch._study_run_workers(args) == workers


@pytest.mark.parametrize(
    ("args", "pays", "starts"),
    [
        (["study", "run", "s.yaml", "--workers", "2"], True, ["server"]),
        (["study", "run", "s.yaml", "--workers", "2"], False, ["2 workers"]),  # a core each: spawned now
        (["study", "run", "s.yaml"], False, []),  # the parent is the worker
        (["--help"], True, []),
        (["--help"], False, []),
    ],
)
def test_the_fork_server_or_the_workers_start_before_the_app_for_study_runs(monkeypatch, args, pays, starts):
    events: list[str] = []
    monkeypatch.setattr(sys, "argv", ["spectune", *args])
    monkeypatch.setattr("spectune._spawn.fork_server_pays", lambda workers: pays)
    monkeypatch.setattr("spectune._spawn.start_fork_server", lambda: events.append("server"))
    monkeypatch.setattr("spectune._spawn.start_early_workers", lambda count: events.append(f"{count} workers"))
    monkeypatch.setattr("spectune.cli.main", lambda: events.append("app"))
    monkeypatch.setattr(_launch, "_leave", lambda code: events.append(f"exit {code}"))
    _launch.main()
    assert events == [*starts, "app", "exit 0"]


@pytest.mark.parametrize(("ended", "status"), [(None, 0), (0, 0), (2, 2), ("a message", 1)])
def test_the_entry_point_leaves_with_the_status_the_app_exited_with(monkeypatch, capsys, ended, status):
    def app():
        raise SystemExit(ended)

    left = []
    monkeypatch.setattr(sys, "argv", ["spectune", "validate"])
    monkeypatch.setattr("spectune.cli.main", app)
    monkeypatch.setattr(_launch, "_leave", left.append)
    _launch.main()
    assert left == [status]
    assert capsys.readouterr().err == ("a message\n" if status == 1 else "")


def test_the_command_leaves_without_teardown_but_with_its_output_written(tmp_path):
    # Into a pipe, stdout is block-buffered: leaving by os._exit without a flush would lose it. The study's
    # workers' queues are multiprocessing objects: their semaphores must be freed, not reported as leaked.
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: simulation\nworkload: {}\n")
    checked = subprocess.run([sys.executable, "-m", "spectune", "validate", str(bad)], capture_output=True, text=True)
    assert checked.returncode == 1
    assert "bad.yaml" in checked.stdout + checked.stderr and "1 invalid" in checked.stdout
    usage = subprocess.run([sys.executable, "-m", "spectune", "study", "run"], capture_output=True, text=True)
    assert usage.returncode == 2 and "Missing argument" in usage.stderr
    code = "from spectune import _launch; print('written'); _launch._leave(3)"
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    left = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=buffered)
    assert left.returncode == 3 and left.stdout == "written\n"
    code = "import multiprocessing as mp; from spectune import _launch; mp.get_context('spawn').Queue().put(1); _launch._leave(0)"
    left = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert left.returncode == 0 and "leaked" not in left.stderr, left.stderr


def test_the_fork_server_pays_only_with_fewer_cores_than_importing_processes(monkeypatch):
    from spectune._spawn import fork_server_pays

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert fork_server_pays(2) and fork_server_pays(8) and not fork_server_pays(1)
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert not fork_server_pays(8) and fork_server_pays(16)


def test_the_entry_point_loads_no_command_line_library_before_it_decides():
    code = (
        "import sys; import spectune._launch as l; "
        "assert not {'typer', 'rich', 'pydantic', 'torch'} & set(sys.modules), sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_fork_servers_preload_defines_no_kernel():
    # Triton reads TRITON_INTERPRET when a kernel is defined; the server's children take their
    # starter's environment after the fork, so no kernel may be defined before it.
    repo = Path(__file__).resolve().parents[2]
    defining = [
        f"spectune.kernels.{path.stem}"
        for path in (repo / "kernels").glob("*.py")
        if re.search(r"^@triton\.jit", path.read_text(), re.MULTILINE)
    ] + [
        f"spectune.simulator.{path.stem}"
        for path in (repo / "spectune" / "simulator").glob("*.py")
        if re.search(r"^@triton\.jit", path.read_text(), re.MULTILINE)
    ]
    assert "spectune.kernels._verify_kernel" in defining and "spectune.kernels._step_writer" in defining
    code = f"import sys; import spectune._preload; loaded = set({defining!r}) & set(sys.modules); assert not loaded, loaded"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_worker_computes_tritons_cache_key_on_a_thread_beside_its_imports_where_kernels_run_compiled():
    # In a fresh interpreter: the key is computed once, on the thread, and cached for the first kernel launch.
    code = (
        "import sys; from spectune._spawn import triton_head_start; "
        "assert triton_head_start(False) is None and 'triton' not in sys.modules; "
        "thread = triton_head_start(True); thread.join(); "
        "from triton.runtime.cache import triton_key; "
        "assert triton_key.cache_info().currsize == 1 and 'torch' not in sys.modules, triton_key.cache_info()"
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
    assert _spawn.max_workers() == 64 and _launch._study_run_workers(["study", "run", "s", "--workers", "65"]) == 1


# Runs the entry point with a Ctrl-C delivered while the named module is being imported: the moment is
# an event of the run itself (that import), not a clock.
_INTERRUPTED_AT_IMPORT = """
import importlib.abc, os, signal, sys

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

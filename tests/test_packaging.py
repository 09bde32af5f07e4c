"""Packaging: one import name for the kernels, and every subpackage listed in pyproject."""

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed_in_pyproject():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {"spectune.kernels"}
    for init in (REPO / "spectune").rglob("__init__.py"):
        on_disk.add(".".join(init.parent.relative_to(REPO).parts))
    assert on_disk == listed


def test_kernels_import_as_spectune_kernels_only(tmp_path):
    kernels = importlib.import_module("spectune.kernels")
    assert Path(kernels.__file__).parent == REPO / "kernels"
    # Outside the repo (so the checkout is not on sys.path) no top-level 'kernels' is installed.
    code = "import importlib.util; print(importlib.util.find_spec('kernels') is None)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.strip() == "True"


def test_importing_spectune_pulls_in_nothing_heavy():
    code = "import sys, spectune, spectune.config; print('torch' in sys.modules, 'triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]

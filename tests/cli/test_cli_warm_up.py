"""``spectune warm-up``: it compiles for a CUDA device, and says in one located line where there is none."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from spectune.cli import app

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device to compile for")
@pytest.mark.parametrize(
    ("document", "line"),
    # Neither sets simulation.device (default 'auto'): the line is the document's first key's.
    [("studies/quickstart.yaml", 11), ("configs/simulations/llama-3.1-8b-eagle3-h100.yaml", 2)],
)
def test_without_cuda_the_warm_up_says_so_in_one_located_line_and_exits_1(document, line):
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    ran = subprocess.run(
        [sys.executable, "-m", "spectune", "warm-up", document],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 1 and ran.stdout == "", ran.stdout + ran.stderr
    (message,) = ran.stderr.splitlines()
    assert message.startswith(f"{document}:{line}: simulation.device: "), message
    assert "CUDA device" in message and "this machine has none" in message and "(got 'auto')" in message, message


def test_a_document_of_another_kind_is_refused_naming_its_kind():
    result = runner.invoke(app, ["warm-up", str(REPO / "configs" / "eagle3-llama-3.1-8b.json")])
    assert result.exit_code == 1
    assert result.stderr.strip().endswith(
        "eagle3-llama-3.1-8b.json:1: kind: must be simulation or study, got 'speculative'"
    )


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        ("cpu", "simulation.device: the document simulates on the CPU, where no kernel is compiled"),
        ("cuda:3", "simulation.device: 'cuda:3' was asked for, but this machine has 1 CUDA device (cuda:0)"),
    ],
)
def test_on_a_cuda_machine_a_document_on_no_device_of_it_is_refused_at_its_device_field(
    tmp_path, tiny_study, monkeypatch, device, expected
):
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.cuda.device_count", lambda: 1)
    study = tmp_path / "study.yaml"
    study.write_text(tiny_study() + f"simulation:\n  device: '{device}'\n")
    line = len(tiny_study().splitlines()) + 2
    result = runner.invoke(app, ["warm-up", str(study)])
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.strip().startswith(f"{study}:{line}: {expected}"), result.stderr


def test_under_the_interpreter_the_warm_up_refuses_as_it_would_compile_nothing(tmp_path, tiny_study, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.cuda.device_count", lambda: 1)
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # as the test suite runs the kernels on the CPU
    study = tmp_path / "study.yaml"
    study.write_text(tiny_study() + "simulation:\n  device: cuda\n")
    result = runner.invoke(app, ["warm-up", str(study)])
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.strip() == (
        "error: TRITON_INTERPRET=1 is set: Triton's interpreter compiles nothing; unset it to warm up the "
        "compiled kernels"
    )

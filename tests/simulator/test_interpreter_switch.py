"""Triton's interpreter is the program's choice: the CLI switches it on for `kernel_backend: triton` on the
CPU, the library only checks it (each case in a fresh interpreter, without the test suite's TRITON_INTERPRET)."""

import json
import os
import subprocess
import sys

import pytest

DOC = """kind: simulation
name: interpreter
speculative: {method: eagle3, num_speculative_tokens: 2}
acceptance: {conditional_rates: [0.7]}
workload: {concurrency: 2, num_requests: 2, prompt_tokens: 8, output_tokens: 6, temperature: 0.0, vocab_size: 128}
hardware: h100-sxm
target_model: llama-3.1-8b
simulation: {kernel_backend: triton, device: cpu, bank_rows: 16, baseline: false}
"""


def _run(arguments: list[str], interpret: str | None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret is not None:
        environment["TRITON_INTERPRET"] = interpret
    return subprocess.run([sys.executable, *arguments], env=environment, capture_output=True, text=True, timeout=600)


@pytest.fixture
def document(tmp_path):
    path = tmp_path / "sim.yaml"
    path.write_text(DOC)
    return path


def test_the_library_checks_the_interpreter_and_never_switches_it_on(document):
    script = (
        "import os, sys\n"
        "from spectune.config import load_document\n"
        "from spectune.errors import SpectuneError\n"
        "from spectune.simulator import simulate\n"
        "try:\n"
        f"    simulate(load_document(__import__('pathlib').Path({str(document)!r})).model)\n"
        "except SpectuneError as error:\n"
        "    print(error)\n"
        "print('TRITON_INTERPRET' in os.environ)\n"
    )
    result = _run(["-c", script], interpret=None)
    assert result.returncode == 0, result.stderr
    message, still_unset = result.stdout.splitlines()
    assert message.startswith(
        "simulation.kernel_backend: 'triton' on the CPU runs the kernels under Triton's interpreter"
    )
    assert "TRITON_INTERPRET=1" in message and "kernel_backend: reference" in message
    assert still_unset == "False"


def test_the_cli_switches_the_interpreter_on_for_triton_on_the_cpu(document):
    result = _run(["-m", "spectune", "simulate", str(document), "--json"], interpret=None)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["num_drafts"] > 0


def test_an_interpreter_switched_off_by_the_user_is_one_clear_line(document):
    result = _run(["-m", "spectune", "simulate", str(document), "--json"], interpret="0")
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.startswith("error: simulation.kernel_backend: 'triton' on the CPU"), result.stderr
    assert "Traceback" not in result.stderr

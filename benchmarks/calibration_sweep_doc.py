"""Regenerate docs/calibration.md's example of ``spectune calibrate`` on a ``vllm bench sweep`` tree.

The tree is generated (``tests/calibrate/sweep_synthetic.py``: a known step-time surface, 3 repeats per
cell, K = 0, 2, 4 forced under num_speculative_tokens 4, concurrencies 1, 8, 64), calibrated in a
temporary folder, and the console output replaces the block between the markers in the page, so the
page shows what the code prints today. ``--check`` exits 1 instead of writing when the page differs
(tests/calibrate/test_sweep.py runs it).

    python benchmarks/calibration_sweep_doc.py [--check]
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "calibrate"))

from sweep_synthetic import write_sweep_tree  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from spectune.cli import app  # noqa: E402

PAGE = REPO / "docs" / "calibration.md"
BEGIN, END = "<!-- calibrate-sweep-output:begin -->", "<!-- calibrate-sweep-output:end -->"
COMMAND = ["calibrate", "results", "--out", "calibrated/profile.yaml", "--method", "eagle3"]


def calibrate_output() -> str:
    """The console text of ``spectune calibrate`` on the generated tree, as a console block."""
    with tempfile.TemporaryDirectory() as folder:
        write_sweep_tree(
            Path(folder) / "results" / "sweep",
            ks=(0, 2, 4),
            global_k=4,
            concurrencies=(1, 8, 64),
            conditional_rates=[0.8, 0.75, 0.7, 0.65],
        )
        before = Path.cwd()
        os.chdir(folder)
        try:
            result = CliRunner().invoke(app, COMMAND)
        finally:
            os.chdir(before)
    if result.exit_code != 0:
        raise SystemExit(f"spectune {' '.join(COMMAND)} failed:\n{result.output}")
    body = "\n".join(line.rstrip() for line in result.output.splitlines())
    return f"```console\n$ spectune {' '.join(COMMAND)}\n{body}\n```"


def updated_page(text: str, block: str) -> str:
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + block + "\n" + text[end:]


def main(argv: list[str]) -> int:
    text = PAGE.read_text(encoding="utf-8")
    new = updated_page(text, calibrate_output())
    if "--check" in argv:
        if new != text:
            print(f"{PAGE}: the calibrate example is out of date; run python benchmarks/calibration_sweep_doc.py")
            return 1
        return 0
    PAGE.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""The kernels compile one variant for every R and every K a launch plan covers (no GPU needed)."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

_KERNELS = Path(__file__).resolve().parents[2] / "kernels"


@pytest.mark.parametrize(
    ("method", "has_draft", "vocab"),
    [("standard", 0, 256), ("block", 1, 4096), ("synthetic", 0, 1000), ("standard", 1, 128256)],
)
def test_calls_of_any_r_and_k_under_one_plan_share_their_compiled_kernels(method, has_draft, vocab):
    # The simulator's calls (rows through a row table). R = 1 and R or K divisible by 16 were
    # specialised by Triton, and the workspace views' alignment moved with R;
    # K up to 7 shares the padded row count 8, so (R, K) below all fall in one plan.
    counts = ["16", "2", "1", "1", "17", "5", "512", "7", "3", "3"]
    script = Path(__file__).with_name("variant_keys.py")
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    ran = subprocess.run(
        [sys.executable, str(script), method, str(has_draft), str(vocab), *counts],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    keys = ran.stdout.splitlines()
    assert len(keys) == len(counts) // 2 and len(set(keys)) == 1, "\n".join(keys)


def test_no_kernel_or_kernel_function_takes_more_than_16_arguments():
    # Past that, a call is a row of positional values to misplace: group them in a named tuple.
    wide = []
    for path in sorted(_KERNELS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list):
                if len(node.args.args) > 16:
                    wide.append(f"{path.name}:{node.lineno} {node.name} takes {len(node.args.args)}")
    assert not wide, wide

"""Every kernel variant compiles for sm_90 without spills or a stack frame (the small-grid kernel and
pass A as launched, under their register caps, at most a few hundred bytes; no GPU needed)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_kernels_compile_for_sm90_without_a_gpu():
    script = Path(__file__).with_name("compile_check.py")
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, str(script), "--resources"], env=environment, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # A replicated layout shows as a stack frame and spills (once 12 KB per thread in a decision).
    variants = [line for line in result.stdout.splitlines() if line.startswith("ok ")]
    assert len(variants) == 28, result.stdout
    capped = [line for line in variants if "'maxnreg'" in line]  # the small-grid kernel under its cap
    assert len(capped) == 12, result.stdout
    assert all(
        line.endswith("spill_stores=0 stack=0 index_conversions=0") for line in variants if line not in capped
    ), result.stdout
    # No kernel lays a tile's token ids or race hash out apart from its logits (see index_conversions).
    for line in result.stdout.splitlines():
        if line.startswith(("ok ", "launched ")):
            assert line.endswith("index_conversions=0"), line
    # Under the register cap that keeps two programs an SM, the barrier kernel holds its tiles
    # across the barrier: a few hundred spilled bytes (360-372 when written), never the kilobytes of a layout blowup.
    for line in capped:
        assert int(re.search(r"spill_stores=(\d+)", line).group(1)) <= 512, line
        assert int(re.search(r"stack=(\d+)", line).group(1)) <= 512, line
    # Pass A as launched for large grids, register caps included: at most a few spilled bytes (4 and
    # 12 when the caps were measured fast), never the kilobytes a layout change or new live values bring.
    launched = [line for line in result.stdout.splitlines() if line.startswith("launched ")]
    assert len(launched) == 8, result.stdout
    for line in launched:
        spills = int(re.search(r"spill_stores=(\d+)", line).group(1))
        stack = int(re.search(r"stack=(\d+)", line).group(1))
        assert spills <= 16 and stack <= 16, line
    # The one-hot decider issues every load it needs at once after its ticket (once it waited on
    # seven dependent waves in this count: draft tokens, statistics, the draft's logit, the draws).
    one_hot = [
        line for line in result.stdout.splitlines() if "_small_grid_kernel" in line and "'HAS_DRAFT': False" in line
    ]
    assert len(one_hot) == 3, result.stdout
    for line in one_hot:
        assert "load_waves_after_ticket=1 " in line, line

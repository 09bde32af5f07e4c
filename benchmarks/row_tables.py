"""Kernel time at the simulator's shapes: rows gathered into [R, K+1, V] tensors, or read in the
banks through row tables (``launch(..., rows=RowTable)``, what the simulator does).

Block verification with draft logits, T = 0.7, random rows of a 2,560-row bank. Each variant is one
CUDA graph of one call, replayed under ``triton.testing.do_bench`` (L2 flushed, median); every variant
must give the tokens of the gathered call. Row-table variants try pass A's register caps.

    python benchmarks/row_tables.py        # on a CUDA GPU
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable

import torch
import triton

from spectune.kernels._contract import validate_inputs
from spectune.kernels._launcher import RowTable, launch, plan_for

SHAPES = [(256, 5, 128256), (256, 5, 4096), (32, 3, 128256)]  # R, K, V
BANK_ROWS = 2560


def _timed(call: Callable[[], object]) -> float:
    """Median µs of one graph replay of ``call``."""
    call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    return 1e3 * triton.testing.do_bench(graph.replay, warmup=50, rep=300, return_mode="median")


def measure(num_requests: int, num_drafts: int, vocab: int) -> dict[str, float]:
    generator = torch.Generator(device="cuda").manual_seed(0)
    target_bank = torch.randn(BANK_ROWS, vocab, device="cuda", generator=generator) * 2
    draft_bank = target_bank + 0.3 * torch.randn(BANK_ROWS, vocab, device="cuda", generator=generator)
    rows = torch.randint(0, BANK_ROWS, (num_requests, num_drafts + 1), device="cuda", generator=generator)
    tokens = draft_bank[rows[:, :num_drafts]].argmax(-1)
    temperature = torch.full((num_requests,), 0.7, device="cuda")
    seed = torch.arange(num_requests, device="cuda") * 7919 + 3
    gathered = validate_inputs(
        target_bank[rows], tokens, draft_bank[rows[:, :num_drafts]], temperature, seed, "block", None
    )
    carrier = target_bank[0].as_strided((num_requests, num_drafts + 1, vocab), (0, 0, 1))
    draft_carrier = draft_bank[0].as_strided((num_requests, num_drafts, vocab), (0, 0, 1))
    banked = validate_inputs(carrier, tokens, draft_carrier, temperature, seed, "block", None)
    table = RowTable((rows * vocab).contiguous(), (rows[:, :num_drafts] * vocab).contiguous())
    expected = launch(gathered)

    def gather() -> None:
        torch.index_select(target_bank, 0, rows.reshape(-1), out=gathered.target_logits.view(-1, vocab))
        torch.index_select(draft_bank, 0, rows[:, :num_drafts].reshape(-1), out=gathered.draft_logits.view(-1, vocab))

    times = {"gather alone": _timed(gather), "gathered rows": _timed(lambda: launch(gathered))}
    base = plan_for(banked, row_table=True)
    for cap in (80, 88, None):
        plan = dataclasses.replace(base, pass_a_registers=cap)
        tokens_out, counts = launch(banked, plan, rows=table)
        if not (torch.equal(tokens_out, expected[0]) and torch.equal(counts, expected[1])):
            raise SystemExit(f"row table, cap {cap}: tokens differ from the gathered call's")
        times[f"row table, cap {cap}"] = _timed(lambda plan=plan: launch(banked, plan, rows=table))
    return times


def main() -> None:
    for num_requests, num_drafts, vocab in SHAPES:
        logit_bytes = num_requests * (2 * num_drafts + 1) * vocab * 4
        for name, us in measure(num_requests, num_drafts, vocab).items():
            sys.stdout.write(
                f"R={num_requests} K={num_drafts} V={vocab}: {name:20s} {us:8.1f} us"
                f"  ({logit_bytes / us / 1e3:,.0f} GB/s of logits once)\n"
            )


if __name__ == "__main__":
    main()

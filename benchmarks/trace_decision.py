"""Where a small-grid call's time goes: clock stamps in the program that decides (CUDA only).

Copies ``spectune.kernels`` into a temporary package, inserts ``%clock64`` stamps at fixed points
of the small-grid kernel (text insertions at anchors; it stops if the code no longer has one), runs
each method at R = 1 on the benchmark's inputs and prints the median cycles between stamps over 25
calls (L2 flushed before each). The stamps go to spare room after the workspace's residual masses;
the copy is for timing only and its tokens are not checked.

    python benchmarks/trace_decision.py [--drafts 3 7] [--methods greedy standard_onehot ...]

Phases of the program that decides: tile (its own tile read, statistics and draws stored), barrier
(draft logits: waiting for every program of the request block), residual (draft logits: acceptance
from the statistics and this tile's residual), ticket (the atomic that elects it), acceptance (one-hot
drafts: statistics combined, acceptance, tau), decision (tiles chosen, tokens written).
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import shutil
import statistics
import sys
import tempfile

import torch

import kernels as bench  # benchmarks/kernels.py: the same inputs as the timing benchmark

BASE = 24  # int64 stamp slots after the residual masses (7 stamps, two wall-clock readings at 20, 21)
HELPERS = '''

@triton.jit
def _trace_clock():
    return tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _trace_write(residual_mass_ptr, used, start, tile, barrier, residual, ticket, acceptance, wall):
    stamps = (residual_mass_ptr + (used + 1) // 2 * 2).to(tl.pointer_type(tl.int64))
    tl.store(stamps + 0, start)
    tl.store(stamps + 1, tile)
    tl.store(stamps + 2, barrier)
    tl.store(stamps + 3, residual)
    tl.store(stamps + 4, ticket)
    tl.store(stamps + 5, acceptance)
    tl.store(stamps + 6, _trace_clock())
    tl.store(stamps + 20, wall)
    tl.store(stamps + 21, tl.extra.cuda.globaltimer())

'''
STAMPS = ["start", "tile", "barrier", "residual", "ticket", "acceptance", "decision"]
WRITE = ("_trace_write(residual_mass_ptr, num_requests * num_drafts * num_tiles, trace_start, trace_tile, "
         "trace_barrier, trace_residual, trace_ticket, trace_acceptance, trace_wall)\n")
# (file, anchor, text before the anchor, text after the anchor)
INSERTIONS = [
    ("_small_grid.py", "PURPOSE_RESIDUAL: tl.constexpr = tl.constexpr(1)\n", "", HELPERS),
    ("_small_grid.py", "    block = tl.program_id(0)\n    row = tl.program_id(1)\n    tile = tl.program_id(2)\n",
     "    trace_start = _trace_clock()\n    trace_wall = tl.extra.cuda.globaltimer()\n", ""),
    ("_small_grid.py", "    if HAS_DRAFT:\n        if STAGE == 0:\n",
     "    trace_tile = _trace_clock()\n    trace_barrier = trace_tile\n", ""),
    ("_small_grid.py", "        if STAGE != 1:\n", "        trace_barrier = _trace_clock()\n", ""),
    ("_small_grid.py", "    if STAGE != 1:  # the last program", "    trace_residual = _trace_clock()\n", ""),
    ("_small_grid.py", "        tl.debug_barrier()\n        if tl.atomic_add(counters, 1, sem=\"acq_rel\") == parties - 1:\n",
     "", "            trace_ticket = _trace_clock()\n            trace_acceptance = trace_ticket\n"),
    ("_small_grid.py", "            _decide_small(\n", "            trace_acceptance = _trace_clock()\n", ""),
    ("_small_grid.py", "            tl.atomic_xchg(counters, 0, sem=\"relaxed\")\n\n\n@triton.jit\ndef _barrier(",
     "            " + WRITE, ""),
    # Room for the stamps after the residual masses (that view starts 8-byte aligned).
    ("_launcher.py", "    float_sizes += [drafts * 5, drafts * num_tiles]\n", "", "    float_sizes[-1] += 2 + 2 * BASE\n"),
]


def instrumented_package(source: pathlib.Path, target: pathlib.Path):
    shutil.copytree(source, target)
    for name, anchor, before, after in INSERTIONS:
        path = target / name
        text = path.read_text()
        if text.count(anchor) != 1:
            raise SystemExit(f"{name}: anchor {anchor[:60]!r} found {text.count(anchor)} times, expected once")
        text = text.replace(anchor, before + anchor + after)
        path.write_text(text.replace("BASE", str(BASE)) if name == "_launcher.py" else text)
    spec = importlib.util.spec_from_file_location("traced_kernels", target / "__init__.py",
                                                  submodule_search_locations=[str(target)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["traced_kernels"] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drafts", nargs="+", type=int, default=[3, 7])
    parser.add_argument("--methods", nargs="+", default=["greedy", "standard_onehot", "block_onehot", "standard_draft"],
                        choices=bench.METHODS)
    parser.add_argument("--vocab", type=int, default=128256)
    args = parser.parse_args()
    import spectune.kernels

    with tempfile.TemporaryDirectory() as directory:
        instrumented_package(pathlib.Path(spectune.kernels.__file__).parent, pathlib.Path(directory) / "traced")
        from traced_kernels import _launcher
        from traced_kernels._contract import validate_inputs

        workspaces = []
        allocate = _launcher._allocate
        _launcher._allocate = lambda *a, **k: workspaces.append(allocate(*a, **k)) or workspaces[-1]
        names = ("target_logits", "draft_tokens", "draft_logits", "temperature", "seed", "method",
                 "synthetic_conditional_rates")
        flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
        print("| K | method | " + " | ".join(STAMPS[1:]) + " | decider total | cycles/ns |")
        print("| --- | --- |" + " --- |" * (len(STAMPS) + 1))
        for num_drafts in args.drafts:
            generator = torch.Generator(device="cuda").manual_seed(num_drafts)
            inputs_set = bench.make_set(1, num_drafts, args.vocab, torch.float32, generator)
            for method in args.methods:
                arguments = bench.call_arguments(method, inputs_set, num_drafts)
                inputs = validate_inputs(*(arguments.get(name) for name in names))
                samples = []
                used = num_drafts * -(-args.vocab // _launcher.tile_size_for(args.vocab))  # residual masses (R = 1)
                offset = (used + 1) // 2 * 2
                for call in range(30):
                    flush.zero_()
                    torch.cuda.synchronize()
                    _launcher.launch(inputs)
                    torch.cuda.synchronize()
                    if call >= 5:
                        samples.append(workspaces[-1].residual_mass[offset:offset + 2 * BASE].view(torch.int64).tolist())
                    workspaces.clear()

                def median(first: int, last: int) -> float:
                    return statistics.median(s[last] - s[first] for s in samples)

                phases = [median(i, i + 1) for i in range(len(STAMPS) - 1)]
                total = median(0, len(STAMPS) - 1)
                rate = total / median(20, 21)
                print(f"| {num_drafts} | {method} | " + " | ".join(f"{p:.0f}" for p in phases)
                      + f" | {total:.0f} ({median(20, 21) / 1000:.2f} µs) | {rate:.2f} |", flush=True)


if __name__ == "__main__":
    main()

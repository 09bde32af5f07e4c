"""Where a fused (small-grid) call's time goes: clock stamps in the program that decides (CUDA only).

Copies ``spectune.kernels`` into a temporary package, inserts ``%clock64`` stamps at fixed points
of pass A and the decision (text insertions at anchors; it stops if the code no longer has one),
runs each method at R = 1 on the benchmark's inputs and prints the median cycles between stamps
over 25 calls (L2 flushed before each). The stamps go to spare room at the end of the workspace's
``row_info`` scratch; the copy is for timing only and its tokens are not checked.

    python benchmarks/trace_decision.py [--drafts 3 7] [--methods greedy standard_onehot ...]

Phases: pass A (the deciding program's own tile), ticket (barrier and the atomic that elects it),
statistics (tile statistics loaded and combined into normalisers), acceptance (uniforms, tau),
round trip (tau through memory), greedy token, sampled token (tile choice, tile re-read, draw),
write (tokens out).
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

BASE = 48  # float offset of the stamps in row_info: past the K * 5 floats the decision writes (K <= 8)
HELPERS = '''

@triton.jit
def _trace_clock():
    return tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _trace_stamp(row_info_ptr, slot):
    tl.store(row_info_ptr.to(tl.pointer_type(tl.int64)) + 24 + slot, _trace_clock())

'''
STAMPS = ["start", "pass A", "ticket", "statistics", "acceptance", "round trip", "greedy token", "sampled token",
          "write"]
# (file, anchor, text before the anchor, text after the anchor)
INSERTIONS = [
    ("_verify_kernel.py", "from ._decision import _decide\n", "", HELPERS),
    ("_decision.py", "METHOD_STANDARD: tl.constexpr", HELPERS, ""),
    ("_verify_kernel.py", "    block = tl.program_id(0)\n    row = tl.program_id(1)\n",
     "    trace_start = _trace_clock()\n    trace_wall = tl.extra.cuda.globaltimer()\n", ""),
    ("_verify_kernel.py", "        tl.debug_barrier()\n        ticket = tl.atomic_add(counter_ptr + block, 1, sem=\"acq_rel\")\n",
     "        trace_pass_a = _trace_clock()\n", ""),
    ("_verify_kernel.py", "        if ticket == tl.num_programs(1) * tl.num_programs(2) - 1:\n", "",
     "            trace_slots = row_info_ptr.to(tl.pointer_type(tl.int64)) + 24\n"
     "            tl.store(trace_slots + 0, trace_start)\n            tl.store(trace_slots + 1, trace_pass_a)\n"
     "            _trace_stamp(row_info_ptr, 2)\n            tl.store(trace_slots + 20, trace_wall)\n"),
    ("_decision.py", "    prob = _prob_at(at_draft_ptr, row_index, valid & sampled[:, None], reference, mass, scale)\n",
     "", "    _trace_stamp(row_info_ptr, 3)\n"),
    ("_decision.py", "    # Round-trip tau through memory", "    _trace_stamp(row_info_ptr, 4)\n", ""),
    ("_decision.py", "    at_tau = rows[None, :] == tau[:, None]\n    row_offset = requests * target_stride_r",
     "    _trace_stamp(row_info_ptr, 5)\n", ""),
    ("_decision.py", "    drawn = sampled & ~deferred\n", "    _trace_stamp(row_info_ptr, 6)\n", ""),
    ("_decision.py",
     "    write_tokens(tokens_ptr, num_tokens_ptr, requests, drafts, tau, emitted, live & ~deferred, num_drafts, ROWS_PAD)\n",
     "    _trace_stamp(row_info_ptr, 7)\n",
     "    _trace_stamp(row_info_ptr, 8)\n"
     "    tl.store(row_info_ptr.to(tl.pointer_type(tl.int64)) + 24 + 21, tl.extra.cuda.globaltimer())\n"),
    # Room for the stamps, 8-byte aligned: row_info starts after an odd number of floats when K is odd.
    ("_launcher.py", "float_sizes += [drafts * 5, drafts * num_tiles]", "",
     "\n    float_sizes[6] += drafts % 2\n    float_sizes[7] += 2 * BASE"),
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
                for call in range(30):
                    flush.zero_()
                    torch.cuda.synchronize()
                    _launcher.launch(inputs)
                    torch.cuda.synchronize()
                    if call >= 5:
                        samples.append(workspaces[-1].row_info[BASE:BASE + 44].view(torch.int64).tolist())
                    workspaces.clear()

                def median(first: int, last: int) -> float:
                    return statistics.median(s[last] - s[first] for s in samples)

                phases = [median(i, i + 1) for i in range(len(STAMPS) - 1)]
                rate = median(0, 8) / median(20, 21)
                print(f"| {num_drafts} | {method} | " + " | ".join(f"{p:.0f}" for p in phases)
                      + f" | {median(0, 8):.0f} ({median(20, 21) / 1000:.2f} µs) | {rate:.2f} |", flush=True)


if __name__ == "__main__":
    main()

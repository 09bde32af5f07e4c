"""What a launch boundary costs at R = 1 on this GPU: the numbers behind the small-grid launch design.

A pass-A-shaped kernel (one program per 4096-token fp32 tile of K+1 rows, V = 128256: max and
mass, stored) and a one-program decision that reads every tile's statistics, timed as the kernels
benchmark times a call (a CUDA graph over 16 input sets, L2 flushed before each replay, median per
call), joined five ways:

- ``two``: two plain launches;
- ``two+pdl``: the decision launched with programmatic dependent launch (it waits in
  ``griddepcontrol.wait``; pass A signals ``launch_dependents`` once its tile is stored);
- ``two+pdl2``: both kernels launched that way (pass A waits on the previous call before it reads);
- ``fused+memset``: one launch, the last program to take a ticket decides (counter zeroed by a memset);
- ``fused+reset``: the same with a persistent counter that the deciding program puts back to zero;
- ``coop``: one cooperative launch with a grid barrier, after which every program re-reduces its
  own tile (still in registers) against the global statistics -- the shape a draft-logit residual
  needs -- then a ticket (counters zeroed by a memset);
- ``coop+reset``: the same with the small-grid kernel's barrier (``_small_grid._barrier``) and
  counters handed back at zero, no memset;
- ``coop+draft+reset``: that, with each draft row's tile read beside its target tile and the
  residual max(p - q, 0) of the two tiles: the skeleton of a draft-logit call at R = 1, with none of
  its sampling, acceptance or decision;
- ``alone``: pass A by itself (the floor of any design).

Also a chain of 16 empty one-program kernels, plain and with PDL (µs per launch).

    python benchmarks/launch_probe.py [--drafts 3 7]   # from the repository root
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl

from kernels import graph_time_us  # benchmarks/kernels.py: the same graph timing

from spectune.kernels._small_grid import _barrier

TILE = 4096
VOCAB = 128256
SETS = 16


@triton.jit
def _tile(logits_ptr, stats_ptr, vocab, num_tiles, TILE: tl.constexpr):
    """This program's tile: its max and mass stored; returns the tile and its statistics' index."""
    row = tl.program_id(0)
    tile = tl.program_id(1)
    ids = tile * TILE + tl.arange(0, TILE)
    values = tl.load(logits_ptr + row * vocab + ids, mask=ids < vocab, other=float("-inf"))
    tile_max = tl.max(values)
    index = row * num_tiles + tile
    tl.store(stats_ptr + 2 * index, tile_max)
    tl.store(stats_ptr + 2 * index + 1, tl.sum(tl.exp2((values - tile_max) * 1.8)))
    return values, index


@triton.jit
def _stats(logits_ptr, stats_ptr, counter_ptr, out_ptr, vocab, num_tiles,
           TILE: tl.constexpr, FUSED: tl.constexpr, WAIT: tl.constexpr, SIGNAL: tl.constexpr,
           RESET: tl.constexpr, PADDED: tl.constexpr):
    if WAIT:  # before anything the previous call (or the model) may still write
        tl.extra.cuda.gdc_wait()
    _tile(logits_ptr, stats_ptr, vocab, num_tiles, TILE)
    if SIGNAL:
        tl.extra.cuda.gdc_launch_dependents()
    if FUSED:
        tl.debug_barrier()
        ticket = tl.atomic_add(counter_ptr, 1, sem="acq_rel")
        if ticket == tl.num_programs(0) * tl.num_programs(1) - 1:
            _combine(stats_ptr, out_ptr, tl.num_programs(0) * num_tiles, PADDED)
            if RESET:
                tl.store(counter_ptr, 0)


@triton.jit
def _combine(stats_ptr, out_ptr, n, PADDED: tl.constexpr):
    k = tl.arange(0, PADDED)
    maxima = tl.load(stats_ptr + 2 * k, mask=k < n, other=float("-inf"), cache_modifier=".cg")
    masses = tl.load(stats_ptr + 2 * k + 1, mask=k < n, other=0.0, cache_modifier=".cg")
    top = tl.max(maxima)
    tl.store(out_ptr, tl.sum(masses * tl.exp2((maxima - top) * 1.8)))


@triton.jit
def _decide(stats_ptr, out_ptr, n, WAIT: tl.constexpr, PADDED: tl.constexpr):
    if WAIT:
        tl.extra.cuda.gdc_wait()
    _combine(stats_ptr, out_ptr, n, PADDED)


@triton.jit
def _cooperative(logits_ptr, draft_ptr, stats_ptr, counter_ptr, out_ptr, vocab, num_tiles,
                 TILE: tl.constexpr, PADDED: tl.constexpr, DRAFT: tl.constexpr, RESET: tl.constexpr):
    row = tl.program_id(0)
    programs = tl.num_programs(0) * tl.num_programs(1)
    values, index = _tile(logits_ptr, stats_ptr, vocab, num_tiles, TILE)
    d_values = values
    if DRAFT:  # the draft row's tile beside the target's (none for the bonus row), held across the barrier
        ids = tl.program_id(1) * TILE + tl.arange(0, TILE)
        d_values = tl.load(draft_ptr + row * vocab + ids, mask=(ids < vocab) & (row < tl.num_programs(0) - 1),
                           other=float("-inf"))
        tl.store(stats_ptr + 4 * programs + index, tl.max(d_values))
    tl.debug_barrier()
    if RESET:  # the small-grid kernel's barrier: no memset, the counters handed back at zero
        _barrier(counter_ptr, counter_ptr + 1, programs)
    else:
        arrived = tl.atomic_add(counter_ptr, 1, sem="acq_rel") + 1
        while arrived < programs:
            arrived = tl.atomic_add(counter_ptr, 0, sem="acquire")
    # Every program now sees every tile: the row's max, and its own tile against it.
    k = tl.arange(0, PADDED)
    in_row = (k >= row * num_tiles) & (k < row * num_tiles + num_tiles)
    maxima = tl.load(stats_ptr + 2 * k, mask=in_row, other=float("-inf"), cache_modifier=".cg")
    top = tl.max(maxima)
    if DRAFT:
        d_top = tl.max(tl.load(stats_ptr + 4 * programs + k, mask=in_row, other=float("-inf"), cache_modifier=".cg"))
        residual = tl.sum(tl.maximum(tl.exp2((values - top) * 1.8) - tl.exp2((d_values - d_top) * 1.8), 0.0))
    else:
        residual = tl.sum(tl.maximum(tl.exp2((values - top) * 1.8) - 1e-6, 0.0))
    tl.store(stats_ptr + 2 * programs + index, residual)
    tl.debug_barrier()
    ticket = tl.atomic_add(counter_ptr + 2, 1, sem="acq_rel")
    if ticket == programs - 1:
        r = tl.load(stats_ptr + 2 * programs + k, mask=k < programs, other=0.0, cache_modifier=".cg")
        tl.store(out_ptr, tl.sum(r))
        if RESET:
            tl.atomic_xchg(counter_ptr + 2, 0, sem="relaxed")


@triton.jit
def _empty(out_ptr, WAIT: tl.constexpr):
    if WAIT:
        tl.extra.cuda.gdc_wait()
    tl.store(out_ptr, 1.0)


def probe(num_drafts: int) -> dict[str, float]:
    rows = num_drafts + 1
    num_tiles = -(-VOCAB // TILE)
    n = rows * num_tiles
    padded = triton.next_power_of_2(n)
    sets = [torch.randn(rows, VOCAB, device="cuda") for _ in range(SETS)]
    drafts = [torch.randn(rows, VOCAB, device="cuda") for _ in range(SETS)]
    stats = [torch.empty(6 * n, device="cuda") for _ in range(SETS)]
    ring = torch.zeros(4 * SETS, dtype=torch.int32, device="cuda")
    out = torch.empty(SETS, device="cuda")
    persistent = torch.zeros(2, dtype=torch.int32, device="cuda")
    grid = (rows, num_tiles)
    common = dict(TILE=TILE, PADDED=padded, num_warps=8)

    def stats_launch(i, counter, fused=False, wait=False, signal=False, reset=False, pdl=False):
        _stats[grid](sets[i], stats[i], counter, out[i:], VOCAB, num_tiles, FUSED=fused, WAIT=wait, SIGNAL=signal,
                     RESET=reset, launch_pdl=pdl, **common)

    def two(i, pdl_decide=False, pdl_stats=False):
        stats_launch(i, persistent, wait=pdl_stats, signal=pdl_decide, pdl=pdl_stats)
        _decide[(1,)](stats[i], out[i:], n, WAIT=pdl_decide, launch_pdl=pdl_decide, PADDED=padded, num_warps=8)

    def fused_memset(i):
        counter = torch.zeros(2, dtype=torch.int32, device="cuda")
        stats_launch(i, counter, fused=True)

    def cooperative(i, draft=False, reset=False):
        counter = ring[4 * i:4 * i + 4] if reset else torch.zeros(4, dtype=torch.int32, device="cuda")
        _cooperative[grid](sets[i], drafts[i], stats[i], counter, out[i:], VOCAB, num_tiles, DRAFT=draft, RESET=reset,
                           launch_cooperative_grid=True, **common)

    variants = {
        "alone": lambda i: stats_launch(i, persistent),
        "two": lambda i: two(i),
        "two+pdl": lambda i: two(i, pdl_decide=True),
        "two+pdl2": lambda i: two(i, pdl_decide=True, pdl_stats=True),
        "fused+memset": fused_memset,
        "fused+reset": lambda i: stats_launch(i, persistent, fused=True, reset=True),
        "coop": cooperative,
        "coop+reset": lambda i: cooperative(i, reset=True),
        "coop+draft+reset": lambda i: cooperative(i, draft=True, reset=True),
    }
    results = {}
    reference = None
    for name, variant in variants.items():
        try:
            results[name] = round(graph_time_us([lambda i=i: variant(i) for i in range(SETS)]), 2)
            variant(0)
            torch.cuda.synchronize()
            if name.startswith(("two", "fused")):
                value = float(out[0])
                reference = value if reference is None else reference
                if abs(value - reference) > 1e-3 * abs(reference):
                    results[name] = f"WRONG {value} vs {reference}"
        except Exception as error:  # a launch mode this stack cannot capture: report it, go on
            results[name] = f"{type(error).__name__}: {str(error)[:120]}"
            torch.cuda.synchronize()
    return results


def empty_chain() -> dict[str, float]:
    out = torch.empty(1, device="cuda")
    results = {}
    for name, pdl in (("empty", False), ("empty+pdl", True)):
        results[name] = round(graph_time_us([lambda: _empty[(1,)](out, WAIT=pdl, launch_pdl=pdl, num_warps=4)] * 64), 2)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drafts", nargs="+", type=int, default=[3, 7])
    args = parser.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    print("per launch µs:", empty_chain(), flush=True)
    for num_drafts in args.drafts:
        print(f"K={num_drafts} µs per call:", probe(num_drafts), flush=True)


if __name__ == "__main__":
    main()

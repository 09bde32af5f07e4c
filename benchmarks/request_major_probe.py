"""Can block verification's second read come from L2? A request-major skeleton of a draft-logit call.

Block verification with draft logits re-reads every candidate row of a deferred request (pass B)
once pass A's normalisers are known; at R = 256, K = 7 that is ~260 MB from HBM. This probe asks
whether one launch that walks the requests in order could serve that re-read from L2 instead, and
what its extra synchronisation costs. Shapes are the benchmark's (fp32, V = 128256, tiles of 4096);
one request in DEFER_EVERY defers with BROWS candidate rows (the benchmark's inputs: 20%, 5 rows).

One launch, programs numbered by an atomic counter (so a program only ever waits on programs that
started before it). For each request in turn: its A programs (each streams TPP tiles of one target
or draft row: max and mass stored, then a per-request ticket; the last reduces the request's
statistics, the stand-in for the decision, and raises the request's flag), then S B programs of the
request LAG places back (each waits on that flag, then reduces its share of the deferred rows'
tiles, target and draft, against the row maxima: the residual's arithmetic). Per configuration
(``--configs chunks,S,lag,programs_per_sm,stages,warps``; programs_per_sm > 0 makes the grid
persistent: that many programs an SM, cooperative, each taking the next virtual program from the
counter until none is left):

- ``a``: the A programs alone;
- ``a+b``: A and B in one launch, as above;
- ``a+b nowait``: the same with B reading without waiting on the flag (timing only: what is left is
  the re-read, from L2 where the window allows);
- ``a,b``: the A launch, then B as a launch of its own over the same work (the re-read from HBM);
  ``matches`` checks that ``a+b`` computed the residuals ``a,b`` did.

v13 (``results/kernels-2026-12-01-h200-v13.md``) ran the defaults and the configurations named there.

    python benchmarks/request_major_probe.py   # from the repository root
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl

from kernels import graph_time_us  # benchmarks/kernels.py: the same graph timing

TILE = 4096
VOCAB = 128256
REQUESTS = 256
DRAFTS = 7
DEFER_EVERY = 5
BROWS = 5
SETS = 3


@triton.jit
def _row_tiles(target_ptr, draft_ptr, stats_ptr, r, row, chunk, vocab, num_tiles,
               K: tl.constexpr, TPP: tl.constexpr, TILE: tl.constexpr, STAGES: tl.constexpr):
    """TPP tiles of row ``row`` (target rows 0..K, then draft rows) of request r: max and mass stored."""
    if row <= K:
        base = target_ptr + (r * (K + 1) + row) * vocab
    else:
        base = draft_ptr + (r * K + row - K - 1) * vocab
    for tile in tl.range(chunk * TPP, tl.minimum(chunk * TPP + TPP, num_tiles), num_stages=STAGES):
        ids = tile * TILE + tl.arange(0, TILE)
        values = tl.load(base + ids, mask=ids < vocab, other=float("-inf")).to(tl.float32)
        top = tl.max(values)
        index = (r * (2 * K + 1) + row) * num_tiles + tile
        tl.store(stats_ptr + 2 * index, top)
        tl.store(stats_ptr + 2 * index + 1, tl.sum(tl.exp2((values - top) * 1.4427)))


@triton.jit
def _settle(stats_ptr, row_max_ptr, r, num_tiles, K: tl.constexpr, TILES_PAD: tl.constexpr, ROWS_PAD: tl.constexpr):
    """The request's row maxima from its tile statistics (the decision's stand-in)."""
    rows = tl.arange(0, ROWS_PAD)
    tiles = tl.arange(0, TILES_PAD)
    index = (r * (2 * K + 1) + rows[:, None]) * num_tiles + tiles[None, :]
    mask = (rows[:, None] < 2 * K + 1) & (tiles[None, :] < num_tiles)
    maxima = tl.load(stats_ptr + 2 * index, mask=mask, other=float("-inf"), cache_modifier=".cg")
    tl.store(row_max_ptr + r * (2 * K + 1) + rows, tl.max(maxima, axis=1), mask=rows < 2 * K + 1)


@triton.jit
def _residual_share(target_ptr, draft_ptr, row_max_ptr, resid_ptr, r, part, vocab, num_tiles,
                    K: tl.constexpr, S: tl.constexpr, BROWS: tl.constexpr, TILE: tl.constexpr):
    """Part ``part`` of S of a deferred request's residual: tiles of draft rows K-BROWS..K-1, both logits."""
    for item in tl.range(part, BROWS * num_tiles, S):
        row = K - BROWS + item // num_tiles
        tile = item % num_tiles
        ids = tile * TILE + tl.arange(0, TILE)
        mask = ids < vocab
        t = tl.load(target_ptr + (r * (K + 1) + row) * vocab + ids, mask=mask, other=float("-inf")).to(tl.float32)
        d = tl.load(draft_ptr + (r * K + row) * vocab + ids, mask=mask, other=float("-inf")).to(tl.float32)
        t_max = tl.load(row_max_ptr + r * (2 * K + 1) + row)
        d_max = tl.load(row_max_ptr + r * (2 * K + 1) + K + 1 + row)
        weights = tl.maximum(0.5 * tl.exp2((t - t_max) * 1.4427) - tl.exp2((d - d_max) * 1.4427), 0.0)
        tl.store(resid_ptr + (r * K + row) * num_tiles + tile, tl.sum(weights))


@triton.jit
def _work(vid, target_ptr, draft_ptr, stats_ptr, row_max_ptr, resid_ptr, counter_ptr, num_requests, vocab, num_tiles,
          K: tl.constexpr, CHUNKS: tl.constexpr, TPP: tl.constexpr, S: tl.constexpr, LAG: tl.constexpr,
          DEFER_EVERY: tl.constexpr, BROWS: tl.constexpr, TILE: tl.constexpr, STAGES: tl.constexpr,
          TILES_PAD: tl.constexpr, ROWS_PAD: tl.constexpr, NOWAIT: tl.constexpr):
    """Virtual program ``vid``: counters [0] numbering, [1 + r] request r's ticket, [1 + R + r] its flag."""
    A: tl.constexpr = (2 * K + 1) * CHUNKS
    step = vid // (A + S)
    within = vid % (A + S)
    if within < A:
        r = step
        if r < num_requests:
            _row_tiles(target_ptr, draft_ptr, stats_ptr, r, within // CHUNKS, within % CHUNKS, vocab, num_tiles,
                       K, TPP, TILE, STAGES)
            tl.debug_barrier()
            if tl.atomic_add(counter_ptr + 1 + r, 1, sem="acq_rel") == A - 1:
                _settle(stats_ptr, row_max_ptr, r, num_tiles, K, TILES_PAD, ROWS_PAD)
                tl.debug_barrier()
                tl.atomic_xchg(counter_ptr + 1 + num_requests + r, 1, sem="release")
    else:
        r = step - LAG
        if (r >= 0) & (r < num_requests):
            if not NOWAIT:  # NOWAIT (timing only): read without waiting, so what remains is the re-read
                ready = tl.atomic_add(counter_ptr + 1 + num_requests + r, 0, sem="acquire")
                while ready == 0:
                    ready = tl.atomic_add(counter_ptr + 1 + num_requests + r, 0, sem="acquire")
            if r % DEFER_EVERY == 0:
                _residual_share(target_ptr, draft_ptr, row_max_ptr, resid_ptr, r, within - A, vocab, num_tiles,
                                K, S, BROWS, TILE)


@triton.jit
def _request_major(target_ptr, draft_ptr, stats_ptr, row_max_ptr, resid_ptr, counter_ptr,
                   num_requests, vocab, num_tiles, total,
                   K: tl.constexpr, CHUNKS: tl.constexpr, TPP: tl.constexpr, S: tl.constexpr, LAG: tl.constexpr,
                   DEFER_EVERY: tl.constexpr, BROWS: tl.constexpr, TILE: tl.constexpr,
                   PERSISTENT: tl.constexpr, STAGES: tl.constexpr, TILES_PAD: tl.constexpr, ROWS_PAD: tl.constexpr,
                   NOWAIT: tl.constexpr):
    if PERSISTENT:  # a fixed grid; each program takes the next virtual program until none is left
        vid = tl.atomic_add(counter_ptr, 1, sem="relaxed")
        while vid < total:
            following = tl.atomic_add(counter_ptr, 1, sem="relaxed")
            _work(vid, target_ptr, draft_ptr, stats_ptr, row_max_ptr, resid_ptr, counter_ptr, num_requests, vocab,
                  num_tiles, K, CHUNKS, TPP, S, LAG, DEFER_EVERY, BROWS, TILE, STAGES, TILES_PAD, ROWS_PAD, NOWAIT)
            vid = following
    else:
        vid = tl.atomic_add(counter_ptr, 1, sem="relaxed")
        _work(vid, target_ptr, draft_ptr, stats_ptr, row_max_ptr, resid_ptr, counter_ptr, num_requests, vocab,
              num_tiles, K, CHUNKS, TPP, S, LAG, DEFER_EVERY, BROWS, TILE, STAGES, TILES_PAD, ROWS_PAD, NOWAIT)


@triton.jit
def _separate_b(target_ptr, draft_ptr, row_max_ptr, resid_ptr, num_requests, vocab, num_tiles,
                K: tl.constexpr, S: tl.constexpr, DEFER_EVERY: tl.constexpr, BROWS: tl.constexpr, TILE: tl.constexpr):
    r = tl.program_id(0) * DEFER_EVERY
    _residual_share(target_ptr, draft_ptr, row_max_ptr, resid_ptr, r, tl.program_id(1), vocab, num_tiles,
                    K, S, BROWS, TILE)


def probe(dtype: torch.dtype, configs: list[tuple[int, ...]]) -> dict[str, object]:
    num_tiles = -(-VOCAB // TILE)
    rows = 2 * DRAFTS + 1
    targets = [torch.randn(REQUESTS, DRAFTS + 1, VOCAB, device="cuda").to(dtype) for _ in range(SETS)]
    drafts = [torch.randn(REQUESTS, DRAFTS, VOCAB, device="cuda").to(dtype) for _ in range(SETS)]
    stats = torch.empty(2 * REQUESTS * rows * num_tiles, device="cuda")
    row_max = torch.empty(REQUESTS * rows, device="cuda")
    resid = torch.empty(REQUESTS * DRAFTS * num_tiles, device="cuda")
    pads = dict(TILES_PAD=triton.next_power_of_2(num_tiles), ROWS_PAD=triton.next_power_of_2(rows))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    results: dict[str, object] = {}

    def fused(i, chunks, s, lag, per_sm=0, stages=1, warps=4, nowait=False):
        counter = torch.zeros(1 + 2 * REQUESTS, dtype=torch.int32, device="cuda")
        total = (REQUESTS + lag) * ((2 * DRAFTS + 1) * chunks + s)
        _request_major[(per_sm * sms if per_sm else total,)](
            targets[i], drafts[i], stats, row_max, resid, counter, REQUESTS, VOCAB, num_tiles, total,
            K=DRAFTS, CHUNKS=chunks, TPP=-(-num_tiles // chunks), S=s, LAG=lag, DEFER_EVERY=DEFER_EVERY,
            BROWS=BROWS, TILE=TILE, PERSISTENT=per_sm > 0, STAGES=stages, num_warps=warps, NOWAIT=nowait,
            **({"launch_cooperative_grid": True} if per_sm else {}), **pads,
        )

    def separate(i, chunks, s, per_sm=0, stages=1, warps=4):
        fused(i, chunks, 0, 0, per_sm=per_sm, stages=stages, warps=warps)
        _separate_b[(-(-REQUESTS // DEFER_EVERY), s)](
            targets[i], drafts[i], row_max, resid, REQUESTS, VOCAB, num_tiles,
            K=DRAFTS, S=s, DEFER_EVERY=DEFER_EVERY, BROWS=BROWS, TILE=TILE, num_warps=8,
        )

    name = str(dtype).split(".")[-1]
    results[f"{name} floor amax"] = round(graph_time_us(
        [lambda i=i: (torch.amax(targets[i], dim=-1), torch.amax(drafts[i], dim=-1)) for i in range(SETS)]), 1)
    print(results, flush=True)
    for chunks, s, lag, per_sm, stages, warps in configs:
        tag = f"{name} chunks={chunks} S={s} lag={lag} per_sm={per_sm} stages={stages} warps={warps}"
        knobs = dict(per_sm=per_sm, stages=stages, warps=warps)
        variants = {
            "a": lambda i: fused(i, chunks, 0, 0, **knobs),
            "a+b": lambda i: fused(i, chunks, s, lag, **knobs),
            "a+b nowait": lambda i: fused(i, chunks, s, lag, nowait=True, **knobs),
            "a,b": lambda i: separate(i, chunks, s, **knobs),
        }
        for label, variant in variants.items():
            try:
                results[f"{tag} {label}"] = round(graph_time_us([lambda i=i: variant(i) for i in range(SETS)]), 1)
            except Exception as error:
                results[f"{tag} {label}"] = f"{type(error).__name__}: {str(error)[:160]}"
                torch.cuda.synchronize()
            print(f"{tag} {label}: {results[f'{tag} {label}']}", flush=True)
        resid.zero_()
        variants["a,b"](0)
        expected = resid.clone()
        resid.zero_()
        variants["a+b"](0)
        torch.cuda.synchronize()
        results[f"{tag} a+b matches a,b"] = bool(torch.allclose(resid, expected, rtol=1e-5, atol=1e-6))
        print(f"{tag} matches: {results[f'{tag} a+b matches a,b']}", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--configs", nargs="+",
                        default=["4,16,2,0,1,4", "32,16,2,0,1,16", "32,16,2,0,1,8", "16,16,2,0,1,16", "8,16,2,0,1,16",
                                 "32,32,1,0,1,16"],
                        help="chunks per row, B programs per request, lag (requests), programs an SM (0: one "
                             "launch-wide grid), stages, warps")
    args = parser.parse_args()
    configs = [tuple(int(x) for x in text.split(",")) for text in args.configs]
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)
    for dtype in args.dtypes:
        probe(getattr(torch, dtype), configs)


if __name__ == "__main__":
    main()

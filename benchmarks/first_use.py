"""What a process pays the first time it builds a synthesizer and runs a simulation, against later times.

A study's workers are processes of their own, and each pays its first uses inside its first
simulations: importing Triton and computing Triton's cache key, reading the kernels' source, drawing
the banks' base noise, calibrating the profile's rates, capturing the engine's graphs. This prints, in
one fresh process:

- a synthesizer at each vocabulary: the first (base noise and calibration), one of new rates (their
  calibration), the same rates again;
- a lockstep group (six points, B = 16, K = 1-6, 150 steps each, ``benchmarks/simulator.py``'s
  documents) per combination: the first time and again; ``--profile N`` prints the top N functions of
  the process's first simulation by cumulative time.

Run it twice on a fresh GPU machine: the first run also compiles the kernels into Triton's cache.

    python benchmarks/first_use.py --device cuda --vocabs 4096 128256 --profile 40
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import simulator as bench  # noqa: E402

COMBOS = [("standard", "greedy"), ("block", "greedy"), ("standard", "probabilistic"), ("block", "probabilistic")]


def _timed(device: torch.device, work) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    work()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--vocabs", type=int, nargs="+", default=[4096])
    parser.add_argument("--profile", type=int, default=0, metavar="N")
    args = parser.parse_args()
    from spectune.config._base import SpectuneNotice
    from spectune.simulator import simulate_many
    from spectune.workload import LogitSynthesizer

    warnings.simplefilter("ignore", SpectuneNotice)  # block verification with greedy drafts, on purpose
    device = torch.device(args.device)
    torch.zeros(1, device=device)  # the device is open before anything is timed
    rates = [0.8, 0.7, 0.6, 0.6, 0.6, 0.6]
    for vocab in args.vocabs:
        for label, these in (("first", rates), ("new rates", [0.75, 0.7, 0.62]), ("same rates", rates)):
            seconds = _timed(
                device,
                lambda: LogitSynthesizer(
                    these, [0.7], vocab_size=vocab, draft_sample_method="probabilistic", device=device
                ),
            )
            print(f"synthesizer V={vocab} {label}: {seconds:.3f} s", flush=True)
    vocab = args.vocabs[0]
    for index, (method, draft) in enumerate(COMBOS):
        documents = [bench._document(args.device, 16, k, vocab, method, draft, 150, seed=k) for k in range(1, 7)]
        for attempt in ("first", "again"):
            profiler = cProfile.Profile() if args.profile and index == 0 and attempt == "first" else None
            seconds = _timed(
                device, lambda: profiler.runcall(simulate_many, documents) if profiler else simulate_many(documents)
            )
            print(f"group V={vocab} B=16 K=1-6 {method}/{draft} {attempt}: {seconds:.3f} s", flush=True)
            if profiler is not None:
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(args.profile)
                print(out.getvalue())


if __name__ == "__main__":
    main()

"""The serving loop's host cost alone: µs per member step with verification stubbed out.

Every simulated step has host work beside its verification: the serving loop's bookkeeping (admission,
KV blocks, chunked prefill, the clock, the trace), the cost model's step and prefill times, and the
lockstep driver. This measures that work alone. The simulations are built by the simulator's own code
(``spectune.simulator._document_run.DocumentRun``: the document's requests, cost model, K schedule and KV pool, as
``simulate`` builds them) and run by the engine's driver (``_drive.drive``), but verified by a stub that
hands out emitted counts drawn once, before timing, from a fixed-seed numpy RNG at the document's
acceptance rates: no logits, no rejection sampling.

The workload is ``studies/decision.yaml``'s: a closed loop of ``batch_size`` requests, 16 per unit of
batch size, lognormal prompts (mean 600, std 400 tokens), 512-token outputs, T = 0.7, Llama-3.1-8B on an
H100 SXM (roofline, vLLM's sampler times), EAGLE-3 with block verification and probabilistic drafts.
``--members N`` runs N such simulations (seeds 0..N-1) side by side in lockstep, as a study's group does.

    python benchmarks/serving_loop.py                        # B = 1, 32, 256 at K = 5, one member
    python benchmarks/serving_loop.py --batch-sizes 256 --members 16 --profile 25

Prints, per batch size, µs per member step (best and median of ``--repeats`` runs: total wall time over
the members' simulated steps) and the 1-minute load average.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time

import numpy as np
import torch

from spectune.config import SimulationDocument
from spectune.simulator._document_run import DocumentRun
from spectune.simulator._drive import EngineMember, drive
from spectune.simulator._loop import StepRows

_RATES = [0.8, 0.75, 0.7, 0.7, 0.65, 0.65, 0.6, 0.6]


def _document(batch: int, k: int, seed: int) -> SimulationDocument:
    return SimulationDocument.model_validate(
        {
            "kind": "simulation",
            "name": "serving-loop",
            "seed": seed,
            "speculative": {
                "method": "eagle3",
                "num_speculative_tokens": k,
                "rejection_sample_method": "block",
                "draft_sample_method": "probabilistic",
            },
            "acceptance": {"conditional_rates": _RATES[:k]},
            "workload": {
                "concurrency": batch,
                "num_requests": 16 * batch,
                "prompt_tokens": {
                    "distribution": "lognormal",
                    "mean_tokens": 600,
                    "std_tokens": 400,
                    "min_tokens": 16,
                    "max_tokens": 4096,
                },
                "output_tokens": 512,
                "temperature": 0.7,
                "vocab_size": 256,
                "max_num_seqs": 256,
            },
            "hardware": "h100-sxm",
            "target_model": "llama-3.1-8b",
            "simulation": {"device": "cpu", "baseline": False},
        }
    )


class _StubVerifier:
    """Emitted counts (accepted drafts + 1, int64) from a pool drawn before timing, handed out in turn."""

    def __init__(self, k: int, seed: int, pool: int = 1 << 20) -> None:
        rng = np.random.default_rng(seed)
        accepted = np.cumprod(rng.random((pool, k)) < np.asarray(_RATES[:k]), axis=1).sum(axis=1)
        self.counts = (accepted + 1).astype(np.int64)
        self.next = 0
        self.step_rows: dict[EngineMember, StepRows] = {}

    def start(self, step_rows: dict[EngineMember, StepRows]) -> None:
        self.step_rows = step_rows

    def close(self) -> None:
        pass

    def finish(self) -> dict[int, np.ndarray]:
        step_rows, self.step_rows = self.step_rows, {}
        out = {}
        for member, (ids, _, _) in step_rows.items():
            if self.next + len(ids) > len(self.counts):
                self.next = 0
            out[id(member)] = self.counts[self.next : self.next + len(ids)]
            self.next += len(ids)
        return out


def _run(batch: int, k: int, members: int, profiler: cProfile.Profile | None) -> tuple[float, int]:
    """(wall seconds of the driver, member steps simulated) for one lockstep group."""
    setups = [DocumentRun(_document(batch, k, seed), torch.device("cpu"), None) for seed in range(members)]
    group = [member for setup in setups for member in setup.members]
    verifier = _StubVerifier(k, seed=0)
    started = time.perf_counter()
    if profiler is not None:
        profiler.runcall(drive, group, verifier)
    else:
        drive(group, verifier)
    wall = time.perf_counter() - started
    steps = 0
    for member in group:
        assert member.trace is not None
        steps += member.trace.simulated_steps
    return wall, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="*", default=[1, 32, 256])
    parser.add_argument("--k", type=int, default=5, help="draft tokens a step (1-8)")
    parser.add_argument("--members", type=int, default=1, help="simulations side by side in lockstep")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="profile one more run: top N by own time")
    args = parser.parse_args()
    for batch in args.batch_sizes:
        per_step = []
        for _ in range(args.repeats):
            wall, steps = _run(batch, args.k, args.members, None)
            per_step.append(wall / steps * 1e6)
        sys.stdout.write(
            f"B={batch} K={args.k} members={args.members}: {steps} member steps, "
            f"{min(per_step):.1f} µs a member step (median {statistics.median(per_step):.1f}; "
            f"load average {os.getloadavg()[0]:.2f})\n"
        )
        if args.profile:
            profiler = cProfile.Profile()
            _run(batch, args.k, args.members, profiler)
            pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(args.profile)
        sys.stdout.flush()


if __name__ == "__main__":
    main()

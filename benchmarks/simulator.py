"""Simulator speed: steps per second of one simulation, with the floor beside it.

A row simulates a closed loop of ``batch_size`` requests at K draft tokens (temperature 0.7, 256-token
prompts and outputs) through the simulator's own backend for the device: the PyTorch twin on the CPU,
the Triton kernels on CUDA. It runs once to warm up (calibration, kernel compiles) and then
``--steps`` steps timed.

The floor is what a step's data costs at least:
- CUDA: the bytes of logits a step must read, once (the kernels read each row where it lies in the
  synthesizer's banks: nothing is written), divided by the measured device-to-device copy bandwidth
  (bytes read plus written per second). Before the kernels read the banks through row tables a step
  also wrote its rows into [R, K+1, V] buffers and read the banks to do it, and the floor counted
  twice the bytes (the 2026-12-01 rows);
- CPU: one ``torch.softmax`` over the same rows (one thread, as the simulator runs).

``--members N`` runs each row as N simulations in lockstep (the same document at seeds 1..N: one
kernel call a step over all their rows, as a study's points of one batch size run) and reports member
steps per second (steps of all members over the wall time); the floor is per member step.

``--adaptive-verification`` runs every row under vLLM's adaptive verification (K as K max; the estimate
ranks by the default ``confidence_auc``, as for these synthetic rates): the policy's per-step host work
(budget, estimates, admission) beside the engine's, the row's ``policy`` column says so.

``--profile`` prints where the host's time goes in the timed run (cProfile, the top functions by
own time; on CUDA the wait for the GPU shows in the read-back of the emitted counts).

    python benchmarks/simulator.py                       # the issue's rows for this machine's device
    python benchmarks/simulator.py --device cuda --rows 256,5,4096,block,probabilistic

Writes ``benchmarks/results/simulator-latest.csv`` (or ``--csv``; rows of the other kind of device are
kept): device, batch_size, K, V, method, draft, steps_per_s, floor_steps_per_s, peak_memory_mib,
warmup_s (first simulation: calibration and kernel compiles), steps, load_average_1m (other work on the
machine slows the CPU rows), date, commit, members, engine, policy.
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import os
import pstats
import resource
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import torch

CPU_ROWS = ["256,5,256,block,probabilistic", "32,3,256,standard,greedy", "1,5,256,block,probabilistic"]
CUDA_ROWS = [
    "256,5,128256,block,probabilistic",
    "256,5,4096,block,probabilistic",
    "256,5,128256,standard,greedy",
    "32,3,128256,block,probabilistic",
    "1,5,128256,block,probabilistic",
]
FIELDS = [
    "device",
    "batch_size",
    "K",
    "V",
    "method",
    "draft",
    "steps_per_s",
    "floor_steps_per_s",
    "peak_memory_mib",
    "warmup_s",
    "steps",
    "load_average_1m",
    "date",
    "commit",
    "members",
    "engine",
    "policy",
]


def _document(
    device: str,
    batch: int,
    k: int,
    vocab: int,
    method: str,
    draft: str,
    steps: int,
    seed: int = 1,
    engine: str = "auto",
    adaptive: bool = False,
):
    from spectune.config import SimulationDocument

    return SimulationDocument.model_validate(
        {
            "kind": "simulation",
            "name": "bench",
            "seed": seed,
            "speculative": {
                "method": "eagle3",
                "num_speculative_tokens": k,
                "rejection_sample_method": method,
                "draft_sample_method": draft,
                **({"enable_adaptive_verification": True} if adaptive else {}),
            },
            "acceptance": {"conditional_rates": _RATES[:k]},
            "workload": {
                "concurrency": batch,
                "num_requests": _requests_for(batch, k, steps),
                "prompt_tokens": 256,
                "output_tokens": 256,
                "temperature": 0.7,
                "vocab_size": vocab,
            },
            "hardware": "h100-sxm",
            "target_model": "llama-3.1-8b",
            "simulation": {"device": device, "max_steps": 2 * steps, "baseline": False, "engine": engine},
        }
    )


_RATES = [0.8, 0.75, 0.7, 0.7, 0.65, 0.65, 0.6, 0.6]  # conditional acceptance by position


def _requests_for(batch: int, k: int, steps: int) -> int:
    """Requests a closed loop of ``batch`` serves in about ``steps`` steps (256-token outputs; the mean
    tokens a step from the rates' closed form), so the run ends by itself: an engine verifying ahead
    verifies requests to their end, and a run cut at max_steps would count rows no step read."""
    tokens_per_step, accepted = 1.0, 1.0
    for rate in _RATES[:k]:
        accepted *= rate
        tokens_per_step += accepted
    return max(batch, round(batch * steps * tokens_per_step / 255))


def _copy_bandwidth(device: torch.device) -> float:
    """Bytes read plus written per second by a large device-to-device copy (median of 20)."""
    source = torch.randn(256 * 2**20, device=device)  # 1 GiB
    target = torch.empty_like(source)
    times = []
    for _ in range(22):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        target.copy_(source)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * source.numel() * 4 / sorted(times[2:])[len(times[2:]) // 2]


def _cpu_floor(batch: int, k: int, vocab: int, draft: str) -> float:
    """Softmaxes per second over a step's rows, one thread (the simulator's), best of 5 rounds of wall time."""
    rows = batch * (k + 1 + (k if draft == "probabilistic" else 0))
    logits = torch.randn(rows, vocab)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.softmax(logits, dim=-1)
        repeats, best = 20, float("inf")
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(repeats):
                torch.softmax(logits, dim=-1)
            best = min(best, (time.perf_counter() - started) / repeats)
    finally:
        torch.set_num_threads(previous)
    return 1.0 / best


def _compiled_variants() -> int | None:
    """Compiled Triton kernel variants in this process (None where Triton's internals differ)."""
    try:
        from spectune.kernels import _decision, _residual_kernel, _small_grid, _verify_kernel

        functions = [
            _verify_kernel._verify_kernel,
            _decision._decide_kernel,
            _residual_kernel._residual_kernel,
            _residual_kernel._decide_residual_kernel,
            _small_grid._small_grid_kernel,
        ]
        return sum(len(caches[0]) for fn in functions for caches in fn.device_caches.values())
    except (AttributeError, ImportError, TypeError, IndexError):
        return None


def _call_rows(text: str) -> tuple[int, ...]:
    """``--call-rows``: one or two comma-separated row counts."""
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"SMALL[,LARGE] row counts, got {text!r}") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rows", nargs="*", help="batch,K,V,method,draft (default: the issue's rows for the device)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--members", type=int, default=1, help="simulations per row, in lockstep (seeds 1..N)")
    parser.add_argument("--csv", type=Path, default=Path(__file__).parent / "results" / "simulator-latest.csv")
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N", help="print the timed run's top N functions by own time"
    )
    parser.add_argument(
        "--step-by-step", action="store_true", help="CUDA: verify every step as the loop reaches it, not ahead"
    )
    parser.add_argument(
        "--call-rows",
        type=_call_rows,
        metavar="SMALL[,LARGE]",
        help="CUDA: the call sizes of the engine verifying ahead (default: spectune's; one size: calls of that size only)",
    )
    parser.add_argument(
        "--adaptive-verification", action="store_true", help="every row under vLLM's adaptive verification"
    )
    parser.add_argument(
        "--commit", help="the commit measured (default: git's HEAD here; give it for a copy outside git)"
    )
    args = parser.parse_args()
    from spectune.simulator import _ahead, simulate_many

    option = "step" if args.step_by_step else "auto"  # simulation.engine
    if args.call_rows:
        small, large = args.call_rows[0], args.call_rows[-1]
        if len(args.call_rows) > 2 or any(rows <= 0 or rows % (8 * 16) for rows in args.call_rows):
            parser.error(f"--call-rows: one or two positive multiples of 128 (8 lanes of 16), got {args.call_rows}")
        default_rows = _ahead.ahead_call_rows
        _ahead.ahead_call_rows = lambda on: (small, large) if on.type == "cuda" else default_rows(on)

    commit = (
        args.commit
        or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    )
    device = torch.device(args.device)
    engine = "step" if args.step_by_step or device.type != "cuda" else "ahead"
    if engine == "ahead" and args.call_rows:
        engine = f"ahead {small}/{large}"
    adaptive = args.adaptive_verification
    policy = "adaptive_verification" if adaptive else ""  # the rows' policy column
    bandwidth = _copy_bandwidth(device) if device.type == "cuda" else None
    rows = []
    for spec in args.rows or (CUDA_ROWS if device.type == "cuda" else CPU_ROWS):
        batch, k, vocab, method, draft = spec.split(",")
        batch, k, vocab = int(batch), int(k), int(vocab)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        started = time.perf_counter()
        simulate_many(  # calibration, compiles
            [
                _document(args.device, batch, k, vocab, method, draft, 20, seed, option, adaptive)
                for seed in range(1, args.members + 1)
            ]
        )
        warmup_s = time.perf_counter() - started
        variants = _compiled_variants() if device.type == "cuda" else None
        documents = [
            _document(args.device, batch, k, vocab, method, draft, args.steps, seed, option, adaptive)
            for seed in range(1, args.members + 1)
        ]
        profiler = cProfile.Profile() if args.profile else None
        timed = time.perf_counter()
        results = profiler.runcall(simulate_many, documents) if profiler else simulate_many(documents)
        wall_s = time.perf_counter() - timed
        steps = sum(r.simulated_steps for r in results)
        steps_per_s = steps / wall_s if args.members > 1 else results[0].simulated_steps / results[0].wall_time_s
        kernel_share = sum(r.kernel_wall_time_s for r in results) / (
            wall_s if args.members > 1 else results[0].wall_time_s
        )
        if device.type == "cuda":
            assert bandwidth is not None
            logit_bytes = batch * (k + 1 + (k if draft == "probabilistic" else 0)) * vocab * 4
            floor = bandwidth / logit_bytes  # read once by the kernels
            peak_mib = torch.cuda.max_memory_allocated(device) / 2**20
            new_variants = _compiled_variants()
            recompiled = None if variants is None or new_variants is None else new_variants - variants
        else:
            floor = _cpu_floor(batch, k, vocab, draft)
            peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            recompiled = None
        row = {
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu x{os.cpu_count()}",
            "batch_size": batch,
            "K": k,
            "V": vocab,
            "method": method,
            "draft": draft,
            "steps_per_s": round(steps_per_s, 1),
            "floor_steps_per_s": round(floor, 1),
            "peak_memory_mib": round(peak_mib),
            "warmup_s": round(warmup_s, 2),
            "steps": steps,
            "load_average_1m": round(os.getloadavg()[0], 2),
            "date": date.today().isoformat(),
            "commit": commit,
            "members": args.members,
            "engine": engine,
            "policy": policy,
        }
        rows.append(row)
        members = f" x{args.members} in lockstep" if args.members > 1 else ""
        members += f" ({row['engine']}{', adaptive verification' if adaptive else ''})"
        extra = f", compiles during the timed run: {recompiled}" if recompiled is not None else ""
        sys.stdout.write(
            f"{row['device']}: B={batch} K={k} V={vocab} {method}/{draft}{members}: {steps_per_s:,.0f} steps/s "
            f"(floor {floor:,.0f}; kernel {kernel_share:.0%} of the wall time; "
            f"warm-up {warmup_s:.1f} s{extra})\n"
        )
        if profiler:
            pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(args.profile)
        sys.stdout.flush()
    # Rows of the other kind of device or policy stay: the file holds the latest of each together.
    kept = []
    if args.csv.exists():
        with args.csv.open(newline="") as handle:
            kept = [
                r
                for r in csv.DictReader(handle)
                if r["device"].startswith("cpu") != (device.type == "cpu") or r.get("policy", "") != policy
            ]
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    with args.csv.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(kept + rows)


if __name__ == "__main__":
    main()

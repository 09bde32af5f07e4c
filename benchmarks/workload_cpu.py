"""Time the workload's per-step logit generation (and the one-off calibration) on the CPU.

Usage: python benchmarks/workload_cpu.py [--steps 300] [--out benchmarks/results/workload-cpu-DATE.json]

Each case builds a ``LogitSynthesizer`` for a K-position profile at two temperatures (0 and 1, half
the requests each) and times ``generate`` for R requests: target logits [R, K+1, V], draft tokens
[R, K] and, with probabilistic drafting, draft logits [R, K, V]. Reported: median and 10th/90th
percentile wall time per step (fresh output tensors, and with ``out=`` reusing the previous step's),
and construction time with a cold and a warm calibration cache.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

import torch

from spectune.workload import LogitSynthesizer, clear_calibration_cache

CASES = [(64, 4, 4096), (256, 7, 4096)]
PROFILE = [0.8, 0.75, 0.7, 0.68, 0.66, 0.64, 0.62]  # conditional rates, first K used
TEMPERATURES = [0.0, 1.0]


def time_case(num_requests: int, k: int, vocab_size: int, draft_sample_method: str, steps: int) -> dict:
    clear_calibration_cache()
    started = time.perf_counter()
    LogitSynthesizer(PROFILE[:k], TEMPERATURES, vocab_size=vocab_size, draft_sample_method=draft_sample_method)
    cold_s = time.perf_counter() - started
    started = time.perf_counter()
    synthesizer = LogitSynthesizer(
        PROFILE[:k], TEMPERATURES, vocab_size=vocab_size, draft_sample_method=draft_sample_method
    )
    warm_s = time.perf_counter() - started
    generator = torch.Generator().manual_seed(0)
    index = torch.arange(num_requests, dtype=torch.int64) % len(TEMPERATURES)
    for _ in range(20):
        synthesizer.generate(index, generator)
    times_ms, reuse_ms = [], []
    for _ in range(steps):
        started = time.perf_counter()
        inputs = synthesizer.generate(index, generator)
        times_ms.append((time.perf_counter() - started) * 1e3)
        del inputs
    buffers = synthesizer.generate(index, generator)
    for _ in range(steps):
        started = time.perf_counter()
        synthesizer.generate(index, generator, out=buffers)
        reuse_ms.append((time.perf_counter() - started) * 1e3)
    deciles = statistics.quantiles(times_ms, n=10)
    reuse_deciles = statistics.quantiles(reuse_ms, n=10)
    output_bytes = num_requests * (k + 1) * vocab_size * 4 + num_requests * k * 8
    if draft_sample_method == "probabilistic":
        output_bytes += num_requests * k * vocab_size * 4
    return {
        "num_requests": num_requests,
        "num_speculative_tokens": k,
        "vocab_size": vocab_size,
        "draft_sample_method": draft_sample_method,
        "step_ms_median": round(statistics.median(times_ms), 3),
        "step_ms_p10": round(deciles[0], 3),
        "step_ms_p90": round(deciles[-1], 3),
        "reused_out_step_ms_median": round(statistics.median(reuse_ms), 3),
        "reused_out_step_ms_p10": round(reuse_deciles[0], 3),
        "reused_out_step_ms_p90": round(reuse_deciles[-1], 3),
        "output_mib_per_step": round(output_bytes / 2**20, 2),
        "build_s_cold_calibration": round(cold_s, 2),
        "build_s_warm_calibration": round(warm_s, 3),
    }


def machine() -> dict:
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "logical_cpus": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
    }


def commit() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty.strip() else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    load_before = os.getloadavg()
    results = [time_case(r, k, v, mode, args.steps) for (r, k, v) in CASES for mode in ("greedy", "probabilistic")]
    # The machine may be shared: the load average says how much else ran during the timing.
    load = {
        "load_average_1min_before": round(load_before[0], 2),
        "load_average_1min_after": round(os.getloadavg()[0], 2),
    }
    report = {
        "benchmark": "workload_cpu",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit(),
        "machine": machine() | load,
        "temperatures": TEMPERATURES,
        "steps": args.steps,
        "results": results,
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()

"""Simulator speed: steps per second of the serving loop with real rejection sampling.

CPU (the issue's bar): 64 requests in flight, 1,000 steps, K = 4, standard verification at
temperature 0.8, V = 4096, through the PyTorch twin. GPU: 256 requests, K = 7, V = 128256, through
the Triton kernels, reporting the kernels' share of the wall time.

    python benchmarks/simulator.py --preset cpu      # or --preset gpu on a CUDA machine
Prints one JSON line per run (and a short table); commit the output under benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from datetime import date

PRESETS = {
    "cpu": {"concurrency": 64, "k": 4, "vocab_size": 4096, "steps": 1000, "device": "cpu", "backend": "reference"},
    "gpu": {"concurrency": 256, "k": 7, "vocab_size": 128256, "steps": 1000, "device": "cuda", "backend": "triton"},
}


def _document(preset: dict, seed: int):
    from spectune.config import SimulationDocument

    return SimulationDocument.model_validate(
        {
            "kind": "simulation",
            "name": "bench",
            "seed": seed,
            "speculative": {"method": "eagle3", "num_speculative_tokens": preset["k"]},
            "acceptance": {"conditional_rates": [0.8, 0.75, 0.7, 0.7, 0.65, 0.65, 0.6][: preset["k"]]},
            "workload": {
                "concurrency": preset["concurrency"],
                "num_requests": preset["concurrency"] * 40,
                "prompt_tokens": 256,
                "output_tokens": 256,
                "temperature": 0.8,
                "vocab_size": preset["vocab_size"],
            },
            "hardware": "h100-sxm",
            "target_model": "llama-3.1-8b",
            "simulation": {"device": preset["device"], "kernel_backend": preset["backend"], "max_steps": preset["steps"], "baseline": False},
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from spectune.simulator import simulate

    preset = PRESETS[args.preset]
    warm = time.perf_counter()
    simulate(_document({**preset, "steps": 5}, seed=0))  # calibration (cached per process) and warm-up
    setup_s = time.perf_counter() - warm
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    rows = []
    for repeat in range(args.repeats):
        result = simulate(_document(preset, seed=repeat + 1))
        rows.append(
            {
                "date": date.today().isoformat(),
                "commit": commit,
                "machine": platform.processor() or platform.machine(),
                "cpus": os.cpu_count(),
                "load_average_1m": os.getloadavg()[0],
                "preset": args.preset,
                **{k: preset[k] for k in ("concurrency", "k", "vocab_size", "backend", "device")},
                "simulated_steps": result.simulated_steps,
                "wall_time_s": round(result.wall_time_s, 3),
                "steps_per_s": round(result.simulated_steps / result.wall_time_s, 1),
                "kernel_share": round(result.kernel_wall_time_s / result.wall_time_s, 3),
                "synthesis_share": round(result.synthesis_wall_time_s / result.wall_time_s, 3),
                "first_run_setup_s": round(setup_s, 2),
                "mean_acceptance_length": round(result.mean_acceptance_length, 3),
            }
        )
        print(json.dumps(rows[-1]))
    best = min(rows, key=lambda r: r["wall_time_s"])
    print(f"\n{args.preset}: {best['simulated_steps']} steps in {best['wall_time_s']:.2f} s (best of {args.repeats}); "
          f"{best['steps_per_s']:.0f} steps/s; rejection kernel {best['kernel_share']:.0%}, logit synthesis "
          f"{best['synthesis_share']:.0%} of the wall time")


if __name__ == "__main__":
    main()

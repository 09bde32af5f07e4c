"""CPU lockstep: the wall time of a round's points of one batch size run in groups of 1, 2, 4 or 8.

The decision study's best combo (eagle3, block, probabilistic) at K = 1..8, at the batch sizes where
a group's rows grow past the CPU's caches. Each K is a separate simulation; a group shares the twin's
per-step work. The cap on a group's requests a step (``simulator._groups.CPU_GROUP_SLOTS``) is lifted
here, so that every group size runs as asked.

    python benchmarks/cpu_lockstep.py [--batch-sizes 64,128,256]

Prints a markdown table (seconds for the 8 simulations, per group size); run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from datetime import date
from pathlib import Path

from spectune.config import load_document
from spectune.simulator import _groups
from spectune.study._document import SimulationEvaluator, space_from_document

STUDY = Path(__file__).resolve().parent.parent / "studies" / "decision.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", default="64,128,256")
    parser.add_argument("--groups", default="1,2,4,8")
    args = parser.parse_args()
    _groups.CPU_GROUP_SLOTS = 1 << 30  # measure every group size, past the cap too
    document = load_document(STUDY).model
    space = space_from_document(document)
    evaluator = SimulationEvaluator(document)
    label = "eagle3/block/probabilistic"
    evaluator.evaluate_many([space.point(16, label, 4)])  # calibration and imports out of the timings
    sizes = [int(g) for g in args.groups.split(",")]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"{date.today()} {commit}, load {os.getloadavg()[0]:.2f}; seconds for K = 1..8, {label}\n")
    print("| batch size | " + " | ".join(f"groups of {g}" for g in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for batch_size in (int(b) for b in args.batch_sizes.split(",")):
        points = [space.point(batch_size, label, k) for k in range(1, 9)]
        cells = []
        for size in sizes:
            start = time.perf_counter()
            for i in range(0, len(points), size):
                evaluator.evaluate_many(points[i : i + size])
            cells.append(f"{time.perf_counter() - start:.2f}")
        print(f"| {batch_size} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()

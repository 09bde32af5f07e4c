"""The search's own time: how long a study takes when its simulations cost a fixed few milliseconds.

A structured search runs in rounds whose trials decide their points one after another (each waits
until the trials before it hold theirs), so besides its simulations a round costs its trials'
decisions and the polls between them. This runs the structured search over a decision-sized space
(9 batch sizes, 4 combos, K up to 8) on the test suite's closed-form evaluator, each point sleeping
``--delay`` seconds in place of a simulation, with ``--workers`` processes on a local journal, and
prints each run's wall time (the first includes starting the processes).

    python benchmarks/search_overhead.py --workers 6 --repeats 3
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import optuna

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "study"))
from study_doubles import SyntheticEvaluator, fingerprint, make_space  # noqa: E402

from spectune.study import run_study  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds each point sleeps in place of a simulation")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = make_space(batch_sizes=(1, 2, 4, 8, 16, 32, 64, 128, 256), max_k=8)
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as folder:
            started = time.perf_counter()
            run = run_study(
                space, SyntheticEvaluator(delay_s=args.delay), fingerprint(), storage=f"{folder}/s.journal",
                workers=args.workers, strategy="structured",
            )  # fmt: skip
            print(
                f"workers {args.workers}: {time.perf_counter() - started:.2f} s, {run.completed_trials} trials",
                flush=True,
            )


if __name__ == "__main__":
    main()

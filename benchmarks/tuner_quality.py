"""How good is the study's structured search? Its recommendation against the exhaustive optimum.

Usage: python benchmarks/tuner_quality.py [--study studies/tuner-quality.yaml] [--seeds 0 1 2 3 4]
       [--workers 2] [--work DIR] [--out benchmarks/results/tuner-quality-DATE.json]

For each seed (the study's simulation seed: a different noise realisation of every simulation):
1. the exhaustive study -- every point of the space simulated, through ``run_study`` with the
   exhaustive sampler -- gives the table of throughputs;
2. the structured search runs until it converges, with the default settings, on an evaluator that
   looks each point up in that table (a simulation is deterministic for its seed, so a lookup returns
   exactly what simulating the point again would; the script re-simulates a few points to check);
3. the structured search again with a budget of 25 % of the space, and TPE (seeded) with the number
   of trials the converged structured search used.

Quality = the aggregate over buckets (weighted geometric mean, as the recommendation ranks combos)
of the table throughput of the recommended combo at its chosen K per bucket, divided by
- the exhaustive optimum: the best combo with its best K at every bucket, by raw table values (it
  chases noise, and the recommendation deliberately gives up ties to the smaller K), and
- the exhaustive recommendation: what the same recommendation rule picks from the whole table.
Reported per seed and as the median over seeds, with the evaluations (distinct simulations) used.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna

from spectune.config import load_document
from spectune.study import (
    Point,
    SimulationEvaluator,
    StudySpace,
    document_fingerprint,
    load_outcome,
    run_study,
    space_from_document,
)

REPO = Path(__file__).resolve().parents[1]


class TableEvaluator:
    """Answers a point from an exhaustive table of simulations (picklable)."""

    def __init__(self, table: Mapping[str, Mapping[str, Any]]) -> None:
        self.table = dict(table)

    def __call__(self, point: Point) -> Mapping[str, Any]:
        return self.table[point.key]


def aggregate(space: StudySpace, table: Mapping[str, Mapping[str, Any]], combo: str, ks: list[int]) -> float:
    """Weighted geometric mean over buckets of the table throughput at (combo, K per bucket)."""
    total = 0.0
    for batch_size, k, weight in zip(space.batch_sizes, ks, space.weights):
        total += weight * math.log(table[space.point(batch_size, combo, k).key]["throughput_tokens_per_s"])
    return math.exp(total)


def exhaustive_optimum(space: StudySpace, table: Mapping[str, Mapping[str, Any]]) -> tuple[float, str, list[int]]:
    best = (0.0, "", [])
    for combo in space.combos:
        ks = [
            max(space.k_values, key=lambda k: table[space.point(b, combo.label, k).key]["throughput_tokens_per_s"])
            for b in space.batch_sizes
        ]
        value = aggregate(space, table, combo.label, ks)
        if value > best[0]:
            best = (value, combo.label, ks)
    return best


def searched(space: StudySpace, table: dict, fingerprint: dict, storage: str, **options: Any) -> dict[str, Any]:
    started = time.perf_counter()
    run_study(space, TableEvaluator(table), fingerprint, storage=storage, **options)
    outcome = load_outcome(storage, space.name)
    recommendation = outcome.recommendation
    ks = [c.num_speculative_tokens for c in recommendation.choices]
    return {
        "evaluations": outcome.num_evaluations,
        "trials": sum(t.state == "COMPLETE" for t in outcome.trials),
        "combo": recommendation.combo.label,
        "ks": ks,
        "aggregate_tokens_per_s": aggregate(space, table, recommendation.combo.label, ks),
        "search_wall_s": round(time.perf_counter() - started, 2),
    }


def run_seed(study: Path, seed: int, workers: int, work: Path) -> dict[str, Any]:
    document = load_document(study, expect="study").model.model_copy(update={"seed": seed})
    space = space_from_document(document)
    fingerprint = document_fingerprint(document)
    exhaustive_storage = str(work / f"exhaustive-seed{seed}.journal")
    started = time.perf_counter()
    run_study(space, SimulationEvaluator(document), fingerprint, storage=exhaustive_storage, strategy="exhaustive", workers=workers)
    exhaustive_wall_s = time.perf_counter() - started
    outcome = load_outcome(exhaustive_storage, space.name)
    table = {point.key: evaluation.metrics for point, evaluation in outcome.completed.items()}
    assert len(table) == space.size, f"exhaustive study holds {len(table)} of {space.size} points"
    evaluator = SimulationEvaluator(document)
    for point in list(space.points())[:: max(1, space.size // 3)]:  # a simulation is deterministic for its seed
        again = evaluator(point)["throughput_tokens_per_s"]
        assert again == table[point.key]["throughput_tokens_per_s"], f"{point.key}: {again} != table"
    optimum, optimum_combo, optimum_ks = exhaustive_optimum(space, table)
    exhaustive_choice = outcome.recommendation
    results = {
        "seed": seed,
        "space_size": space.size,
        "exhaustive_wall_s": round(exhaustive_wall_s, 1),
        "optimum": {"aggregate_tokens_per_s": optimum, "combo": optimum_combo, "ks": optimum_ks},
        "exhaustive_recommendation": {
            "combo": exhaustive_choice.combo.label,
            "ks": [c.num_speculative_tokens for c in exhaustive_choice.choices],
            "aggregate_tokens_per_s": aggregate(
                space, table, exhaustive_choice.combo.label, [c.num_speculative_tokens for c in exhaustive_choice.choices]
            ),
        },
    }
    results["structured"] = searched(space, table, fingerprint, str(work / f"structured-seed{seed}.journal"), strategy="structured", seed=seed)
    budget = space.size // 4
    results["structured_25pct_budget"] = searched(
        space, table, fingerprint, str(work / f"budget-seed{seed}.journal"), strategy="structured", n_trials=budget, seed=seed
    )
    results["tpe_same_trials"] = searched(
        space, table, fingerprint, str(work / f"tpe-seed{seed}.journal"), strategy="tpe",
        n_trials=results["structured"]["evaluations"], seed=seed,
    )  # fmt: skip
    reference = results["exhaustive_recommendation"]["aggregate_tokens_per_s"]
    for name in ("exhaustive_recommendation", "structured", "structured_25pct_budget", "tpe_same_trials"):
        results[name]["ratio_to_optimum"] = results[name]["aggregate_tokens_per_s"] / optimum
        results[name]["ratio_to_exhaustive_recommendation"] = results[name]["aggregate_tokens_per_s"] / reference
    return results


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", type=Path, default=REPO / "studies" / "tuner-quality.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--workers", type=int, default=2, help="processes for the exhaustive simulations")
    parser.add_argument("--work", type=Path, default=None, help="folder for the journals (default: a temporary one)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    work = args.work or Path(tempfile.mkdtemp(prefix="tuner-quality-"))
    work.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    per_seed = []
    for seed in args.seeds:
        per_seed.append(run_seed(args.study, seed, args.workers, work))
        row = per_seed[-1]
        print(
            f"seed {seed}: structured {row['structured']['evaluations']}/{row['space_size']} evaluations, "
            f"{row['structured']['ratio_to_optimum']:.4f} of the optimum, "
            f"{row['structured']['ratio_to_exhaustive_recommendation']:.4f} of the exhaustive recommendation "
            f"(which is {row['exhaustive_recommendation']['ratio_to_optimum']:.4f} of the optimum); 25% budget "
            f"{row['structured_25pct_budget']['ratio_to_optimum']:.4f}; TPE {row['tpe_same_trials']['ratio_to_optimum']:.4f}",
            flush=True,
        )

    def median(name: str, key: str) -> float:
        return statistics.median(row[name][key] for row in per_seed)

    summary: dict[str, Any] = {
        name: {
            "median_ratio_to_optimum": median(name, "ratio_to_optimum"),
            "median_ratio_to_exhaustive_recommendation": median(name, "ratio_to_exhaustive_recommendation"),
            "median_evaluations": median(name, "evaluations"),
        }
        for name in ("structured", "structured_25pct_budget", "tpe_same_trials")
    }
    summary["exhaustive_recommendation"] = {"median_ratio_to_optimum": median("exhaustive_recommendation", "ratio_to_optimum")}
    summary["space_size"] = per_seed[0]["space_size"]
    summary["median_evaluation_share"] = summary["structured"]["median_evaluations"] / summary["space_size"]
    today = datetime.date.today().isoformat()
    report = {
        "benchmark": "tuner_quality",
        "date": today,
        "commit": _commit(),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_average_before": load_before, "load_average_after": os.getloadavg()},
        "study": str(args.study.relative_to(REPO) if args.study.is_relative_to(REPO) else args.study),
        "summary": summary,
        "per_seed": per_seed,
    }
    out = args.out or REPO / "benchmarks" / "results" / f"tuner-quality-{today}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

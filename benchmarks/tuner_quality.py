"""How good and how stable is the study's structured search? Its recommendation against an exhaustive study.

Usage: python benchmarks/tuner_quality.py [--study benchmarks/decision-scaled.yaml] [--seeds 0 1 2 3 4]
       [--workers 1] [--work DIR] [--out benchmarks/results/tuner-quality-DATE.json] [--no-tpe]

``--study studies/decision.yaml`` runs the full decision-sized study (9 batch sizes, 512-token outputs;
about ten minutes a simulation sweep on a 2-core CPU, hours for the exhaustive tables of five seeds).

For each seed (the study's simulation seed: a different noise realisation of every simulation):
1. the exhaustive study -- every point of the space simulated, through ``run_study`` with the
   exhaustive sampler -- gives the table of throughputs (kept in ``--work``: a rerun reuses it);
2. the structured search runs until it converges, with the default settings, on an evaluator that
   looks each point up in that table (a simulation is deterministic for its seed, so a lookup returns
   exactly what simulating the point again would; the script re-simulates a few points to check) and
   simulates the points adaptive precision asks for (more requests: not in the table);
3. optionally TPE (seeded) with the number of trials the structured search used.

Quality = the aggregate over buckets (weighted geometric mean, as the recommendation ranks combos)
of the table throughput of the recommended combo at its chosen K per bucket, divided by
- the exhaustive optimum: the best combo with its best K at every bucket, by raw table values (it
  chases noise, and the recommendation deliberately gives up ties to the smaller K), and
- the exhaustive recommendation: what the same recommendation rule picks from the whole table.
Cost = the simulations the search ran, a refined one counted as many times as it has the requests
(``simulation_cost``), and their simulated steps, against the exhaustive study's. Stability, over the seeds: the combo each seed
recommends, each bucket's K spread (largest minus smallest K), whether each table is non-increasing.
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
    """Answers a point from an exhaustive table of simulations; simulates refined points (picklable)."""

    def __init__(self, table: Mapping[str, Mapping[str, Any]], simulate: SimulationEvaluator) -> None:
        self.table = dict(table)
        self.simulate = simulate

    def __call__(self, point: Point) -> Mapping[str, Any]:
        if point.key not in self.table:
            self.table[point.key] = self.simulate(point)
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


def non_increasing(ks: list[int]) -> bool:
    return all(a >= b for a, b in zip(ks, ks[1:]))


def _steps(metrics: Mapping[str, Any] | None) -> int:
    return int((metrics or {}).get("simulated_steps") or 0)


def searched(space: StudySpace, evaluator: TableEvaluator, fingerprint: dict, storage: str, **options: Any) -> dict[str, Any]:
    started = time.perf_counter()
    run_study(space, evaluator, fingerprint, storage=storage, **options)
    outcome = load_outcome(storage, space.name)
    recommendation = outcome.recommendation
    ks = [c.num_speculative_tokens for c in recommendation.choices]
    ran = [t.point for t in outcome.trials if t.state == "COMPLETE" and t.duplicate_of is None and t.point is not None]
    return {
        "evaluations": len(ran),
        "refined_evaluations": sum(1 for p in ran if p.refinement),
        "simulation_cost": sum(p.requests_factor for p in ran),
        "simulated_steps": sum(_steps(t.metrics) for t in outcome.trials if t.state == "COMPLETE" and t.duplicate_of is None),
        "trials": sum(t.state == "COMPLETE" for t in outcome.trials),
        "combo": recommendation.combo.label,
        "ks": ks,
        "tie_sets": [c.ties.describe() if c.ties is not None else None for c in recommendation.choices],
        "schedule": [list(row) for row in recommendation.schedule],
        "non_increasing": non_increasing(ks),
        "notes": list(recommendation.notes),
        "aggregate_tokens_per_s": aggregate(space, evaluator.table, recommendation.combo.label, ks),
        "search_wall_s": round(time.perf_counter() - started, 2),
    }


def run_seed(study: Path, seed: int, workers: int, work: Path, tpe: bool) -> dict[str, Any]:
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
    exhaustive_ks = [c.num_speculative_tokens for c in exhaustive_choice.choices]
    results: dict[str, Any] = {
        "seed": seed,
        "space_size": space.size,
        "exhaustive_wall_s": round(exhaustive_wall_s, 1),
        "optimum": {"aggregate_tokens_per_s": optimum, "combo": optimum_combo, "ks": optimum_ks},
        "exhaustive_recommendation": {
            "combo": exhaustive_choice.combo.label,
            "ks": exhaustive_ks,
            "tie_sets": [c.ties.describe() if c.ties is not None else None for c in exhaustive_choice.choices],
            "non_increasing": non_increasing(exhaustive_ks),
            "aggregate_tokens_per_s": aggregate(space, table, exhaustive_choice.combo.label, exhaustive_ks),
        },
    }
    lookup = TableEvaluator(table, evaluator)
    results["structured"] = searched(space, lookup, fingerprint, str(work / f"structured-seed{seed}.journal"), strategy="structured", seed=seed)
    names = ["exhaustive_recommendation", "structured"]
    if tpe:
        results["tpe_same_trials"] = searched(
            space, lookup, fingerprint, str(work / f"tpe-seed{seed}.journal"), strategy="tpe",
            n_trials=results["structured"]["evaluations"], seed=seed,
        )  # fmt: skip
        names.append("tpe_same_trials")
    reference = results["exhaustive_recommendation"]["aggregate_tokens_per_s"]
    for name in names:
        results[name]["ratio_to_optimum"] = results[name]["aggregate_tokens_per_s"] / optimum
        results[name]["ratio_to_exhaustive_recommendation"] = results[name]["aggregate_tokens_per_s"] / reference
    results["structured"]["cost_share_of_exhaustive"] = results["structured"]["simulation_cost"] / space.size
    exhaustive_steps = sum(_steps(metrics) for metrics in table.values())
    results["structured"]["steps_share_of_exhaustive"] = results["structured"]["simulated_steps"] / exhaustive_steps
    return results


def stability(space_batch_sizes: list[int], per_seed: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """Across seeds: the combos recommended, each bucket's K spread, monotone tables."""
    combos = [row[name]["combo"] for row in per_seed]
    ks = [row[name]["ks"] for row in per_seed]
    same_combo = [k for c, k in zip(combos, ks) if c == max(set(combos), key=combos.count)]
    spread = [max(col) - min(col) for col in zip(*same_combo)]
    return {
        "combos": combos,
        "same_combo_every_seed": len(set(combos)) == 1,
        "ks_per_seed": ks,
        "k_spread_per_bucket": dict(zip(map(str, space_batch_sizes), spread)),
        "largest_k_spread": max(spread),
        "non_increasing_every_seed": all(row[name]["non_increasing"] for row in per_seed),
    }


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", type=Path, default=REPO / "benchmarks" / "decision-scaled.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--workers", type=int, default=1, help="processes for the exhaustive simulations")
    parser.add_argument("--work", type=Path, default=None, help="folder for the journals (default: a temporary one)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--no-tpe", dest="tpe", action="store_false", help="skip TPE with the structured search's trials")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    work = args.work or Path(tempfile.mkdtemp(prefix="tuner-quality-"))
    work.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    per_seed = []
    for seed in args.seeds:
        per_seed.append(run_seed(args.study, seed, args.workers, work, args.tpe))
        row = per_seed[-1]["structured"]
        print(
            f"seed {seed}: {row['combo']} K {row['ks']} ({'non-increasing' if row['non_increasing'] else 'RISES'}); "
            f"{row['evaluations']} simulations ({row['refined_evaluations']} refined), cost {row['simulation_cost']} = "
            f"{row['cost_share_of_exhaustive']:.0%} of exhaustive ({row['steps_share_of_exhaustive']:.0%} of its simulated steps); "
            f"{row['ratio_to_optimum']:.4f} of the optimum, "
            f"{row['ratio_to_exhaustive_recommendation']:.4f} of the exhaustive recommendation",
            flush=True,
        )

    def median(name: str, key: str) -> float:
        return statistics.median(row[name][key] for row in per_seed)

    names = ["structured"] + (["tpe_same_trials"] if args.tpe else [])
    summary: dict[str, Any] = {
        name: {
            "median_ratio_to_optimum": median(name, "ratio_to_optimum"),
            "worst_ratio_to_optimum": min(row[name]["ratio_to_optimum"] for row in per_seed),
            "median_ratio_to_exhaustive_recommendation": median(name, "ratio_to_exhaustive_recommendation"),
            "median_evaluations": median(name, "evaluations"),
            "median_simulation_cost": median(name, "simulation_cost"),
        }
        for name in names
    }
    summary["exhaustive_recommendation"] = {"median_ratio_to_optimum": median("exhaustive_recommendation", "ratio_to_optimum")}
    summary["space_size"] = per_seed[0]["space_size"]
    summary["median_cost_share_of_exhaustive"] = summary["structured"]["median_simulation_cost"] / summary["space_size"]
    summary["median_steps_share_of_exhaustive"] = statistics.median(row["structured"]["steps_share_of_exhaustive"] for row in per_seed)
    batch_sizes = load_document(args.study, expect="study").model.schedule.batch_sizes
    summary["stability"] = {name: stability(batch_sizes, per_seed, name) for name in ("structured", "exhaustive_recommendation")}
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

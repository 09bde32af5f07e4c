"""How good and how stable is the study's structured search? Its recommendation against an exhaustive study.

Usage: python benchmarks/tuner_quality.py [--study benchmarks/decision-scaled.yaml] [--seeds 0 1 2 3 4]
       [--jobs 1] [--device cpu] [--work DIR] [--out benchmarks/results/tuner-quality-DATE.json] [--no-tpe]
       [--tables-only]

``--study studies/decision.yaml`` runs the full decision-sized study (9 batch sizes, 512-token outputs;
the exhaustive tables of five seeds take about an hour of one CPU core each: ``--jobs 16`` on a
16-core machine, ``--tables-only`` there and the rest anywhere with the tables copied into ``--work``).

For each seed (the study's simulation seed: a different noise realisation of every simulation):
1. for the ``--exhaustive-seeds`` (default: all), the exhaustive table -- every point of the space
   simulated, a bucket (or, from batch size 64, a combo of it) side by side per job, ``--jobs`` jobs at
   a time, each on one thread -- kept in ``--work`` as ``table-seed{S}.json`` (a rerun reuses it; a
   few points are simulated again alone to check that a point's result does not depend on its job);
2. the structured search runs until it converges, with the default settings, on an evaluator that
   looks each point up in the seed's table when it has one (a simulation is deterministic for its
   seed, so a lookup returns exactly what simulating the point again would; the script re-simulates
   a few points to check) and simulates the rest (all of it without a table; the points adaptive
   precision asks for, with more requests, always);
3. with a table, optionally TPE (seeded) with the number of trials the structured search used.

Quality = the aggregate over buckets (weighted geometric mean, as the recommendation ranks combos)
of a table's throughput at the recommended combo and its chosen K per bucket, divided by the same
table's optimum (the best combo with its best K at every bucket) or by the aggregate of what the
recommendation rule picks from the whole table. A single table's optimum chases its noise (its best K
is partly the luckiest), so the headline is measured on the *mean table* -- every point's throughput
averaged over the seeds' exhaustive tables (the noise of one divided by about sqrt(seeds)) -- against
the mean table's own optimum; every recommendation is also scored on every table (its own seed's and
the others', independent noise realisations).
Cost = the simulations the search ran, by count and with a refined one counted as many times as it
has the requests (``simulation_cost``), and their simulated steps, against the exhaustive study's.
Stability, over the seeds: the combo each seed recommends, each bucket's K spread (largest minus
smallest K), whether each table is non-increasing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import multiprocessing
import os
import platform
import statistics
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import optuna
import torch

from spectune.config import StudyDocument, StudyMetrics, load_document
from spectune.study import (
    Evaluation,
    Evaluator,
    Point,
    SearchState,
    SimulationEvaluator,
    StudySpace,
    as_metrics,
    document_fingerprint,
    evaluate_metrics,
    load_outcome,
    recommend,
    run_study,
    space_from_document,
    structured_converged,
    structured_next_points,
)

REPO = Path(__file__).resolve().parents[1]


class TableEvaluator(Evaluator):
    """Answers a point from an exhaustive table of simulations; simulates refined points (picklable)."""

    def __init__(self, table: Mapping[str, Mapping[str, Any]], simulate: SimulationEvaluator) -> None:
        self.table = dict(table)
        self.simulate = simulate

    def __call__(self, point: Point) -> Mapping[str, Any]:
        if point.key not in self.table:
            self.table[point.key] = self.simulate(point).to_attr()
        return self.table[point.key]

    def evaluate_many(self, points: Sequence[Point]) -> list[Mapping[str, Any]]:
        return [self(point) for point in points]


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


def _steps(metrics: StudyMetrics | Mapping[str, Any] | None) -> int:
    return (as_metrics(metrics).simulated_steps or 0) if metrics is not None else 0


def searched(
    space: StudySpace, evaluator: TableEvaluator, fingerprint: dict, storage: str, **options: Any
) -> dict[str, Any]:
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
        "simulated_steps": sum(
            _steps(t.metrics) for t in outcome.trials if t.state == "COMPLETE" and t.duplicate_of is None
        ),
        "trials": sum(t.state == "COMPLETE" for t in outcome.trials),
        "combo": recommendation.combo.label,
        "ks": ks,
        "tie_sets": [c.ties.describe() if c.ties is not None else None for c in recommendation.choices],
        "schedule": [list(row) for row in recommendation.schedule],
        "non_increasing": non_increasing(ks),
        "notes": list(recommendation.notes),
        "search_wall_s": round(time.perf_counter() - started, 2),
    }


def search_rounds(space: StudySpace, evaluator: TableEvaluator, storage: str) -> dict[str, int]:
    """The structured search replayed in rounds -- every point it needs at once, then the next round with
    their results -- on the seed's table and the refined points its search simulated (``storage``):
    how many rounds, and the simulated steps along them (each round's longest simulation), which with
    a round's points run side by side (a GPU, parallel workers) is what the wall time follows."""
    for trial in load_outcome(storage, space.name).trials:
        if trial.state == "COMPLETE" and trial.point is not None and trial.metrics is not None:
            evaluator.table.setdefault(trial.point.key, as_metrics(trial.metrics).to_attr())
    state = SearchState(space)
    rounds = critical = 0
    while not structured_converged(state, keep_combos=2):
        results = [(point, evaluator(point)) for point in structured_next_points(state, keep_combos=2)]
        for point, metrics in results:
            state.completed[point] = evaluate_metrics(space, point, metrics, len(state.completed))
        rounds += 1
        critical += max(_steps(metrics) for _, metrics in results)
    return {"rounds": rounds, "critical_path_steps": critical}


def study_document(study: Path, seed: int, device: str | None) -> StudyDocument:
    """The study at ``seed``; ``device`` overrides its simulation.device (cpu: the PyTorch twin)."""
    document = load_document(study, expect="study").model.model_copy(update={"seed": seed})
    if device is not None:
        document = document.model_copy(update={"simulation": document.simulation.model_copy(update={"device": device})})
    return document


def _one_thread() -> None:
    torch.set_num_threads(1)


def _table_jobs(space: StudySpace, seeds: list[int]) -> list[tuple[int, int, int, list[Point]]]:
    """(seed, batch size, part, points): a bucket per job, a combo per job from batch size 64 (the long
    ones), longest first so that the last to start are short."""
    jobs = []
    for seed in seeds:
        for batch_size in space.batch_sizes:
            points = [p for p in space.points() if p.batch_size == batch_size]
            size = 1 + len(space.k_values[1:]) if batch_size >= 64 else len(points)
            jobs += [(seed, batch_size, i // size, points[i : i + size]) for i in range(0, len(points), size)]
    return sorted(jobs, key=lambda job: -(job[1] + 16) * len(job[3]))


def _simulate_job(study: Path, device: str | None, seed: int, points: list[Point], path: Path) -> None:
    metrics = SimulationEvaluator(study_document(study, seed, device)).evaluate_many(points)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({p.key: m.to_attr() for p, m in zip(points, metrics)}))
    tmp.replace(path)


def simulate_tables(study: Path, seeds: list[int], jobs: int, device: str | None, work: Path) -> None:
    """Every seed's exhaustive table into ``work/table-seed{S}.json`` (jobs' parts kept: a rerun resumes)."""
    space = space_from_document(study_document(study, seeds[0], device))
    parts = work / "table-parts"
    parts.mkdir(parents=True, exist_ok=True)
    todo = [(seed, points, parts / f"seed{seed}-bs{b}-{i}.json") for seed, b, i, points in _table_jobs(space, seeds)]
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_one_thread) as pool:
        futures = [
            pool.submit(_simulate_job, study, device, seed, points, path)
            for seed, points, path in todo
            if not path.exists()
        ]
        for future in futures:
            future.result()
    for seed in seeds:
        table: dict[str, Any] = {}
        for path in sorted(parts.glob(f"seed{seed}-*.json")):
            table |= json.loads(path.read_text())
        assert len(table) == space.size, f"seed {seed}: the table holds {len(table)} of {space.size} points"
        (work / f"table-seed{seed}.json").write_text(json.dumps(table))


def evaluations(space: StudySpace, table: Mapping[str, Mapping[str, Any]]) -> dict[Point, Evaluation]:
    return {p: evaluate_metrics(space, p, table[p.key], i) for i, p in enumerate(space.points())}


def exhaustive_table(study: Path, seed: int, device: str | None, work: Path) -> dict[str, Any]:
    """One seed's exhaustive table (from ``simulate_tables``): its optimum and recommendation."""
    document = study_document(study, seed, device)
    space = space_from_document(document)
    table = json.loads((work / f"table-seed{seed}.json").read_text())
    evaluator = SimulationEvaluator(document)
    for point in [p for p in space.points() if p.batch_size <= 4][::25]:  # a point's result does not depend on its job
        again = evaluator(point).throughput_tokens_per_s
        assert again == table[point.key]["throughput_tokens_per_s"], f"{point.key}: {again} != table"
    return {"table": table, **table_summary(space, table)}


def table_summary(space: StudySpace, table: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    optimum, optimum_combo, optimum_ks = exhaustive_optimum(space, table)
    choice = recommend(space, evaluations(space, table))
    assert choice is not None
    ks = [c.num_speculative_tokens for c in choice.choices]
    return {
        "simulated_steps": sum(_steps(metrics) for metrics in table.values()),
        "optimum": {"aggregate_tokens_per_s": optimum, "combo": optimum_combo, "ks": optimum_ks},
        "recommendation": {
            "combo": choice.combo.label,
            "ks": ks,
            "tie_sets": [c.ties.describe() if c.ties is not None else None for c in choice.choices],
            "non_increasing": non_increasing(ks),
            "aggregate_tokens_per_s": aggregate(space, table, choice.combo.label, ks),
        },
    }


def mean_table(tables: list[Mapping[str, Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Every point's throughput averaged over the tables (the other metrics: the first table's)."""
    return {
        key: {
            **tables[0][key],
            "throughput_tokens_per_s": statistics.fmean(t[key]["throughput_tokens_per_s"] for t in tables),
        }
        for key in tables[0]
    }


def run_seed(
    study: Path, seed: int, exhaustive: dict[str, Any] | None, work: Path, tpe: bool, device: str | None
) -> dict[str, Any]:
    """The structured search of one seed, on its exhaustive table when there is one, else simulating."""
    _one_thread()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    document = study_document(study, seed, device)
    space = space_from_document(document)
    fingerprint = document_fingerprint(document)
    lookup = TableEvaluator(exhaustive["table"] if exhaustive else {}, SimulationEvaluator(document))
    results: dict[str, Any] = {"seed": seed, "space_size": space.size, "exhaustive_table": exhaustive is not None}
    results["structured"] = searched(
        space, lookup, fingerprint, str(work / f"structured-seed{seed}.journal"), strategy="structured", seed=seed
    )
    if tpe and exhaustive is not None:
        results["tpe_same_trials"] = searched(
            space, lookup, fingerprint, str(work / f"tpe-seed{seed}.journal"), strategy="tpe",
            n_trials=results["structured"]["evaluations"], seed=seed,
        )  # fmt: skip
    results["structured"] |= search_rounds(space, lookup, str(work / f"structured-seed{seed}.journal"))
    results["structured"]["count_share_of_exhaustive"] = results["structured"]["evaluations"] / space.size
    results["structured"]["cost_share_of_exhaustive"] = results["structured"]["simulation_cost"] / space.size
    return results


def score(space: StudySpace, result: dict[str, Any], tables: Mapping[Any, dict[str, Any]]) -> dict[str, Any]:
    """A recommendation's aggregate on every exhaustive table (its own seed's and independent ones)."""
    by_table = {}
    for seed, exhaustive in tables.items():  # seed: an int, or "mean" for the mean table
        value = aggregate(space, exhaustive["table"], result["combo"], result["ks"])
        by_table[str(seed)] = {
            "ratio_to_optimum": value / exhaustive["optimum"]["aggregate_tokens_per_s"],
            "ratio_to_exhaustive_recommendation": value / exhaustive["recommendation"]["aggregate_tokens_per_s"],
        }
    return by_table


def stability(space_batch_sizes: list[int], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Across seeds: the combos recommended, each bucket's K spread, monotone tables."""
    combos = [row["combo"] for row in rows]
    ks = [row["ks"] for row in rows]
    same_combo = [k for c, k in zip(combos, ks) if c == max(set(combos), key=combos.count)]
    spread = [max(col) - min(col) for col in zip(*same_combo)]
    return {
        "combos": combos,
        "same_combo_every_seed": len(set(combos)) == 1,
        "ks_per_seed": ks,
        "k_spread_per_bucket": dict(zip(map(str, space_batch_sizes), spread)),
        "largest_k_spread": max(spread),
        "non_increasing_every_seed": all(row["non_increasing"] for row in rows),
    }


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", type=Path, default=REPO / "benchmarks" / "decision-scaled.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument(
        "--exhaustive-seeds", type=int, nargs="*", default=None,
        help="seeds to simulate exhaustively (default: every seed); the others' searches simulate for real and "
        "are scored on these tables (independent noise)",
    )  # fmt: skip
    parser.add_argument(
        "--jobs", type=int, default=1, help="processes (one thread each) for the tables and the seeds' searches"
    )
    parser.add_argument(
        "--device", choices=["cpu", "cuda", "auto"], default=None, help="override the study's simulation.device"
    )
    parser.add_argument(
        "--tables-only", action="store_true", help="simulate the exhaustive tables into --work and stop"
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="folder for the tables and journals (default: a temporary one)"
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--no-tpe", dest="tpe", action="store_false", help="skip TPE with the structured search's trials"
    )
    parser.add_argument(
        "--note", default=None, help="provenance written into the result (e.g. where the tables were simulated)"
    )
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error(f"--jobs: must be >= 1, got {args.jobs}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    work = args.work or Path(tempfile.mkdtemp(prefix="tuner-quality-"))
    work.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    started = time.perf_counter()
    document = study_document(args.study, args.seeds[0], args.device)
    space = space_from_document(document)
    exhaustive_seeds = args.seeds if args.exhaustive_seeds is None else args.exhaustive_seeds
    missing = [seed for seed in exhaustive_seeds if not (work / f"table-seed{seed}.json").exists()]
    if missing:
        simulate_tables(args.study, missing, args.jobs, args.device, work)
    tables_wall_s = time.perf_counter() - started
    if args.tables_only:
        print(f"tables of seeds {exhaustive_seeds} in {work} ({tables_wall_s:.0f} s)")
        return
    tables: dict[Any, dict[str, Any]] = {
        seed: exhaustive_table(args.study, seed, args.device, work) for seed in exhaustive_seeds
    }
    if len(tables) > 1:
        mean = mean_table([t["table"] for t in tables.values()])
        tables["mean"] = {"table": mean, **table_summary(space, mean)}
    started = time.perf_counter()
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [
            pool.submit(run_seed, args.study, seed, tables.get(seed), work, args.tpe, args.device)
            for seed in args.seeds
        ]
        rows = [future.result() for future in futures]
    searches_wall_s = time.perf_counter() - started
    per_seed = []
    for row in rows:
        seed = row["seed"]
        for name in ("structured", "tpe_same_trials"):
            if name in row:
                row[name]["quality_by_table"] = score(space, row[name], tables)
        if not tables:  # searches only (their journals are reused by a later run with tables)
            print(f"seed {seed}: {row['structured']['combo']} K {row['structured']['ks']}", flush=True)
            continue
        steps = statistics.mean(t["simulated_steps"] for key, t in tables.items() if key != "mean")
        row["structured"]["steps_share_of_exhaustive"] = row["structured"]["simulated_steps"] / steps
        per_seed.append(row)
        result = row["structured"]
        quality = ", ".join(f"{q['ratio_to_optimum']:.4f} on table {t}" for t, q in result["quality_by_table"].items())
        print(
            f"seed {seed}: {result['combo']} K {result['ks']} ({'non-increasing' if result['non_increasing'] else 'RISES'}); "
            f"{result['evaluations']} simulations ({result['refined_evaluations']} refined), cost {result['simulation_cost']} = "
            f"{result['cost_share_of_exhaustive']:.0%} of exhaustive ({result['steps_share_of_exhaustive']:.0%} of its simulated "
            f"steps), {result['rounds']} rounds; of the optimum: {quality}",
            flush=True,
        )
    if not tables:
        return
    seed_tables = [str(seed) for seed in exhaustive_seeds]
    ratios = [row["structured"]["quality_by_table"][t]["ratio_to_optimum"] for row in per_seed for t in seed_tables]
    own = [
        row["structured"]["quality_by_table"][str(row["seed"])]["ratio_to_optimum"]
        for row in per_seed
        if row["exhaustive_table"]
    ]
    independent = [
        row["structured"]["quality_by_table"][t]["ratio_to_optimum"]
        for row in per_seed
        for t in seed_tables
        if t != str(row["seed"])
    ]
    on_mean = [row["structured"]["quality_by_table"]["mean"] for row in per_seed] if "mean" in tables else []
    summary: dict[str, Any] = {
        "space_size": space.size,
        "exhaustive_seeds": exhaustive_seeds,
        "structured": {
            "mean_table_ratio_to_optimum": [q["ratio_to_optimum"] for q in on_mean] or None,
            "mean_table_ratio_to_exhaustive_recommendation": [q["ratio_to_exhaustive_recommendation"] for q in on_mean]
            or None,
            "median_ratio_to_optimum": statistics.median(ratios),
            "worst_ratio_to_optimum": min(ratios),
            "median_ratio_to_optimum_own_table": statistics.median(own) if own else None,
            "median_ratio_to_optimum_independent_tables": statistics.median(independent) if independent else None,
            "median_evaluations": statistics.median(row["structured"]["evaluations"] for row in per_seed),
            "median_simulation_cost": statistics.median(row["structured"]["simulation_cost"] for row in per_seed),
            "median_count_share_of_exhaustive": statistics.median(
                row["structured"]["count_share_of_exhaustive"] for row in per_seed
            ),
            "median_cost_share_of_exhaustive": statistics.median(
                row["structured"]["cost_share_of_exhaustive"] for row in per_seed
            ),
            "median_rounds": statistics.median(row["structured"]["rounds"] for row in per_seed),
            "median_critical_path_steps": statistics.median(
                row["structured"]["critical_path_steps"] for row in per_seed
            ),
            "median_steps_share_of_exhaustive": statistics.median(
                row["structured"]["steps_share_of_exhaustive"] for row in per_seed
            ),
        },
        "exhaustive_recommendation": {
            str(seed): {
                **t["recommendation"],
                "ratio_to_optimum": t["recommendation"]["aggregate_tokens_per_s"]
                / t["optimum"]["aggregate_tokens_per_s"],
            }
            for seed, t in tables.items()
        },
        "stability": {
            "structured": stability(document.schedule.batch_sizes, [row["structured"] for row in per_seed]),
            "exhaustive_recommendation": stability(
                document.schedule.batch_sizes, [t["recommendation"] for key, t in tables.items() if key != "mean"]
            ),
        },
    }
    tpe_rows = [row["tpe_same_trials"] for row in per_seed if "tpe_same_trials" in row]
    if tpe_rows:
        summary["tpe_same_trials"] = {
            "median_ratio_to_optimum": statistics.median(
                r["quality_by_table"][t]["ratio_to_optimum"] for r in tpe_rows for t in seed_tables
            ),
            "mean_table_ratio_to_optimum": [r["quality_by_table"]["mean"]["ratio_to_optimum"] for r in tpe_rows]
            if "mean" in tables
            else None,
        }
    today = datetime.date.today().isoformat()
    report = {
        "benchmark": "tuner_quality",
        "date": today,
        "commit": _commit(),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor(),
            "cpus": os.cpu_count(),
            "jobs": args.jobs,
            "torch": torch.__version__,
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
        },
        "study": str(args.study.relative_to(REPO) if args.study.is_relative_to(REPO) else args.study),
        "device": args.device or document.simulation.device,
        "note": args.note,
        "wall_s": {"tables": round(tables_wall_s, 1), "searches": round(searches_wall_s, 1)},
        "summary": summary,
        "exhaustive": {str(seed): {k: v for k, v in t.items() if k != "table"} for seed, t in tables.items()},
        "per_seed": per_seed,
    }
    out = args.out or REPO / "benchmarks" / "results" / f"tuner-quality-{today}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

"""Replay public speculative-decoding measurements with spectune and report the simulator's error.

Each folder in benchmarks/fidelity/ holds spectune documents, a measured.csv and optionally a notes.md (what
is known about the anchor's errors, in words). measured.csv columns:

- point, document, set (``--set`` overrides, space-separated), metric (the name reported), measured, source;
- read (optional): the quantity read from ``spectune simulate --json`` when it is not ``metric`` itself;
  ``decode_tokens_per_s`` is output tokens over the simulated time outside prefill (static-batch anchors
  that time decoding only);
- versus (optional): a second set of overrides of the same document; the simulated value is then the ratio
  read(set) / read(versus), for ratios the source measured between two runs.

benchmarks/fidelity/not-replayable.csv lists what the suite leaves out and why. Every point is simulated
through the CLI; the rows go to benchmarks/results/fidelity-latest.csv and docs/fidelity.md is generated
from them. ``--quick`` replays one small anchor (CPU CI). Fitted anchors: FITTED below (none).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "benchmarks" / "fidelity"
QUICK_ANCHOR = "a8-qwen3-moe-h100"
# Anchors any preset constant or cost-model coefficient was fitted on. Their errors are shown but kept out
# of the summary; at least three anchors must stay out of every fit.
FITTED: dict[str, str] = {}
FIELDS = [
    "date", "commit", "machine", "anchor", "point", "metric", "measured", "simulated", "error", "source",
    "missing_ms_per_step", "target_layers", "allreduces_per_pass",
]  # fmt: skip
ABSOLUTE = ("throughput_tokens_per_s", "baseline_throughput_tokens_per_s", "tpot_p50_ms", "baseline_tpot_p50_ms")
GROUPS = ("speedup vs no speculation", "absolute throughput / TPOT", "other ratios")


def group(metric: str) -> str:
    """Which summary line a metric counts in."""
    if metric in ABSOLUTE:
        return GROUPS[1]
    return GROUPS[0] if "speedup" in metric else GROUPS[2]


def _decode_tokens_per_s(result: dict[str, object]) -> float:
    share = result["step_time_share"]
    assert isinstance(share, dict)
    decode_s = float(result["simulated_time_s"]) * (1.0 - float(share["prefill"]))  # type: ignore[arg-type]
    return float(result["output_tokens"]) / decode_s  # type: ignore[arg-type]


DERIVED: dict[str, Callable[[dict[str, object]], float]] = {"decode_tokens_per_s": _decode_tokens_per_s}
# speedup metric -> the quantity whose ratio it is (the per-request token rate of the speculative run)
SPEEDUP_RATE = {
    "speedup_vs_no_spec": "throughput_tokens_per_s",
    "decode_speedup_vs_no_spec": "decode_tokens_per_s",
    "tpot_speedup_vs_no_spec": "tpot_p50_ms",
}


def missing_ms_per_step(
    metric: str, measured: float, simulated: float, result: dict[str, object], concurrency: int | None
) -> float | None:
    """How much time per step the simulation lacks to meet the measurement (ms; negative: it has too much).

    A step emits, per request, one token without speculation (baseline_*) and the simulated acceptance
    length with it (the replays take their acceptance from the source). For an absolute TPOT the answer
    is (measured - simulated) x tokens per step; for an absolute throughput at a closed-loop concurrency
    B, B x tokens per step x (1 / measured - 1 / simulated). For a speedup it is the extra time per
    speculative step that would bring the simulated speedup to the measured one, the simulated baseline
    held: T_spec x (simulated / measured - 1), T_spec the simulated speculative step. None elsewhere.
    """
    baseline = metric.startswith("baseline_")
    accepted = result["mean_acceptance_length"]  # None when nothing was drafted (a K = 0 row): one token a step
    tokens_per_step = 1.0 if baseline or accepted is None else float(accepted)  # type: ignore[arg-type]
    if metric.endswith("tpot_p50_ms"):
        return tokens_per_step * (measured - simulated)
    if metric.endswith("throughput_tokens_per_s"):
        return None if concurrency is None else 1e3 * concurrency * tokens_per_step * (1 / measured - 1 / simulated)
    if metric not in SPEEDUP_RATE:
        return None
    quantity = SPEEDUP_RATE[metric]
    if quantity == "tpot_p50_ms":
        spec_step_ms = tokens_per_step * float(result[quantity])  # type: ignore[arg-type]
    elif concurrency is None:
        return None
    else:
        rate = DERIVED[quantity](result) if quantity in DERIVED else float(result[quantity])  # type: ignore[arg-type]
        spec_step_ms = 1e3 * tokens_per_step * concurrency / rate
    return spec_step_ms * (simulated / measured - 1)


def _deployment(document: Path, overrides: str) -> tuple[int, int, int | None]:
    """(target layers, all-reduces per target pass, closed-loop concurrency or None) of a replay."""
    from spectune.config import apply_overrides, read_mapping, validate_source

    model = validate_source(apply_overrides(read_mapping(document), overrides.split())).model
    target = model.target_model
    layers = int(target.num_hidden_layers)
    allreduces = 2 * layers if target.tensor_parallel_size > 1 else 0  # as the roofline counts them
    return layers, allreduces, model.workload.concurrency


class _Simulator:
    """``spectune simulate --json`` through the CLI, each (document, overrides) run once."""

    def __init__(self) -> None:
        self._runs: dict[tuple[Path, str], dict[str, object]] = {}

    def __call__(self, document: Path, overrides: str) -> dict[str, object]:
        key = (document, overrides)
        if key not in self._runs:
            command = [sys.executable, "-m", "spectune", "simulate", str(document), "--json"]
            for item in overrides.split():
                command += ["--set", item]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                problem = done.stderr.strip() or done.stdout.strip()
                raise RuntimeError(f"{document} {overrides}: spectune simulate failed: {problem}")
            self._runs[key] = json.loads(done.stdout)
        return self._runs[key]

    def read(self, document: Path, overrides: str, quantity: str) -> float:
        result = self(document, overrides)
        if quantity in DERIVED:
            return DERIVED[quantity](result)
        return float(result[quantity])  # type: ignore[arg-type]


def replay(anchors: list[str]) -> list[dict[str, str]]:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    stamp = {
        "date": datetime.date.today().isoformat(),
        "commit": commit.stdout.strip() or "unknown",
        "machine": f"{platform.machine()} {platform.processor() or platform.system()}",
    }
    simulate = _Simulator()
    rows = []
    for anchor in anchors:
        with (SUITE / anchor / "measured.csv").open(newline="") as handle:
            for point in csv.DictReader(handle):
                document = SUITE / anchor / point["document"]
                quantity = point.get("read") or point["metric"]
                simulated = simulate.read(document, point["set"], quantity)
                if point.get("versus"):
                    simulated /= simulate.read(document, point["versus"], quantity)
                measured = float(point["measured"])
                layers, allreduces, concurrency = _deployment(document, point["set"])
                missing = missing_ms_per_step(
                    point["metric"], measured, simulated, simulate(document, point["set"]), concurrency
                )
                rows.append(
                    {
                        **stamp,
                        "anchor": anchor,
                        "point": point["point"],
                        "metric": point["metric"],
                        "measured": f"{measured:.4f}",
                        "simulated": f"{simulated:.4f}",
                        "error": f"{simulated / measured - 1:+.4f}",
                        "source": point["source"],
                        "missing_ms_per_step": "" if missing is None else f"{missing:.4f}",
                        "target_layers": str(layers),
                        "allreduces_per_pass": str(allreduces),
                    }
                )
    return rows


def _series(point: str) -> tuple[str, int] | None:
    """('eagle3', 16) for a point named 'eagle3 bs16'; None for a point without a batch size."""
    head, _, batch = point.rpartition(" bs")
    return (head, int(batch)) if head and batch.isdigit() else None


def shape_checks(rows: list[dict[str, str]]) -> list[str]:
    """Markdown lines: does the simulated gain have the measured sign, and move with batch the measured way?"""
    lines = []
    for anchor in dict.fromkeys(row["anchor"] for row in rows):
        gains = [r for r in rows if r["anchor"] == anchor and group(r["metric"]) == GROUPS[0]]
        if not gains:
            continue
        same_sign = [r for r in gains if (float(r["measured"]) >= 1) == (float(r["simulated"]) >= 1)]
        wrong = ", ".join(r["point"] for r in gains if r not in same_sign)
        line = f"- {anchor}: gain on the measured side of 1.0 at {len(same_sign)} of {len(gains)} points"
        line += f" (not at: {wrong})" if wrong else ""
        trends = []
        by_series: dict[tuple[str, str], list[tuple[int, float, float]]] = {}
        for r in gains:
            named = _series(r["point"])
            if named is not None:
                by_series.setdefault((named[0], r["metric"]), []).append(
                    (named[1], float(r["measured"]), float(r["simulated"]))
                )
        for (series, _metric), points in by_series.items():
            if len(points) < 2:
                continue
            points.sort()
            measured_rises = points[-1][1] > points[0][1]
            simulated_rises = points[-1][2] > points[0][2]
            verdict = "same" if measured_rises == simulated_rises else "OPPOSITE"
            direction = "rises" if measured_rises else "falls"
            trends.append(f"{series}: measured {direction} with batch, simulated {verdict}")
        lines.append(line + ("; " + "; ".join(trends) if trends else "") + ".")
    return lines


def _summary(rows: list[dict[str, str]]) -> list[str]:
    unfitted = [row for row in rows if row["anchor"] not in FITTED]
    lines = ["| metric | points | anchors | median abs. error | worst abs. error |", "|---|---|---|---|---|"]
    for name in GROUPS:
        members = [row for row in unfitted if group(row["metric"]) == name]
        if not members:
            continue
        errors = [abs(float(row["error"])) for row in members]
        anchors = len({row["anchor"] for row in members})
        lines.append(f"| {name} | {len(errors)} | {anchors} | {statistics.median(errors):.1%} | {max(errors):.1%} |")
    worst = sorted(unfitted, key=lambda row: abs(float(row["error"])), reverse=True)[:3]
    lines += ["", "Worst three points (their causes are in each anchor's notes below):", ""]
    lines += [
        f"{i}. {row['anchor']} `{row['point']}` {row['metric']}: {float(row['error']):+.1%}"
        for i, row in enumerate(worst, start=1)
    ]
    return lines


def shortfall(rows: list[dict[str, str]]) -> list[str]:
    """Markdown: the time per step each replay lacks (or has in excess), by deployment, from the results."""
    known = [row for row in rows if row.get("missing_ms_per_step")]
    plain = [row for row in known if row["metric"].startswith("baseline_")]
    absolute = [row for row in known if group(row["metric"]) == GROUPS[1] and row not in plain]
    speculative = [row for row in known if group(row["metric"]) == GROUPS[0]]
    lines = [
        "Without speculation: measured minus simulated step time (one token per request a step), and that",
        "difference spread over the target's layers and over its all-reduces (2 a layer when TP > 1).",
        "",
        "| anchor | point | missing ms / step | µs / layer | µs / all-reduce |",
        "|---|---|---|---|---|",
    ]
    for row in plain:
        missing, layers, allreduces = (
            float(row[k]) for k in ("missing_ms_per_step", "target_layers", "allreduces_per_pass")
        )
        per_allreduce = f"{1e3 * missing / allreduces:.1f}" if allreduces else "– (TP 1)"
        lines.append(
            f"| {row['anchor']} | {row['point']} | {missing:+.2f} | {1e3 * missing / layers:.1f} | {per_allreduce} |"
        )
    lines += [
        "",
        "With speculation, where the source measured it absolutely: measured minus simulated speculative step",
        "(the simulated acceptance length in tokens per request a step), beside the plain step's shortfall above.",
        "",
        "| anchor | point | metric | missing ms / speculative step |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {row['anchor']} | {row['point']} | {row['metric']} | {float(row['missing_ms_per_step']):+.2f} |"
        for row in absolute
    ]
    lines += [
        "",
        "With speculation: the extra time per speculative step that would turn the simulated speedup into the",
        "measured one, the simulated baseline held (negative: the simulated speculative step is too dear).",
        "",
        "| anchor | point | metric | extra ms / speculative step |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {row['anchor']} | {row['point']} | {row['metric']} | {float(row['missing_ms_per_step']):+.2f} |"
        for row in speculative
    ]
    return lines


def headline(rows: list[dict[str, str]]) -> dict[str, tuple[float, float]]:
    """(median, worst) absolute error per summary group over the unfitted anchors."""
    unfitted = [row for row in rows if row["anchor"] not in FITTED]
    result = {}
    for name in GROUPS:
        errors = [abs(float(row["error"])) for row in unfitted if group(row["metric"]) == name]
        if errors:
            result[name] = (statistics.median(errors), max(errors))
    return result


def render(rows: list[dict[str, str]]) -> str:
    """docs/fidelity.md from the results rows."""
    fitted = "; ".join(f"{anchor} ({what})" for anchor, what in sorted(FITTED.items()))
    lines = ["# Fidelity: spectune against public measurements", ""]
    lines += [
        "Generated by `python benchmarks/fidelity.py` from `benchmarks/results/fidelity-latest.csv`; do not edit.",
        "Error = simulated / measured − 1. Each anchor's documents (benchmarks/fidelity/<anchor>/) say what the",
        "source states and what the replay assumes. Fitted anchors: "
        + (fitted or "none (no preset constant or cost-model coefficient was fitted on an anchor)")
        + ". Every preset and cost-model constant is nominal (datasheets, config.json, the cost model's defaults).",
        "Goals (issue 38): speedup median ≤ 5 % and worst ≤ 12 %; absolute median ≤ 10 %.",
        "",
        "## Summary (unfitted anchors)",
        "",
        *_summary(rows),
        "",
        "## Shape checks",
        "",
        *shape_checks(rows),
        "",
        "## Where the simulated time falls short",
        "",
        *shortfall(rows),
    ]
    for anchor in dict.fromkeys(row["anchor"] for row in rows):
        lines += ["", f"## {anchor}", "", "| point | metric | measured | simulated | error |", "|---|---|---|---|---|"]
        sources: dict[str, None] = {}
        for row in rows:
            if row["anchor"] == anchor:
                sources[row["source"]] = None
                lines.append(
                    f"| {row['point']} | {row['metric']} | {row['measured']} | {row['simulated']} | "
                    f"{float(row['error']):+.1%} |"
                )
        lines += ["", "Sources: " + "; ".join(sources)]
        notes = SUITE / anchor / "notes.md"
        if notes.exists():
            lines += ["", "Known causes of error:", "", notes.read_text().strip()]
        lines += ["", "What the replay states and assumes (from its documents):", ""]
        for document in sorted((SUITE / anchor).glob("*.yaml")):
            comments = [line[1:].strip() for line in document.read_text().splitlines() if line.startswith("#")]
            lines.append(f"- `{document.name}`: " + " ".join(comments))
    lines += ["", "## Not replayable", ""]
    with (SUITE / "not-replayable.csv").open(newline="") as handle:
        for item in csv.DictReader(handle):
            lines.append(
                f"- {item['anchor']} ({item['what']}): not replayable: {item['reason']}. Source: {item['source']}"
            )
    lines.append("")
    return "\n".join(lines)


README_ROW = "| [docs/fidelity.md](docs/fidelity.md) |"


def readme_row(rows: list[dict[str, str]]) -> str:
    """The README's one line on fidelity, with the summary numbers of this run."""
    numbers = headline(rows)
    speedup, absolute = numbers[GROUPS[0]], numbers[GROUPS[1]]
    anchors = len({row["anchor"] for row in rows})
    fitted = f"{len(FITTED)} fitted" if FITTED else "none fitted"
    return (
        f"{README_ROW} simulator vs public measurements ({anchors} anchors, {fitted}): speedup vs no-spec median "
        f"error {speedup[0]:.1%}, worst {speedup[1]:.1%}; absolute throughput/TPOT median {absolute[0]:.1%} |"
    )


def _write_readme(path: Path, rows: list[dict[str, str]]) -> None:
    lines = path.read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith(README_ROW):
            lines[i] = readme_row(rows) + "\n"
            path.write_text("".join(lines))
            return
    raise SystemExit(f"{path}: no line starting with {README_ROW!r} to update")


def _anchor_order(name: str) -> tuple[int, str]:
    """a2 < a5 < a10 < points-...: anchors by their number in the reference, single points last."""
    digits = "".join(ch for ch in name.split("-")[0] if ch.isdigit())
    return (int(digits) if name.startswith("a") and digits else 1_000, name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help=f"replay only {QUICK_ANCHOR} (CPU CI)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "fidelity-latest.csv")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs" / "fidelity.md")
    parser.add_argument("--anchor", action="append", default=[], help="replay only this anchor (repeatable)")
    parser.add_argument(
        "--readme", type=Path, default=ROOT / "README.md", help="README whose fidelity line a full run updates"
    )
    args = parser.parse_args(argv)
    everything = sorted((p.name for p in SUITE.iterdir() if p.is_dir()), key=_anchor_order)
    unknown = [name for name in args.anchor if name not in everything]
    if unknown:
        parser.error(f"--anchor: no such anchor {', '.join(unknown)}; anchors: {', '.join(everything)}")
    anchors = [QUICK_ANCHOR] if args.quick else (args.anchor or everything)
    rows = replay(anchors)
    for row in rows:
        print(
            f"{row['anchor']:<26} {row['point']:<22} {row['metric']:<34} simulated {row['simulated']:>10} "
            f"measured {row['measured']:>10} error {float(row['error']):+.1%}"
        )
    for name, (median, worst) in headline(rows).items():
        print(f"{name}: median {median:.1%}, worst {worst:.1%} (unfitted anchors)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    args.docs.write_text(render(rows))
    if not args.quick and not args.anchor:  # the README quotes the whole suite only
        _write_readme(args.readme, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The performance texts: ``docs/performance.md`` and the headlines of README.md and docs/kernels.md.

Written from ``benchmarks/results/*-latest.csv`` (and the reference's published times); every row of
those files names the date and commit it was measured at, and every row of the page shows both.
Used by ``docs_pages.py``.
"""

from __future__ import annotations

import csv
import re
import statistics
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from doc_regions import PageError

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_COMMIT = re.compile(r"^[0-9a-f]{7,40}$|^vLLM \d+\.\d+\.\d+$")
GENERATED_BY = "python benchmarks/docs_pages.py"


def read_results(path: Path, required: Iterable[str]) -> list[dict[str, str]]:
    """A results CSV's rows; refuses a missing column, or a row without a date and commit, by file and line."""
    if not path.is_file():
        raise PageError(f"{path}: no such results file")
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in ("date", "commit", *required) if c not in (reader.fieldnames or [])]
        if missing:
            raise PageError(f"{path}:1: columns {', '.join(missing)} missing (the header has {reader.fieldnames})")
        rows = list(reader)
    for number, row in enumerate(rows, start=2):
        if not _DATE.match(row["date"] or ""):
            raise PageError(f"{path}:{number}: date: must be YYYY-MM-DD, got {row['date']!r}")
        if not _COMMIT.match(row["commit"] or ""):
            raise PageError(f"{path}:{number}: commit: must be a git hash or 'vLLM X.Y.Z', got {row['commit']!r}")
    return rows


def _table(header: list[str], rows: Iterable[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _number(text: str, digits: int = 0) -> str:
    return f"{float(text):,.{digits}f}"


def _us(text: str) -> str:
    """Microseconds to the precision a kernel's median holds: tenths below 100 µs, whole ones above."""
    value = float(text)
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _prose(text: str) -> str:
    return textwrap.fill(text, width=100, break_on_hyphens=False, break_long_words=False) + "\n"


@dataclass(frozen=True)
class Results:
    """The committed measurements the performance texts are written from."""

    kernels: list[dict[str, str]]
    reference: list[dict[str, str]]
    simulator: list[dict[str, str]]
    study: list[dict[str, str]]

    @classmethod
    def read(cls, results: Path) -> Results:
        return cls(
            kernels=read_results(results / "kernels-latest.csv", ("method", "R", "K", "V", "dtype", "us", "floor_us")),
            reference=read_results(results / "reference-published.csv", ("method", "R", "K", "V", "dtype", "us")),
            simulator=read_results(
                results / "simulator-latest.csv",
                ("device", "batch_size", "K", "V", "method", "draft", "engine", "steps_per_s", "floor_steps_per_s"),
            ),
            study=read_results(
                results / "study-latest.csv", ("device", "study", "V", "workers", "mps", "run", "wall_s", "table")
            ),
        )


_KERNEL_METHODS = ("greedy", "standard_onehot", "standard_draft", "block_onehot", "block_draft", "synthetic")


def _kernel(rows: list[dict[str, str]], method: str, r: str, k: str, v: str, dtype: str) -> dict[str, str] | None:
    for row in rows:
        if (row["method"], row["R"], row["K"], row["V"], row["dtype"]) == (method, r, k, v, dtype):
            return row
    return None


def kernels_headline(results: Results) -> str:
    """The fp32, V = 128256 grid the reference published: ours / the reference's µs, and ours over the floor."""
    cells: list[list[str]] = []
    stamps: set[tuple[str, str]] = set()
    faster = compared = 0
    for r, k in sorted({(int(x["R"]), int(x["K"])) for x in results.reference}):
        line = [str(r), str(k)]
        for method in _KERNEL_METHODS:
            ours = _kernel(results.kernels, method, str(r), str(k), "128256", "float32")
            theirs = _kernel(results.reference, method, str(r), str(k), "128256", "float32")
            if ours is None or theirs is None:
                line.append("–")
                continue
            stamps.add((ours["date"], ours["commit"]))
            compared += 1
            faster += float(ours["us"]) < float(theirs["us"])
            ratio = float(ours["us"]) / float(ours["floor_us"])
            floor = f" ({ratio:.2f}×)" if ratio > 0.5 else ""  # a small call is launch-bound, not read-bound
            line.append(f"{_us(ours['us'])} / {_us(theirs['us'])}{floor}")
        cells.append(line)
    header = ["R", "K", "greedy", "standard one-hot", "standard draft logits", "block one-hot", "block draft logits",
              "synthetic"]  # fmt: skip
    measured = ", ".join(f"{date} at {commit}" for date, commit in sorted(stamps))
    return (
        _prose(
            f"H200, fp32, V = 128256, µs per call in a CUDA graph with L2 flushed: ours / the vLLM 0.33.0 reference "
            f"implementation's, and in brackets ours over one `amax` read of the same logits where a call is "
            f"read-bound (measured {measured}; every row in [performance.md](performance.md)). Ours is faster at "
            f"{faster} of these {compared} points."
        )
        + "\n"
        + _table(header, cells)
    )


def _simulator_row(results: Results, device: str, v: str, engine: str) -> dict[str, str]:
    for row in results.simulator:
        key = (row["device"], row["batch_size"], row["K"], row["V"], row["method"], row["draft"], row["engine"])
        if key == (device, "256", "5", v, "block", "probabilistic", engine) and not row.get("policy"):
            return row
    raise PageError(f"simulator-latest.csv: no row for {device}, B 256, K 5, V {v}, block/probabilistic, {engine}")


def readme_headline(results: Results) -> str:
    """One number per claim: a simulated step's speed on an H200, and the decision study's wall time on the
    GPU of its newest measurement (named)."""
    step = _simulator_row(results, "NVIDIA H200", "128256", "ahead")
    share = float(step["steps_per_s"]) / float(step["floor_steps_per_s"])
    warm = [
        row
        for row in results.study
        if row["run"] == "warm" and row["mps"] == "yes" and row["V"] == "4096" and row["workers"] == "8"
    ]
    if not warm:
        raise PageError("study-latest.csv: no warm run with 8 workers under MPS at V = 4096")
    # The newest measurement only (the last row's study and commit): older commits' runs are history.
    latest = [row for row in warm if (row["study"], row["commit"]) == (warm[-1]["study"], warm[-1]["commit"])]
    median = statistics.median(float(row["wall_s"]) for row in latest)
    return _prose(
        f"On an H200, one simulated step at batch size 256, K = 5 (block verification, probabilistic drafts, "
        f"V = 128256) runs at {_number(step['steps_per_s'])} steps/s, {share:.0%} of its logit-read floor "
        f"({step['date']}, {step['commit']}); on an {latest[-1]['device']}, {latest[-1]['study']} at V = 4096 "
        f"with 8 workers under MPS "
        f"takes {median:.1f} s once Triton's cache holds its kernels (median of {len(latest)} runs, "
        f"{latest[-1]['date']}, {latest[-1]['commit']}). Every measurement, with its date and commit: "
        "[docs/performance.md](docs/performance.md)."
    )


def performance_page(results: Results) -> str:
    """docs/performance.md: every committed measurement, each row with its date and commit."""
    kernels = _table(
        ["method", "R", "K", "V", "dtype", "µs", "floor µs", "ratio", "date", "commit"],
        (
            [r["method"], r["R"], r["K"], r["V"], r["dtype"], r["us"], r["floor_us"],
             f"{float(r['us']) / float(r['floor_us']):.3f}", r["date"], r["commit"]]
            for r in results.kernels
        ),
    )  # fmt: skip
    reference = _table(
        ["method", "R", "K", "V", "dtype", "µs", "date", "measured"],
        ([r["method"], r["R"], r["K"], r["V"], r["dtype"], r["us"], r["date"], r["commit"]] for r in results.reference),
    )
    simulator = _table(
        ["device", "B", "K", "V", "rule/draft", "engine", "steps/s", "floor steps/s", "of floor", "date", "commit"],
        (
            [r["device"], r["batch_size"], r["K"], r["V"], f"{r['method']}/{r['draft']}",
             r["engine"] + (" under adaptive verification" if r.get("policy") else ""),
             _number(r["steps_per_s"], 1), _number(r["floor_steps_per_s"], 1),
             f"{float(r['steps_per_s']) / float(r['floor_steps_per_s']):.0%}", r["date"], r["commit"]]
            for r in results.simulator
        ),
    )  # fmt: skip
    study = _table(
        ["device", "study", "V", "workers", "MPS", "run", "wall s", "table", "date", "commit"],
        (
            [r["device"], f"`{r['study']}`", r["V"], r["workers"], r["mps"], r["run"], r["wall_s"], f"`{r['table']}`",
             r["date"], r["commit"]]
            for r in results.study
        ),
    )  # fmt: skip
    return f"""# Performance

Generated by `{GENERATED_BY} performance` from `benchmarks/results/*-latest.csv`; do not edit.
Each row says when (date) and on which code (commit) it was measured. How each benchmark measures,
and the history behind these rows: [benchmarks/README.md](../benchmarks/README.md). Simulator
fidelity against public measurements is its own generated page: [fidelity.md](fidelity.md).

## Rejection-sampling kernels

`benchmarks/bench_kernels.py` on an H200: median µs per call in a CUDA graph with L2 flushed; floor:
one `amax` read of the same logits; ratio: µs over floor (`kernels-latest.csv`).

{kernels}
The vLLM 0.33.0 reference implementation's kernels on the same H200, fp32
(`reference-published.csv`), which [kernels.md](kernels.md) compares against:

{reference}
## Simulator

`benchmarks/simulator.py`: simulated serving steps per second of one simulation, and the steps per
second at which the logits of a step could only just be read once (`simulator-latest.csv`); "under
adaptive verification" rows (`--adaptive-verification`) add vLLM's policy, whose per-step host work
(budget, estimates, admission) the GPU does not share.

{simulator}
## Studies

Wall time of `spectune study run`, from the command to its last artefact (`study-latest.csv`).

{study}"""

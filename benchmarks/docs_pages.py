"""Write the docs' measured numbers and example outputs, so that no page states what no script produced.

Two kinds of generated text live between marker lines in README.md and docs/*.md::

    <!-- generated: NAME -->
    ...written by this script; edits are overwritten...
    <!-- end generated: NAME -->

- ``performance`` (fast, checked by ``tests/benchmarks/test_docs_pages.py``): ``docs/performance.md``
  in full, and the headline regions of README.md and docs/kernels.md, from
  ``benchmarks/results/*-latest.csv`` and the published reference times. Every row of those CSVs
  carries the date and commit it was measured at, and the page prints both on every row.
- ``examples`` (runs the real commands, about a minute or more on a laptop CPU): each ``example-*``
  region becomes the command's output, run in a fresh copy of ``configs/``, ``studies/`` and
  ``examples/`` so that a study starts from an empty journal. Wall times in the output are machine
  noise, not behaviour, and are written as ``…``; the measured times are in docs/performance.md.
- ``check``: exit 1, naming each region, when a ``performance`` region differs from what the
  committed results give; ``check-examples [NAME ...]``: the same for example regions, by running them.

    python benchmarks/docs_pages.py performance
    python benchmarks/docs_pages.py examples [NAME ...]
    python benchmarks/docs_pages.py check
    python benchmarks/docs_pages.py check-examples example-validate
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/calibration.md", "docs/configs.md", "docs/kernels.md", "docs/simulation.md",
         "docs/studies.md")  # fmt: skip
PERFORMANCE_PAGE = "docs/performance.md"
_BEGIN = re.compile(r"^<!-- generated: ([a-z0-9-]+) -->$")
_END = "<!-- end generated: {} -->"
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_COMMIT = re.compile(r"^[0-9a-f]{7,40}$|^vLLM \d+\.\d+\.\d+$")
_GENERATED_BY = "python benchmarks/docs_pages.py"


class PageError(Exception):
    """A results file or a page this script cannot use; the message names the file and line."""


# ---------------------------------------------------------------- regions


def regions(path: Path) -> dict[str, str]:
    """Each generated region of a page, by name: the text between its marker lines."""
    found: dict[str, str] = {}
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    index = 0
    while index < len(lines):
        begin = _BEGIN.match(lines[index].rstrip("\n"))
        index += 1
        if begin is None:
            continue
        name, start = begin.group(1), index
        end = _END.format(name)
        while index < len(lines) and lines[index].rstrip("\n") != end:
            if _BEGIN.match(lines[index].rstrip("\n")):
                raise PageError(f"{path}:{index + 1}: region '{name}' (line {start}) is not closed before this one")
            index += 1
        if index == len(lines):
            raise PageError(f"{path}:{start}: region '{name}' has no end line '{end}'")
        if name in found:
            raise PageError(f"{path}:{start}: region '{name}' appears twice in this page")
        found[name] = "".join(lines[start:index])
        index += 1
    return found


def rewrite_regions(path: Path, texts: dict[str, str]) -> list[str]:
    """Replace the named regions of a page (others untouched); the names of those that changed."""
    current = regions(path)
    changed = [name for name in texts if name in current and current[name] != texts[name]]
    if not changed:
        return []
    out: list[str] = []
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    skipping: str | None = None
    for line in lines:
        if skipping is not None:
            if line.rstrip("\n") == _END.format(skipping):
                out.append(line)
                skipping = None
            continue
        out.append(line)
        begin = _BEGIN.match(line.rstrip("\n"))
        if begin is not None and begin.group(1) in texts:
            skipping = begin.group(1)
            out.append(texts[skipping])
    path.write_text("".join(out), encoding="utf-8")
    return changed


# ---------------------------------------------------------------- results


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
        if key == (device, "256", "5", v, "block", "probabilistic", engine):
            return row
    raise PageError(f"simulator-latest.csv: no row for {device}, B 256, K 5, V {v}, block/probabilistic, {engine}")


def readme_headline(results: Results) -> str:
    """One number per claim: a simulated step's speed, and the decision study's wall time, on an H200."""
    step = _simulator_row(results, "NVIDIA H200", "128256", "ahead")
    share = float(step["steps_per_s"]) / float(step["floor_steps_per_s"])
    warm = [row for row in results.study if row["run"] == "warm" and row["mps"] == "yes" and row["V"] == "4096"]
    if not warm:
        raise PageError("study-latest.csv: no warm run under MPS at V = 4096")
    median = statistics.median(float(row["wall_s"]) for row in warm)
    return _prose(
        f"On an H200, one simulated step at batch size 256, K = 5 (block verification, probabilistic drafts, "
        f"V = 128256) runs at {_number(step['steps_per_s'])} steps/s, {share:.0%} of its logit-read floor "
        f"({step['date']}, {step['commit']}); `studies/decision.yaml` at V = 4096 with 8 workers under MPS "
        f"takes {median:.1f} s once Triton's cache holds its kernels (median of {len(warm)} runs, "
        f"{warm[-1]['date']}). Every measurement, with its date and commit: "
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
            [r["device"], r["batch_size"], r["K"], r["V"], f"{r['method']}/{r['draft']}", r["engine"],
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

Generated by `{_GENERATED_BY} performance` from `benchmarks/results/*-latest.csv`; do not edit.
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
second at which the logits of a step could only just be read once (`simulator-latest.csv`).

{simulator}
## Studies

Wall time of `spectune study run`, from the command to its last artefact (`study-latest.csv`).

{study}"""


def performance_texts(root: Path) -> dict[str, dict[str, str]]:
    """Each page's performance regions (and the whole performance page, under the name '')."""
    results = Results.read(root / "benchmarks" / "results")
    return {
        PERFORMANCE_PAGE: {"": performance_page(results)},
        "README.md": {"performance-headline": readme_headline(results)},
        "docs/kernels.md": {"kernels-headline": kernels_headline(results)},
    }


def write_performance(root: Path) -> list[str]:
    changed: list[str] = []
    for page, texts in performance_texts(root).items():
        path = root / page
        if "" in texts:
            if not path.is_file() or path.read_text(encoding="utf-8") != texts[""]:
                path.write_text(texts[""], encoding="utf-8")
                changed.append(page)
            continue
        changed += [f"{page}: {name}" for name in rewrite_regions(path, texts)]
    return changed


def check_performance(root: Path) -> list[str]:
    """What differs from the committed results, one line each; empty when every page is current."""
    stale: list[str] = []
    for page, texts in performance_texts(root).items():
        path = root / page
        if "" in texts:
            if not path.is_file() or path.read_text(encoding="utf-8") != texts[""]:
                stale.append(f"{page}: not what the committed results give; run '{_GENERATED_BY} performance'")
            continue
        found = regions(path)
        for name, text in texts.items():
            if name not in found:
                stale.append(f"{page}: region '{name}' missing (add its two marker lines)")
            elif found[name] != text:
                stale.append(f"{page}: region '{name}' is not what the committed results give; run "
                             f"'{_GENERATED_BY} performance'")  # fmt: skip
    return stale


# ---------------------------------------------------------------- examples


@dataclass(frozen=True)
class Example:
    """A command whose output a page shows: run in ``work``, its stdout shaped by ``shape``."""

    name: str
    shown: str  # the command line as the page shows it
    run: Callable[[Path], str]
    fence: str = "console"


def _spectune(work: Path, *arguments: str) -> str:
    # the width of the terminal the pages' readers are assumed to have; a pipe has none
    environment = {**os.environ, "COLUMNS": "100"}
    done = subprocess.run(
        [sys.executable, "-m", "spectune", *arguments], cwd=work, capture_output=True, text=True, env=environment
    )
    if done.returncode not in (0, 1):  # validate exits 1 on the invalid file it is shown with
        raise PageError(f"spectune {' '.join(arguments)}: exit {done.returncode}\n{done.stderr}")
    return done.stdout


_NEW_IN_THIS_RUN = re.compile(r"new in this run \(\d+ s\)")
_WALL_TIME_ROW = re.compile(r"^(│ wall time\s+│ )(.*?)(\s*│)$", re.MULTILINE)
_SECONDS = re.compile(r"\d+(?:\.\d+)? s\b")


def _without_wall_times(text: str) -> str:
    """The output with its wall times as ``…``: they measure the machine, and the rest is reproducible."""
    text = _NEW_IN_THIS_RUN.sub("new in this run (… s)", text)

    def blank(row: re.Match[str]) -> str:
        cell = _SECONDS.sub("… s", row.group(2))
        return row.group(1) + cell + " " * (len(row.group(2)) - len(cell)) + row.group(3)

    return _WALL_TIME_ROW.sub(blank, text)


def _command(line: str) -> Example:
    """An example that runs ``spectune ARGS`` (the line as the page shows it, split on spaces)."""
    arguments = line.split()[1:]
    return Example("", line, lambda work: _without_wall_times(_spectune(work, *arguments)))


def _head(path: str, lines: int) -> Callable[[Path], str]:
    return lambda work: "".join((work / path).read_text(encoding="utf-8").splitlines(keepends=True)[:lines])


def _validate(work: Path) -> str:
    (work / "spec.json").write_text('{"method": "ngram", "num_speculative_tokens": 0}\n', encoding="utf-8")
    return _spectune(work, "validate", "configs/", "spec.json")


def _named(name: str, example: Example) -> Example:
    return Example(name, example.shown, example.run, example.fence)


# In this order: the quickstart study writes the artefacts that the two after it show.
QUICKSTART = "example-quickstart-study"
EXAMPLES = (
    _named(QUICKSTART, _command("spectune study run studies/quickstart.yaml")),
    Example("example-quickstart-measure", "head -5 runs/quickstart/measure.sh", _head("runs/quickstart/measure.sh", 5)),
    Example("example-quickstart-sglang", "", _head("runs/quickstart/sglang.txt", 100), fence=""),
    _named("example-quickstart-measured-study", _command("spectune study run studies/quickstart-measured.yaml")),
    _named("example-simulate", _command("spectune simulate configs/simulations/llama-3.1-8b-eagle3-h100.yaml")),
    _named(
        "example-calibrate-log",
        _command(
            "spectune calibrate examples/logs/vllm-eagle3.log --out llama-eagle3.yaml --name llama-3.1-8b-eagle3 "
            "--method eagle3"
        ),
    ),
    Example("example-validate", "spectune validate configs/ spec.json", _validate),
)
_NEEDS_QUICKSTART = ("example-quickstart-measure", "example-quickstart-sglang")


def example_text(example: Example, output: str) -> str:
    shown = f"$ {example.shown}\n" if example.shown else ""
    return f"```{example.fence}\n{shown}{output}```\n"


def example_texts(root: Path, names: list[str]) -> dict[str, str]:
    """Each example region's text, by running its command (with the quickstart study where one shows its
    artefacts) in a fresh copy of the example documents."""
    wanted = set(names) | ({QUICKSTART} if set(names) & set(_NEEDS_QUICKSTART) else set())
    chosen = [e for e in EXAMPLES if not names or e.name in wanted]
    unknown = sorted(set(names) - {e.name for e in EXAMPLES})
    if unknown:
        raise PageError(f"no example {', '.join(unknown)}; examples: {', '.join(e.name for e in EXAMPLES)}")
    texts: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="spectune-docs-") as scratch:
        work = Path(scratch)
        for folder in ("configs", "studies", "examples"):
            shutil.copytree(root / folder, work / folder)
        for example in chosen:
            print(f"running {example.name}", file=sys.stderr, flush=True)
            texts[example.name] = example_text(example, example.run(work))
    return texts


def write_examples(root: Path, names: list[str]) -> list[str]:
    texts = example_texts(root, names)
    changed: list[str] = []
    for page in PAGES:
        changed += [f"{page}: {name}" for name in rewrite_regions(root / page, texts)]
    return changed


def check_examples(root: Path, names: list[str]) -> list[str]:
    """Each page region that differs from what its command prints now, one line each."""
    texts = example_texts(root, names)
    stale: list[str] = []
    for page in PAGES:
        found = regions(root / page)
        stale += [
            f"{page}: region '{name}' is not what '{_shown(name)}' prints now; run '{_GENERATED_BY} examples {name}'"
            for name, text in texts.items()
            if name in found and found[name] != text
        ]
    return stale


def _shown(name: str) -> str:
    return next(e.shown or e.name for e in EXAMPLES if e.name == name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("job", choices=("performance", "examples", "check", "check-examples"))
    parser.add_argument("names", nargs="*", help="examples: only these regions (default: all)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this one)")
    args = parser.parse_args(argv)
    try:
        if args.job in ("check", "check-examples"):
            stale = check_performance(args.root) if args.job == "check" else check_examples(args.root, args.names)
            for line in stale:
                print(line, file=sys.stderr)
            return 1 if stale else 0
        changed = write_performance(args.root) if args.job == "performance" else write_examples(args.root, args.names)
    except PageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print("\n".join(f"rewrote {line}" for line in changed) or "nothing changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

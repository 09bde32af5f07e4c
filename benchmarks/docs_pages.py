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
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from doc_regions import PageError, regions, rewrite_regions
from performance_page import GENERATED_BY, Results, kernels_headline, performance_page, readme_headline

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/calibration.md", "docs/configs.md", "docs/kernels.md", "docs/simulation.md",
         "docs/studies.md")  # fmt: skip
PERFORMANCE_PAGE = "docs/performance.md"


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
                stale.append(f"{page}: not what the committed results give; run '{GENERATED_BY} performance'")
            continue
        found = regions(path)
        for name, text in texts.items():
            if name not in found:
                stale.append(f"{page}: region '{name}' missing (add its two marker lines)")
            elif found[name] != text:
                stale.append(f"{page}: region '{name}' is not what the committed results give; run "
                             f"'{GENERATED_BY} performance'")  # fmt: skip
    return stale


# ---------------------------------------------------------------- examples


@dataclass(frozen=True)
class Example:
    """A command whose output a page shows: ``run`` runs it in a scratch folder and returns what it printed."""

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


def _command(name: str, line: str) -> Example:
    """An example that runs ``spectune ARGS`` (the line as the page shows it, split on spaces)."""
    arguments = line.split()[1:]
    return Example(name, line, lambda work: _without_wall_times(_spectune(work, *arguments)))


def _head(path: str, lines: int) -> Callable[[Path], str]:
    return lambda work: "".join((work / path).read_text(encoding="utf-8").splitlines(keepends=True)[:lines])


def _validate(work: Path) -> str:
    (work / "spec.json").write_text('{"method": "ngram", "num_speculative_tokens": 0}\n', encoding="utf-8")
    return _spectune(work, "validate", "configs/", "spec.json")


# In this order: the quickstart study writes the artefacts that the two after it show.
QUICKSTART = "example-quickstart-study"
EXAMPLES = (
    _command(QUICKSTART, "spectune study run studies/quickstart.yaml"),
    Example("example-quickstart-measure", "head -5 runs/quickstart/measure.sh", _head("runs/quickstart/measure.sh", 5)),
    Example("example-quickstart-sglang", "", _head("runs/quickstart/sglang.txt", 100), fence=""),
    _command("example-quickstart-measured-study", "spectune study run studies/quickstart-measured.yaml"),
    _command("example-simulate", "spectune simulate configs/simulations/llama-3.1-8b-eagle3-h100.yaml"),
    _command(
        "example-calibrate-log",
        "spectune calibrate examples/logs/vllm-eagle3.log --out llama-eagle3.yaml --name llama-3.1-8b-eagle3 "
        "--method eagle3",
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


def _shown_somewhere(root: Path, texts: dict[str, str]) -> None:
    shown = {name for page in PAGES for name in regions(root / page)}
    missing = sorted(set(texts) - shown)
    if missing:
        raise PageError(f"examples shown on no page: {', '.join(missing)} (add their two marker lines to one)")


def write_examples(root: Path, names: list[str]) -> list[str]:
    texts = example_texts(root, names)
    _shown_somewhere(root, texts)
    changed: list[str] = []
    for page in PAGES:
        changed += [f"{page}: {name}" for name in rewrite_regions(root / page, texts)]
    return changed


def check_examples(root: Path, names: list[str]) -> list[str]:
    """Each page region that differs from what its command prints now, one line each."""
    texts = example_texts(root, names)
    _shown_somewhere(root, texts)
    stale: list[str] = []
    for page in PAGES:
        found = regions(root / page)
        stale += [
            f"{page}: region '{name}' is not what '{_shown(name)}' prints now; run '{GENERATED_BY} examples {name}'"
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

"""The docs' numbers and example outputs are what ``benchmarks/docs_pages.py`` writes, never hand edits."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "docs_pages.py"
PAGES = ["README.md", *(f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md")))]
_BEGIN = re.compile(r"^<!-- generated: ([a-z0-9-]+) -->$", re.MULTILINE)


def _script(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *arguments], capture_output=True, text=True, check=False)


def _copy_of_the_pages(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    for page in PAGES:
        shutil.copy(ROOT / page, tmp_path / page)
    shutil.copytree(ROOT / "benchmarks" / "results", tmp_path / "benchmarks" / "results")
    return tmp_path


def _region(page: str, name: str) -> str:
    text = (ROOT / page).read_text(encoding="utf-8")
    begin, end = f"<!-- generated: {name} -->\n", f"<!-- end generated: {name} -->\n"
    return text[text.index(begin) + len(begin) : text.index(end)]


def test_the_performance_page_and_headlines_are_what_the_committed_results_give() -> None:
    done = _script("check")
    assert done.returncode == 0, done.stderr
    assert (ROOT / "docs" / "performance.md").is_file()


def test_every_row_of_the_performance_page_names_its_date_and_commit() -> None:
    rows = [
        line
        for line in (ROOT / "docs" / "performance.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("| ") and not line.startswith("| ---")
    ]
    headers = [row for row in rows if "| date |" in row]
    data = [row for row in rows if "| date |" not in row]
    assert len(headers) == 4 and len(data) > 150
    for row in data:
        assert re.search(r"\| 20\d\d-\d\d-\d\d \| ([0-9a-f]{7,40}|vLLM \d+\.\d+\.\d+) \|", row), row


def test_a_stale_headline_is_named_and_rewritten_alone(tmp_path: Path) -> None:
    root = _copy_of_the_pages(tmp_path)
    readme = root / "README.md"
    original = readme.read_text(encoding="utf-8")
    readme.write_text(original.replace(" steps/s, ", " steps a second, ", 1).replace("# spectune", "# spectune!"))

    done = _script("check", "--root", str(root))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "README.md: region 'performance-headline' is not what the committed results give; run "
        "'python benchmarks/docs_pages.py performance'"
    ]
    assert _script("performance", "--root", str(root)).returncode == 0
    assert readme.read_text(encoding="utf-8") == original.replace("# spectune", "# spectune!")


def test_a_results_row_without_its_commit_is_refused_by_file_and_line(tmp_path: Path) -> None:
    root = _copy_of_the_pages(tmp_path)
    results = root / "benchmarks" / "results" / "simulator-latest.csv"
    lines = results.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[2] = lines[2].replace(",fdf4760,", ",,")
    results.write_text("".join(lines), encoding="utf-8")

    done = _script("performance", "--root", str(root))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [f"error: {results}:3: commit: must be a git hash or 'vLLM X.Y.Z', got ''"], (
        "one line, no traceback"
    )


def test_a_region_left_open_is_refused_with_its_line(tmp_path: Path) -> None:
    root = _copy_of_the_pages(tmp_path)
    kernels = root / "docs" / "kernels.md"
    text = kernels.read_text(encoding="utf-8")
    line = text[: text.index("<!-- generated: kernels-headline -->")].count("\n") + 1
    kernels.write_text(text.replace("<!-- end generated: kernels-headline -->\n", ""), encoding="utf-8")

    done = _script("performance", "--root", str(root))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"error: {kernels}:{line}: region 'kernels-headline' has no end line '<!-- end generated: kernels-headline -->'"
    ]


def test_an_example_shown_on_two_pages_reads_the_same_on_both() -> None:
    shown: dict[str, dict[str, str]] = {}
    for page in PAGES:
        for name in _BEGIN.findall((ROOT / page).read_text(encoding="utf-8")):
            shown.setdefault(name, {})[page] = _region(page, name)
    assert set(shown["example-quickstart-study"]) == {"README.md", "docs/studies.md"}
    assert set(shown["example-quickstart-measure"]) == {"README.md", "docs/calibration.md"}
    for name, texts in shown.items():
        assert len(set(texts.values())) == 1, f"{name} differs between {', '.join(texts)}"


def test_the_fast_examples_are_what_their_commands_print_now() -> None:
    done = _script("check-examples", "example-validate", "example-calibrate-log", "example-simulate")
    assert done.returncode == 0, done.stderr
    assert "┃ tie set" in _region("docs/calibration.md", "example-quickstart-measured-study")


@pytest.mark.slow
def test_the_study_examples_are_what_the_studies_print_now() -> None:
    done = _script(
        "check-examples",
        "example-quickstart-study",
        "example-quickstart-measure",
        "example-quickstart-sglang",
        "example-quickstart-measured-study",
    )
    assert done.returncode == 0, done.stderr

"""Docstrings and comments give the why of a mechanism, never its measured seconds: those go stale.

Measured times belong in ``benchmarks/results`` and the generated ``docs/performance.md``. A claim is
a duration in the same clause as a comparison or an outcome ("1.3 s sooner", "took 29 s", "6.6-11 s
against ..."); a setting (``10 s by default``), a unit (``(seconds)``) or a reasoned interval ("polls
after 1 ms") is not one.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_DURATION = r"\d+(?:\.\d+)?(?:\s*[-–]\s*\d+(?:\.\d+)?)?\s*(?:s|ms|µs|us|seconds|minutes)\b"
CLAIM = re.compile(
    rf"{_DURATION}[^.;:]*?\b(?:sooner|faster|slower|against|where one had taken)\b"
    rf"|\b(?:took|takes|came|cost it|costs it|saves?|saved)\b[^.;:]*?{_DURATION}"
)


def _prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every docstring line and comment of a module."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                text = body[0].value.value
                if isinstance(text, str):
                    found += [(body[0].lineno + i, line) for i, line in enumerate(text.splitlines())]
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found.append((token.start[0], token.string))
    return found


def timing_claims(source: str) -> list[tuple[int, str]]:
    return [(line, text.strip()) for line, text in _prose(source) if CLAIM.search(text)]


@pytest.mark.parametrize(
    ("text", "claims"),
    [
        ('"""The first trial came 1.3 s sooner."""', True),
        ("# four processes took 49-58 s where one had taken 29 s", True),
        ('"""slower to the first trial (6.6-11 s against 6.1-6.2 s)."""', True),
        ("# vLLM logs every stats interval (10 s by default)", False),
        ('"""Fixed latency of one all-reduce (seconds)."""', False),
        ("# A wait polls after 1 ms, then twice as long each time", False),
        ("x = 'took 3 s'  # a string, not prose", False),
    ],
)
def test_the_claim_pattern_tells_a_measurement_from_a_setting(text: str, claims: bool) -> None:
    assert bool(timing_claims(text)) is claims


def test_no_docstring_or_comment_in_the_package_states_a_measured_time() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text}"
        for folder in ("spectune", "kernels")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, text in timing_claims(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "\n".join(found)

"""A package's ``__all__`` is what other stages, the CLI, the benchmarks or the docs use: nothing more.

Tests import internals from the ``_`` modules, as Optuna's tests do, so a name that only tests use is
not public. A name listed here but used nowhere outside its package is a promise nobody relies on.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("calibrate", "config", "cost", "export", "study", "workload")
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))


def _code_outside(package: str) -> list[Path]:
    inside = ROOT / "spectune" / package
    folders = (ROOT / "spectune", ROOT / "kernels", ROOT / "benchmarks", ROOT / "examples")
    return [path for folder in folders for path in sorted(folder.rglob("*.py")) if not path.is_relative_to(inside)]


def _used_names(package: str) -> set[str]:
    module = f"spectune.{package}"
    used: set[str] = set()
    for path in _code_outside(package):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == module:
                used.update(alias.name for alias in node.names)
            elif isinstance(node, ast.Attribute) and ast.unparse(node.value) == module:
                used.add(node.attr)
    return used


def _documented(name: str) -> bool:
    code_span = re.compile(rf"`[^`\n]*\b{re.escape(name)}\b[^`\n]*`")
    return any(code_span.search(page.read_text(encoding="utf-8")) for page in DOCS)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_is_used_outside_its_package_or_documented(package: str) -> None:
    exported = importlib.import_module(f"spectune.{package}").__all__
    used = _used_names(package)
    unused = sorted(name for name in exported if name not in used and not _documented(name))
    assert unused == [], f"spectune.{package} exports names nothing outside it uses: {', '.join(unused)}"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_the_package_exports_is_importable_from_it(package: str) -> None:
    module = importlib.import_module(f"spectune.{package}")
    assert len(set(module.__all__)) == len(module.__all__)
    assert [name for name in module.__all__ if not hasattr(module, name)] == []

"""spectune's modules import one way: no cycle, even through an import deferred into a function.

A function-level import may defer a heavy package (torch, Triton, Optuna) to keep the CLI fast; it
must never be what breaks a cycle. The graph is read from the source, so it holds every import,
deferred or not (imports under ``if TYPE_CHECKING:`` are left out: they never run).
"""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = {
    "spectune": REPO / "spectune",
    "spectune.kernels": REPO / "kernels",
}  # kernels/ installs as spectune.kernels


def _modules() -> dict[str, Path]:
    modules = {}
    for package, folder in PACKAGES.items():
        for file in folder.rglob("*.py"):
            parts = [package, *file.relative_to(folder).with_suffix("").parts]
            if package == "spectune" and parts[1:2] == ["kernels"]:
                continue  # the editable install's link to kernels/, if any
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = file
    return modules


def _imported(module: str, file: Path, modules: dict[str, Path]) -> set[str]:
    """The spectune modules ``module`` imports (a name imported from a module counts as that module)."""

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    tree = ast.parse(file.read_text())
    skipped = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for statement in block.body
        for node in ast.walk(statement)
    }
    targets: set[str | None] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets |= {owner(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if file.name == "__init__.py" else module.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            targets |= {owner(f"{base}.{alias.name}") for alias in node.names}
    return {target for target in targets if target is not None and target != module}


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_even_through_deferred_imports():
    modules = _modules()
    graph = {module: _imported(module, file, modules) for module, file in modules.items()}
    cycles = [sorted(c) for c in _cycles(graph)]
    assert not cycles, cycles


def test_the_graph_sees_deferred_and_relative_imports():
    modules = _modules()
    launcher = _imported("spectune.kernels._launcher", modules["spectune.kernels._launcher"], modules)
    assert "spectune.kernels._decision" in launcher  # `from . import _decision` inside a function
    assert "spectune.config._simulation" in _imported(
        "spectune.config._documents", modules["spectune.config._documents"], modules
    )

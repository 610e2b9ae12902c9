"""The layers point one way: no import cycles, and the core names no algorithm."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import flowrl
from flowrl.algorithms import NAMES

ROOT = Path(flowrl.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}


def imports(path: Path) -> set[str]:
    """The flowrl modules ``path`` imports, at the top or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
    return {name for name in found if name in MODULES}


def test_no_module_imports_one_that_imports_it_back():
    graph = {name: imports(path) for name, path in MODULES.items()}

    def cycle_from(start: str, node: str, seen: list[str]) -> list[str] | None:
        for nxt in sorted(graph[node]):
            if nxt == start:
                return [*seen, nxt]
            if nxt not in seen:
                found = cycle_from(start, nxt, [*seen, nxt])
                if found:
                    return found
        return None

    for name in sorted(graph):
        cycle = cycle_from(name, name, [name])
        assert cycle is None, " -> ".join(cycle)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_the_core_names_no_algorithm(name):
    """Outside algorithms/, code neither imports an algorithm nor spells one's name."""
    tree = ast.parse(MODULES[name].read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    pattern = re.compile(rf"\b({'|'.join(NAMES)})\b", re.IGNORECASE)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            assert not pattern.search(node.value), f"{name} names an algorithm: {node.value!r}"
        if isinstance(node, ast.ImportFrom) and node.module:
            assert not node.module.startswith("flowrl.algorithms."), f"{name} imports {node.module}"


def test_the_package_imports_its_names_on_first_use():
    """``import flowrl`` is light (a replay shard's process never loads torch); each public
    name still comes from ``flowrl`` and resolves to its module's object."""
    import subprocess
    import sys

    code = "import sys, flowrl; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert sorted(flowrl.__all__) == sorted(flowrl._HOMES)
    for name in flowrl.__all__:
        home = importlib.import_module(flowrl._HOMES[name])
        assert getattr(flowrl, name) is getattr(home, name)
    assert "Algorithm" in dir(flowrl)
    with pytest.raises(AttributeError, match="no attribute 'Algorithmm'"):
        flowrl.Algorithmm  # noqa: B018

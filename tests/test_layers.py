"""The layers point one way: each module imports only its own layer or those below it
(no cycles either), importing flowrl changes no global state, and the core names no
algorithm."""

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

#: flowrl's layers, lowest first: a module imports only from its own layer or one below.
LAYERS = ("core", "replay", "learning", "rollout", "ops", "diagnostics", "run", "apps")


def layer_of(module: str) -> int | None:
    """The index of the layer ``module`` belongs to (None: the package's own entry points,
    ``flowrl`` and ``flowrl.__main__``, which sit on top)."""
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def imports(path: Path) -> set[str]:
    """The flowrl modules ``path`` imports, at the top or inside functions."""
    return imported(path.read_text())


def imported(source: str) -> set[str]:
    """The flowrl modules a module's ``source`` imports, at the top or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
    return {name for name in found if name in MODULES}


def upward_imports(name: str, source: str) -> list[str]:
    """The imports of module ``name`` (with this ``source``) that reach a higher layer."""
    own = layer_of(name)
    return sorted(m for m in imported(source) if own is not None and (layer_of(m) or 0) > own)


def test_every_module_is_in_a_layer():
    loose = [name for name in MODULES if layer_of(name) is None]
    assert sorted(loose) == ["flowrl", "flowrl.__main__"]


@pytest.mark.parametrize("name", sorted(n for n in MODULES if layer_of(n) is not None))
def test_a_module_imports_only_its_own_layer_and_those_below(name):
    assert upward_imports(name, MODULES[name].read_text()) == []


def test_the_layer_check_fails_on_an_import_from_a_higher_layer():
    """A deliberate bad import: the learner reaching up into the runner."""
    source = MODULES["flowrl.learning.learner"].read_text()
    bad = source + "\nfrom flowrl.run.algorithm import Algorithm\n"
    assert upward_imports("flowrl.learning.learner", bad) == ["flowrl.run.algorithm"]
    inside = source + "\ndef f():\n    from flowrl.apps import cli\n"
    assert upward_imports("flowrl.learning.learner", inside) == ["flowrl.apps.cli"]


@pytest.mark.slow
def test_importing_flowrl_changes_no_global_state():
    """No warnings filter, environment variable or torch setting changes on importing
    flowrl's modules (its dependencies are imported first: what they do is theirs)."""
    import subprocess
    import sys

    ours = (
        "import flowrl, flowrl.run.algorithm, flowrl.apps.cli, flowrl.apps.inference\n"
        "from flowrl.algorithms import ppo, dqn, sac, impala, appo, apex, a3c\n"
    )
    deps = subprocess.run(
        [sys.executable, "-c", ours + "import sys; print(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    third_party = sorted(m for m in deps if not m.startswith(("flowrl", "_")))
    code = (
        f"import importlib\nfor m in {third_party!r}:\n"
        "    try: importlib.import_module(m)\n"
        "    except Exception: pass\n"
        "import os, warnings, torch\n"
        "env, filters = dict(os.environ), list(warnings.filters)\n"
        "threads = torch.get_num_threads()\n"
        + ours
        + "print(dict(os.environ) == env, warnings.filters == filters,"
        " torch.get_num_threads() == threads)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "True"]


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
    """``import flowrl`` is light (a replay shard's process never loads torch, nor does a
    rollout worker that acts in numpy); each public name still comes from ``flowrl`` and
    resolves to its module's object."""
    import subprocess
    import sys

    code = (
        "import sys, flowrl, flowrl.rollout.worker, flowrl.learning.numpy_policy; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert sorted(flowrl.__all__) == sorted(flowrl._HOMES)
    for name in flowrl.__all__:
        home = importlib.import_module(flowrl._HOMES[name])
        assert getattr(flowrl, name) is getattr(home, name)
    assert "Algorithm" in dir(flowrl)
    with pytest.raises(AttributeError, match="no attribute 'Algorithmm'"):
        flowrl.Algorithmm  # noqa: B018


def test_no_class_is_over_220_lines_and_no_function_over_60():
    """The house rules (CONTRIBUTING.md): a class that outgrows 220 lines, or a function
    60, holds more than one thing; split it."""
    long = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            limit = {ast.ClassDef: 220, ast.FunctionDef: 60}.get(type(node))
            if limit and node.end_lineno - node.lineno + 1 > limit:
                long.append(f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not long, long

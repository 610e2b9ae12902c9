"""The documentation: the site builds with no broken link or reference, every public
operator, config class and command has an entry with an example, and the README's
commands parse and its figures come from the benchmarks' results files."""

from __future__ import annotations

import inspect
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import flowrl
import flowrl.ops
from flowrl.apps.cli import build_parser, command_examples, main
from flowrl.run.spec import list_algorithms

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(Path(sys.executable).parent)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "operators" / "index.html").exists()
    for page in tmp_path.rglob("*.html"):  # how the pages read, not only that they build
        html = page.read_text()
        quoted = re.findall(r"<blockquote>(.*?)</blockquote>", html, re.S)
        assert not [q for q in quoted if "&gt;&gt;&gt;" in q], f"{page}: an example as quotes"
        roles = re.findall(r":(?:class|func|meth|mod|attr|data|exc):", html)
        assert not roles, f"{page} shows Sphinx roles as text: {roles[:3]}"
        assert '<span class="c1"># doctest' not in html, f"{page} shows doctest directives"
    configs = (tmp_path / "reference" / "configs" / "index.html").read_text()
    assert "num_envs_per_worker" in configs and "param(" not in configs


def test_every_public_name_has_a_reference_entry():
    entries = "\n".join(p.read_text() for p in DOCS.rglob("*.md"))
    for name in flowrl.__all__:
        home = f"{flowrl._HOMES[name]}.{name}"
        assert f"::: {home}\n" in entries, f"flowrl.{name} has no entry (::: {home}) in docs/"


def test_every_operator_has_an_entry_and_an_example():
    page = (DOCS / "operators.md").read_text()
    for name in flowrl.ops.__all__:
        assert f"::: flowrl.ops.{name}\n" in page, f"{name} has no entry in docs/operators.md"
        obj = getattr(flowrl.ops, name)
        if not (isinstance(obj, type) and issubclass(obj, Exception)):
            assert ">>>" in (inspect.getdoc(obj) or ""), f"{name}'s docstring has no example"


def test_every_algorithm_config_has_an_entry_and_an_example():
    page = (DOCS / "reference" / "configs.md").read_text()
    for spec in list_algorithms():
        cls = spec.config_cls
        assert f"::: algorithms.{spec.name}.{cls.__name__}\n" in page, cls.__name__
        assert ">>>" in (inspect.getdoc(cls) or ""), f"{cls.__name__} has no example"


def commands_in(text: str) -> list[str]:
    """The ``flowrl ...`` commands in the text's fenced code blocks (one per line or per
    ``&&`` step; comments dropped)."""
    found = []
    for block in re.findall(r"```(?:bash|console)?\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():  # continued lines joined
            for step in line.split("&&"):
                step = step.split(" #")[0].strip()
                if step.startswith("flowrl "):
                    found.append(step)
    return found


def parses(command: str) -> None:
    """``command`` is a valid ``flowrl`` command line (parsed, not run)."""
    args = shlex.split(command)[1:]
    try:
        build_parser().parse_args(args)
    except SystemExit as e:
        pytest.fail(f"{command!r} does not parse (exit {e.code})")


def test_every_command_has_a_section_with_examples_that_parse():
    page = (DOCS / "reference" / "cli.md").read_text()
    sub = next(a for a in build_parser()._actions if isinstance(a.choices, dict))
    for name in sub.choices:
        section = page.split(f"## `flowrl {name}`", 1)
        assert len(section) == 2, f"flowrl {name} has no section in docs/reference/cli.md"
        examples = commands_in(section[1].split("\n## ", 1)[0])
        assert examples and all(e.startswith(f"flowrl {name}") for e in examples), name
        for command in examples:
            parses(command)


def test_every_commands_help_ends_in_examples_that_parse():
    sub = next(a for a in build_parser()._actions if isinstance(a.choices, dict))
    for name, command in sub.choices.items():
        examples = command_examples(command.get_default("func")).splitlines()[1:]
        assert examples and command.format_help().endswith(examples[-1] + "\n"), name
        for example in examples:
            assert example.strip().startswith(f"flowrl {name}"), example
            parses(example.split(" #")[0].strip())


def test_the_readme_is_short_and_its_commands_parse():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    commands = commands_in(text)
    assert "flowrl train ppo --env CartPole-v1" in commands  # the main job
    for command in commands:
        parses(command)


def numbers_in_results() -> set[float]:
    """Every number in benchmarks/results/*.json: values, and those in key names
    (``reached_1000_at``)."""
    found: set[float] = set()

    def walk(value) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                found.update(float(n) for n in re.findall(r"\d+(?:\.\d+)?", str(key)))
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            found.add(float(value))

    for path in (ROOT / "benchmarks" / "results").glob("*.json"):
        walk(json.loads(path.read_text()))
    return found


def test_the_readme_figures_come_from_the_results_files():
    text = README.read_text()
    table = text.split("## Algorithms", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|") for line in table.splitlines() if line.startswith("| `")]
    assert {r[1].strip(" `") for r in rows} == {s.name for s in list_algorithms()}
    measured = numbers_in_results()
    for row in rows:
        figure = re.sub(r"[A-Za-z]+-v\d+", "", row[3])  # env ids are not figures
        for number in re.findall(r"\d[\d,]*(?:\.\d+)?", figure):
            value = float(number.replace(",", ""))
            decimals = len(number.split(".")[1]) if "." in number else 0
            assert any(round(m, decimals) == value for m in measured), (
                f"{row[1].strip()}: {number} is in no file of benchmarks/results/"
            )


def python_block_after(text: str, heading: str) -> str:
    """The first fenced python block after ``heading``."""
    return re.search(r"```python\n(.*?)```", text.split(heading, 1)[1], re.S).group(1)


@pytest.mark.parametrize(
    ("page", "heading"), [(README, "## A plan in ten lines"), (DOCS / "plans.md", "# Your own")]
)
def test_the_plan_file_of_the_docs_runs_as_written(page, heading, tmp_path, capsys):
    """Saved as my_plan.py, the example runs with python and with flowrl train FILE:plan."""
    (tmp_path / "my_plan.py").write_text(python_block_after(page.read_text(), heading))
    done = subprocess.run(
        [sys.executable, "my_plan.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    float(done.stdout.strip().splitlines()[-1])  # the return it printed
    command = next(c for c in commands_in_text(page.read_text()) if "my_plan.py:plan" in c)
    args = [*shlex.split(command)[1:], "--num-workers", "0", "--stop-iters", "1"]
    args[1] = str(tmp_path / args[1])
    assert main([*args, "--no-progress", "--output", str(tmp_path / "run")]) == 0


def commands_in_text(text: str) -> list[str]:
    """The ``flowrl ...`` commands quoted inline (`flowrl train ...`), line breaks joined."""
    return [" ".join(c.split()) for c in re.findall(r"`(flowrl [^`]+)`", text, re.S)]


# docs commands the suite does not run, and why (each still parses)
NOT_RUN = {
    "flowrl tune": "Ray Tune sweeps of several trials: tests/test_sweeps.py runs sweeps",
    "--stop-timesteps 100000": "a budget of 100k DQN steps, tens of seconds",
    "lr=[[0, 3e-4]": "a schedule over 1M env steps",
    "exploration_eps=[[0": "DQN to the reward threshold, tens of seconds",
    "--mlflow-uri http": "a tracking server that is not there",
    "evaluation_interval=10 --video": "videos every 10 iterations until solved",
    # the same commands on other runs elsewhere in the suite (each a training run here)
    "--logger mlflow": "tests/test_tracking.py and test_callbacks.py train with MLflow",
    "--video videos": "tests/test_evaluation.py records an evaluation's videos",
}


def runnable(command: str) -> bool:
    """A real command line, not a usage line (``ALGO``, ``[--flag]``), and quick."""
    usage = re.search(r"\b[A-Z][A-Z_]{2,}\b|\[", command.split(" --set ")[0])
    return not usage and not any(marker in command for marker in NOT_RUN)


@pytest.mark.slow
def test_the_commands_in_the_docs_run(tmp_path, monkeypatch, capsys, a_display):
    """Every quick command of the getting-started page, the command reference, the
    evaluation and the tracking pages runs as written (a run directory that a page names
    with TIME is the one the reference's first train wrote; ``--render`` draws to a
    display as a desktop's)."""
    monkeypatch.chdir(tmp_path)
    pages = ["getting-started.md", "reference/cli.md", "evaluation.md", "sweeps.md"]
    commands = [c for page in pages for c in commands_in((DOCS / page).read_text())]
    ran = []
    for command in commands:
        parses(command)
        if not runnable(command):
            continue
        command = re.sub(r"runs/\w+_CartPole-v1_TIME", "runs/ppo", command)
        args = [*shlex.split(command)[1:]]
        if args[0] == "train":
            args.append("--no-progress")
        assert main(args) == 0, f"{command!r}: {capsys.readouterr().err[-500:]}"
        ran.append(command)
    assert len(ran) >= 10, ran
    assert (tmp_path / "policy.onnx").exists() and (tmp_path / "curves.png").exists()

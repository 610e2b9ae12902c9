"""The release: ``python -m build`` makes the sdist and the wheel of the distribution
``flowrl-ray`` (the import package and the command are ``flowrl``), ``twine check`` passes
them, and the wheel holds what it should, asks for what it should, and runs the main
command installed in a fresh venv (its dependencies seen from this one's site-packages, so
nothing downloads)."""

from __future__ import annotations

import email
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import flowrl

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


DIST = "flowrl_ray"  # the distribution's name in file names


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """The sdist and the wheel (built from the sdist), as a release makes them."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="module")
def wheel(dist) -> Path:
    (path,) = dist.glob(f"{DIST}-{flowrl.__version__}-*.whl")
    return path


def test_the_release_builds_and_passes_twine_check(dist):
    (sdist,) = dist.glob(f"{DIST}-{flowrl.__version__}.tar.gz")
    files = [str(sdist), *map(str, dist.glob("*.whl"))]
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *files], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2


def test_the_changelog_has_the_release_of_this_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert f"\n## {flowrl.__version__} - " in text
    readme = (ROOT / "README.md").read_text()
    assert f"dist/{DIST}-{flowrl.__version__}-py3-none-any.whl" in readme  # its install line


def test_the_wheel_holds_the_license_the_typed_marker_and_the_algorithms(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    dist_info = f"{DIST}-{flowrl.__version__}.dist-info"
    assert f"{dist_info}/licenses/LICENSE" in names
    assert "flowrl/py.typed" in names
    assert "flowrl/algorithms/ppo.py" in names
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "notebooks/"))]


def test_the_wheel_asks_for_the_extras_packages_only_with_their_extra(wheel):
    with zipfile.ZipFile(wheel) as z:
        meta = email.message_from_bytes(z.read(f"{DIST}-{flowrl.__version__}.dist-info/METADATA"))
    assert meta["Name"] == "flowrl-ray"
    required = [r for r in meta.get_all("Requires-Dist") if "extra ==" not in r]
    names = {r.split(">")[0].split(";")[0].split("[")[0].strip() for r in required}
    assert {"ray", "torch", "numpy", "gymnasium"} <= names
    assert not names & {"opencv-python-headless", "moviepy", "mlflow", "wandb", "onnx"}
    assert meta["License-Expression"] == "Apache-2.0"
    extras = [r.split(";") for r in meta.get_all("Requires-Dist") if ";" in r]
    notebook = {name.split(">")[0] for name, marker in extras if "notebook" in marker}
    assert {"jupyterlab", "nbconvert", "ipykernel"} <= notebook, notebook  # a front end
    assert "Programming Language :: Python :: 3.11" in meta.get_all("Classifier")


def test_the_installed_wheel_runs_in_a_fresh_venv(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python, flowrl_cmd = venv / "bin" / "python", venv / "bin" / "flowrl"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "-q", str(wheel)],
        check=True,
    )  # fmt: skip
    # the dependencies from this venv, listed after the fresh one's own site-packages (a
    # .pth line is a path, not a site dir: this venv's editable flowrl is not picked up)
    purelib = Path(
        subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            text=True,
        ).strip()
    )
    (purelib / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    def run(*cmd: str) -> str:
        done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert run(str(flowrl_cmd), "--version").strip() == f"flowrl {flowrl.__version__}"
    assert "ppo" in run(str(flowrl_cmd), "list")
    # the main job's command (tests/test_docs.py runs it to the end)
    main_job = ["train", "ppo", "--env", "CartPole-v1", "--no-progress", "--stop-iters", "2"]
    assert "flowrl: stopped by iterations" in run(str(flowrl_cmd), *main_job)
    where = run(str(python), "-c", "import flowrl.algorithms.ppo as m; print(m.__file__)")
    assert where.startswith(str(purelib)), where

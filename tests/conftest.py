"""Shared fixtures: one Ray session for every Ray-backed test."""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import settings

TESTS_DIR = os.path.dirname(__file__)


def prepend_to_pythonpath(folder: str) -> None:
    """Put ``folder`` first on the path of the processes started from here on."""
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (folder, os.environ.get("PYTHONPATH")) if p
    )


# Every process of the suite (this one, Ray's workers, the commands it runs) finds the
# stand-ins of tests/stubs first: importing Ray otherwise costs each of them 0.9 s more
# where JupyterLab's dependencies brought in rfc3987-syntax (tests/stubs/rfc3987_syntax.py)
STUBS = os.path.join(TESTS_DIR, "stubs")
sys.path.insert(0, STUBS)
prepend_to_pythonpath(STUBS)

# pytest-xdist runs the suite in worker processes side by side. Each keeps its Ray apart
# under a temp dir of its own: ray.init() without an address joins the cluster named in
# the temp dir's ray_current_cluster, which a test's ray.cluster_utils.Cluster writes.
# The dir also holds Ray's sockets, whose paths must stay short.
# Each process's torch (and the commands and notebooks it starts) also takes only its share
# of the cores: torch's threads wait for each other between ops by spinning, so two
# processes each running two threads on two cores took 6-23 times as long per test.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["RAY_TMPDIR"] = f"/tmp/flowrl-{os.environ['PYTEST_XDIST_WORKER']}"
    os.makedirs(os.environ["RAY_TMPDIR"], exist_ok=True)
    share = (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    os.environ["OMP_NUM_THREADS"] = str(max(1, share))

settings.register_profile("flowrl", deadline=None, max_examples=60)
settings.load_profile("flowrl")


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray instance shared by the whole test session."""
    import ray

    from flowrl import init_ray

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    prepend_to_pythonpath(TESTS_DIR)  # Ray's workers import the test modules' actor classes
    if not ray.is_initialized():
        init_ray(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    yield ray
    ray.shutdown()


@pytest.fixture(
    params=[
        pytest.param(False, id="ray tasks", marks=pytest.mark.slow),
        pytest.param(True, id="channels"),
    ]
)
def channels(request):
    """Whether a test's plan calls its actors over channels or as Ray tasks: the default
    (channels) in the quick tier; Ray tasks, the fallback, in the whole suite."""
    return request.param


@pytest.fixture
def cluster_env():
    """The environment of a subprocess that starts a Ray cluster of its own
    (``ray.cluster_utils.Cluster``): a Ray temp dir of its own, where the cluster names
    itself for ray.init() calls to join, so later tests do not join it once it is gone."""
    import shutil
    import tempfile

    ray_tmp = tempfile.mkdtemp(prefix="flowrl-cluster-", dir="/tmp")  # short socket paths
    yield {**os.environ, "RAY_TMPDIR": ray_tmp}
    shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.fixture
def a_display(monkeypatch):
    """A display as a desktop has one, drawn to by SDL's dummy driver: the windows the
    envs open are real pygame windows, shown nowhere. Returns the frames drawn."""
    pygame = pytest.importorskip("pygame")
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    drawn = []
    for name in ("flip", "update"):  # the two ways a pygame window shows a new frame
        shown = getattr(pygame.display, name)
        monkeypatch.setattr(pygame.display, name, lambda *a, f=shown: drawn.append(1) or f(*a))
    return drawn

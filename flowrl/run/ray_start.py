"""Starting Ray for flowrl: the settings its data path is measured with.

A fragment comes back from a rollout worker as the reply to its request. Ray sends a
reply of up to ``max_direct_call_object_size`` bytes (100 KiB by default) inline and puts
anything larger in the object store, which costs a round trip to the raylet on both ends.
A CartPole fragment of 250 steps x 8 envs is about 104 KiB, so by default every one took
the slow path: 2.4 ms per call instead of 1.2 ms, and the raylet spent 6% of a core
copying them. flowrl starts Ray with the limit at 512 KiB (a 500 KB reply: 1.4 ms inline,
2.7 ms through the store); image fragments (megabytes) still go through the store, whose
reads are zero-copy. Measured on a 2-core host: ``benchmarks/sampling.py``.

A local Ray's worker processes also import from the directories this process added to
its ``sys.path`` (a notebook's ``sys.path.append("envs/")``): they are put on the workers'
``PYTHONPATH``, so an env module the driver imports, Ray's workers import too.

Examples:
    >>> init_ray(num_cpus=2, include_dashboard=False)  # doctest: +SKIP
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

# Ray's settings for a cluster flowrl starts; a cluster you start keeps its own
RAY_SYSTEM_CONFIG = {"max_direct_call_object_size": 512 * 1024}


def init_ray(**kwargs: Any) -> Any:
    """``ray.init(**kwargs)`` with flowrl's ``RAY_SYSTEM_CONFIG`` when it starts a new
    local Ray (joining a running cluster with ``address`` takes that cluster's)."""
    import ray

    if kwargs.get("address") is None:
        system = {**RAY_SYSTEM_CONFIG, **kwargs.pop("_system_config", {})}
        kwargs["_system_config"] = system
        if (paths := added_paths()) and "runtime_env" not in kwargs:
            given = os.environ.get("PYTHONPATH")
            joined = os.pathsep.join([*paths, given] if given else paths)
            kwargs["runtime_env"] = {"env_vars": {"PYTHONPATH": joined}}
    return ray.init(**kwargs)


def added_paths() -> list[str]:
    """The directories on this process's ``sys.path`` that a new interpreter of the same
    Python (as a Ray worker is) would not have, less the script's and the working
    directory, which Ray adds itself. Asked of a new interpreter, not guessed: its
    ``.pth`` files, user site and PYTHONPATH are the workers' too. Passing directories costs
    Ray's start a few seconds, so only what this process added is passed."""
    show = "import sys; print('\\n'.join(sys.path))"
    fresh = subprocess.run([sys.executable, "-c", show], capture_output=True, text=True)
    have = {os.path.realpath(p) for p in [*fresh.stdout.splitlines(), sys.path[0], os.curdir]}
    out = [os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)]
    return list(dict.fromkeys(p for p in out if p not in have))

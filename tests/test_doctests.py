"""Every ``>>>`` example in the package runs (illustrative ones say ``# doctest: +SKIP``)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest
import ray

import flowrl
import flowrl.algorithms


def modules() -> list[str]:
    found = pkgutil.walk_packages(flowrl.__path__, "flowrl.")
    shipped = pkgutil.walk_packages(flowrl.algorithms.__path__, "flowrl.algorithms.")
    return sorted({"flowrl", *(m.name for m in [*found, *shipped])})


@pytest.mark.parametrize("name", modules())
def test_examples_run(name):
    module = importlib.import_module(name)
    ray_was_up = ray.is_initialized()
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(module, optionflags=flags, verbose=False, report=True)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
    # a running example that starts Ray would leave it up without the test session's setup
    assert ray_was_up or not ray.is_initialized(), f"an example in {name} started Ray: +SKIP it"

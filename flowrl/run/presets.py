"""Presets: settings known to learn a family of envs, applied under your own values.

A run on an Atari id (``ALE/...``), a gymnasium MuJoCo env, or one of gymnasium's lunar
lander, walker, pendulum and mountain cars gets its algorithm's preset for that family, when
there is one, in place of the CartPole-sized defaults; anything you set yourself
(``--set``, a config file, keyword arguments) still wins, and ``preset=false`` turns
presets off. ``flowrl list ALGO --env ID`` shows what a run would use. Atari ids also get
ale-py's standard preprocessing and the Nature CNN whatever the preset (see
``flowrl.rollout.envs`` and ``flowrl.learning.models``).

Each algorithm file lists its presets (``PRESETS``, in its spec); each names where its
numbers come from. Where the source schedules a value (a linearly decaying learning rate,
say), the preset gives that schedule or takes its starting value, and says which.

Examples:
    >>> from flowrl.run.algorithm import get_algorithm
    >>> preset_for(get_algorithm("ppo"), "ALE/Pong-v5").values["clip_param"]
    0.1
    >>> preset_for(get_algorithm("ppo"), "CartPole-v1") is None
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flowrl.rollout.envs import gymnasium_family, is_atari, resolve_env

ATARI, MUJOCO = "atari", "mujoco"
LUNAR_LANDER, BIPEDAL_WALKER = "lunar lander", "bipedal walker"
PENDULUM, MOUNTAIN_CAR = "pendulum", "mountain car"
CONTINUOUS_MOUNTAIN_CAR = "continuous mountain car"
#: the families of single gymnasium envs, by their name (the id without its version); the
#: hardcore walker learns with other settings than its twin
ONE_ENV_FAMILIES = {
    "LunarLander": LUNAR_LANDER,
    "LunarLanderContinuous": LUNAR_LANDER,
    "BipedalWalker": BIPEDAL_WALKER,
    "Pendulum": PENDULUM,
    "MountainCar": MOUNTAIN_CAR,
    "MountainCarContinuous": CONTINUOUS_MOUNTAIN_CAR,
}


@dataclass(frozen=True)
class Preset:
    """An algorithm's settings for a family of envs (``ATARI``, ``MUJOCO``), and where
    they come from. An algorithm file lists its own in its ``AlgorithmSpec``
    (``presets=``). ``budget``: the env steps a run takes when it is given no stop, in
    place of the algorithm's default (``StopCriteria.default_for``): the source's, or fewer
    where those were enough here. It goes with the values: a run whose config does not
    hold them (``flowrl.run.spec.carries``) keeps the algorithm's default."""

    family: str
    source: str
    values: dict[str, Any]
    budget: int | None = None


def env_family(env: str) -> str | None:
    """``"atari"`` for ale-py's ids, ``"mujoco"`` for gymnasium's MuJoCo envs, and for a
    few single gymnasium envs their own (``ONE_ENV_FAMILIES``: the lunar lander, discrete or
    continuous, the walker, the pendulum, the mountain cars), else None: the racing car
    (from pixels) and the hardcore walker learn with other settings, CartPole and Acrobot
    with the defaults.

    Examples:
        >>> env_family("Pendulum-v1"), env_family("BipedalWalkerHardcore-v3")
        ('pendulum', None)
    """
    if is_atari(env):
        return ATARI
    try:
        target = resolve_env(env)
    except Exception:  # an unknown env is reported where it is used, not here
        return None
    family = gymnasium_family(target)
    if family == "mujoco":
        return MUJOCO
    return ONE_ENV_FAMILIES.get(target.name) if family else None  # gymnasium's own envs


def preset_for(spec: Any, env: str) -> Preset | None:
    """The preset of the algorithm ``spec`` (an AlgorithmSpec) for ``env``'s family."""
    family = env_family(env)
    return next((p for p in spec.presets if p.family == family), None)

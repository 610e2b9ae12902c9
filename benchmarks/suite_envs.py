"""The third-party envs of ``suite.py``, as the ``module:factory`` env names ``flowrl train``
takes (``--env suite_envs:doorkey_5x5``); ``suite.py`` puts this folder on the path.

MiniGrid's observation holds a Text mission (the same sentence in every DoorKey episode), so
the factories keep its 7x7x3 egocentric image, flattened for the MLP, as RL Zoo's PPO does
with its observation wrapper. POPGym's envs are gymnasium envs already.
"""

from __future__ import annotations

import gymnasium as gym


def _minigrid(env_id: str) -> gym.Env:
    import minigrid  # noqa: F401  (registers the MiniGrid-* ids)
    from minigrid.wrappers import ImgObsWrapper

    return gym.wrappers.FlattenObservation(ImgObsWrapper(gym.make(env_id)))


def doorkey_5x5() -> gym.Env:
    return _minigrid("MiniGrid-DoorKey-5x5-v0")


def doorkey_8x8() -> gym.Env:
    return _minigrid("MiniGrid-DoorKey-8x8-v0")


def _popgym(name: str) -> gym.Env:
    import popgym.envs

    return getattr(popgym.envs, name)()


def repeat_previous_easy() -> gym.Env:
    return _popgym("RepeatPreviousEasy")


def position_only_cartpole_easy() -> gym.Env:
    return _popgym("PositionOnlyCartPoleEasy")


def repeat_previous_medium() -> gym.Env:
    return _popgym("RepeatPreviousMedium")


def position_only_cartpole_medium() -> gym.Env:
    return _popgym("PositionOnlyCartPoleMedium")

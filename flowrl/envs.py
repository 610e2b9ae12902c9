"""Environment creation: gymnasium vector envs in NEXT_STEP autoreset mode.

A registered vectorised implementation (CartPole's numpy one, say) is used when the env has
one; otherwise a ``SyncVectorEnv`` of copies. Atari ids (``ALE/...``) use ale-py's native
vector env with the standard preprocessing (84x84 grey frames, 4 stacked, frame skip 4).

Example:
    >>> env = make_vector_env("CartPole-v1", num_envs=4, seed=0)
    >>> env.num_envs, env.single_action_space
    (4, Discrete(2))
"""

from __future__ import annotations

import importlib

import gymnasium as gym

from flowrl.config import ConfigError


def _register_atari() -> None:
    import ale_py

    gym.register_envs(ale_py)


def is_atari(env_id: str) -> bool:
    return env_id.startswith("ALE/")


def check_env_id(env_id: str) -> gym.envs.registration.EnvSpec:
    """The env's spec, or a ConfigError that names the id (with gymnasium's suggestion).
    ``module:EnvId-v0`` imports ``module`` first (where it registers its envs), as
    gymnasium's own ``make`` does; every worker does the same."""
    if is_atari(env_id):
        _register_atari()
    module, sep, env_id = env_id.rpartition(":")
    if sep:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ConfigError(f"cannot import {module} for env {env_id}: {e}") from None
    try:
        return gym.spec(env_id)
    except gym.error.Error as e:
        raise ConfigError(f"unknown env id '{env_id}': {e}") from None


def make_vector_env(
    env_id: str, *, num_envs: int, seed: int, num_threads: int = 0
) -> gym.vector.VectorEnv:
    """A vector env of ``num_envs`` copies in NEXT_STEP autoreset mode (seed it on reset).

    ``num_threads`` bounds the threads of a natively threaded env (ale-py's Atari vector
    env); 0 leaves the env's default, a thread per core.
    """
    spec = check_env_id(env_id)
    try:
        env = _make(env_id, spec, num_envs, num_threads)
    except gym.error.DependencyNotInstalled as e:
        raise ConfigError(f"{env_id} needs a package that is not installed: {e}") from None
    mode = env.metadata.get("autoreset_mode")
    if mode is not None and getattr(mode, "name", str(mode)) != "NEXT_STEP":
        raise ValueError(f"{env_id}: expected NEXT_STEP autoreset, got {mode}")
    env.action_space.seed(seed)
    return env


def _make(
    env_id: str, spec: gym.envs.registration.EnvSpec, num_envs: int, num_threads: int
) -> gym.vector.VectorEnv:
    if is_atari(env_id):
        from ale_py.vector_env import AtariVectorEnv

        return AtariVectorEnv(
            game=_ale_game(env_id),
            num_envs=num_envs,
            num_threads=num_threads,
            reward_clipping=False,
        )
    if spec.vector_entry_point is not None:
        return gym.make_vec(spec.id, num_envs=num_envs, vectorization_mode="vector_entry_point")
    return gym.make_vec(spec.id, num_envs=num_envs, vectorization_mode="sync")


def _ale_game(env_id: str) -> str:
    """``ALE/Pong-v5`` -> ``pong``."""
    name = env_id.split("/", 1)[1].split("-")[0]
    return "".join("_" + c.lower() if c.isupper() and i else c.lower() for i, c in enumerate(name))


def reward_threshold(env_id: str) -> float | None:
    """The env's registered reward threshold, if it has one."""
    return check_env_id(env_id).reward_threshold

"""Environment creation: gymnasium vector envs in NEXT_STEP autoreset mode.

An env is named by a string, so that configs, checkpoints and Ray workers can carry it:

- a gymnasium id (``CartPole-v1``), or ``module:EnvId-v0`` to import the module that
  registers it first;
- ``package.module:ClassOrFactory``: a ``gymnasium.Env`` subclass or a function returning
  an env, imported by every process that builds one; a ``gymnasium.vector.VectorEnv``
  subclass or a function taking ``num_envs`` makes all of a worker's envs at once and is
  stepped as it is (NEXT_STEP autoreset), with no loop of flowrl's over its envs;
- a name given to ``register_env`` (the creator travels to Ray workers with them).

The config's ``env_config`` is passed to the creator (or to ``gymnasium.make``) as keyword
arguments. A registered vectorised implementation (CartPole's numpy one, say) is used when
the env has one; otherwise a ``SyncVectorEnv`` of copies. Atari ids (``ALE/...``) use
ale-py's native vector env with the standard preprocessing (84x84 grey frames, 4 stacked,
frame skip 4).

Examples:
    >>> env = make_vector_env("CartPole-v1", num_envs=4, seed=0)
    >>> env.num_envs, env.single_action_space
    (4, Discrete(2))
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from flowrl.core.config import ConfigError
from flowrl.core.errors import one_line
from flowrl.learning.spaces import (
    ACTION_SPACES,
    OBS_SPACES,
    RecordLayout,
    check_action_space,
    get,
    is_composite,
    space_parts,
    unsupported_obs_leaf,
)

EnvCreator = Callable[..., gym.Env]

_REGISTERED: dict[str, EnvCreator] = {}


class EnvError(RuntimeError):
    """The env raised in ``step()`` on rollout worker ``worker_index`` (0: the local
    worker). A remote worker whose env raised is replaced, within the run's failure budget
    (``flowrl.run.runner.FailureBudget``); in this process nothing can be, and the run ends.

    Examples:
        >>> str(EnvError("env CartPole-v1 (worker 2) raised ValueError: boom", 2))
        'env CartPole-v1 (worker 2) raised ValueError: boom'
    """

    def __init__(self, message: str, worker_index: int) -> None:
        super().__init__(message, worker_index)  # both, so it pickles through Ray
        self.message, self.worker_index = message, worker_index
        #: ``file:line`` of the env's code that raised (``located``): it crosses Ray with
        #: the error, where the traceback does not
        self.raised_at: str | None = None

    def __str__(self) -> str:
        return self.message


class EndlessEpisodes(EnvError):
    """No episode of the env ended for longer than any time limit runs: the env has none,
    and evaluation, which plays whole episodes, would wait forever."""


def located(e: EnvError, where: str, worker_index: int, during: str = "") -> EnvError:
    """``e`` naming ``where`` it happened (an env on worker ``worker_index``), with the
    env's traceback: the error's last frame is the env's line.

    Examples:
        >>> str(located(EnvError("ValueError: boom", -1), "env X (worker 0)", 0, ", in reset(),"))
        'env X (worker 0), in reset(), raised ValueError: boom'
    """
    trace = getattr(e.__cause__, "__traceback__", None) or e.__traceback__
    if isinstance(e, EndlessEpisodes):  # nothing raised: the episodes go on
        where, during = f"{where}{during.rstrip(',')}:", ""
    else:
        during += " raised"
    error = type(e)(f"{where}{during} {e.message}", worker_index).with_traceback(trace)
    frames = traceback.extract_tb(trace)
    error.raised_at = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else None
    return error


def step_env(env: Any, actions: Any) -> Any:
    """``env.step(actions)``; what the env raises comes back as an EnvError (its cause the
    env's own exception, its message ``env_fault``'s) whose env and worker the rollout
    worker names, so a remote worker whose env raised is replaced whatever the kind of env
    (a vector env, a multi-agent env or a game)."""
    try:
        return env.step(actions)
    except Exception as e:
        raise EnvError(env_fault(e, env), -1) from e


#: gymnasium's sync vector env's errors as it unpacks an env's step, and what they mean
STEP_MISFITS = {
    "setting an array element with a sequence": "an env's step returned a reward, "
    "terminated or truncated that is an array, not one number",
    "not enough values to unpack": "an env's step returned fewer than gymnasium's 5 values "
    "(obs, reward, terminated, truncated, info): an env of the old gym API?",
}


def env_fault(error: Exception, env: Any = None) -> str:
    """What an env raised, in one line (``Type: its first line``); for a ValueError of
    vector env ``env``, with the part of an observation whose shape was wrong, or what
    its env returned that gymnasium's vector env could not take (``STEP_MISFITS``).

    Examples:
        >>> env_fault(KeyError("left"))
        "KeyError: 'left'"
    """
    reason = one_line(error)
    if not isinstance(error, ValueError):
        return reason
    first = reason.partition(": ")[2]
    frames = traceback.extract_tb(error.__traceback__)
    unpacking = bool(frames) and frames[-1].filename.endswith("sync_vector_env.py")
    meanings = [m for start, m in STEP_MISFITS.items() if unpacking and first.startswith(start)]
    misfit = misshapen_observation(env) or next(iter(meanings), None)
    return f"{reason} ({misfit})" if misfit else reason


def misshapen_observation(env: Any) -> str | None:
    """After a vector env's step failed: the first of its envs' observations with a part
    whose shape is not its space's (gymnasium's own error, from stacking them, names
    neither), described; None when all fit or the env keeps no per-env observations."""
    base = getattr(env, "unwrapped", env)
    observations = getattr(base, "_env_obs", None)
    space = getattr(base, "single_observation_space", None)
    if observations is None or space is None:
        return None
    parts = space_parts(space)
    for i, obs in enumerate(observations):
        for path, leaf in parts:
            shape = np.shape(get(obs, path)) if obs is not None else None
            if leaf.shape is not None and shape is not None and shape != leaf.shape:
                name = ".".join(path) or "observation"
                return f"env {i}'s {name} has shape {shape} where its space declares {leaf.shape}"
    return None


def register_env(name: str, creator: EnvCreator) -> str:
    """Make ``creator`` trainable as ``env=name`` in this process and on its Ray workers.

    ``creator`` is a ``gymnasium.Env`` subclass or a function returning an env; it is
    called with the config's ``env_config`` as keyword arguments. Ray workers get the
    creator itself (pickled with it, so one defined in a notebook works), not this
    process's gymnasium registry. Returns ``name``.

    Examples:
        >>> register_env("short-cartpole", lambda: gym.make("CartPole-v1", max_episode_steps=50))
        'short-cartpole'
        >>> make_vector_env("short-cartpole", num_envs=2, seed=0).num_envs
        2
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"register_env needs a non-empty name, got {name!r}")
    if not callable(creator):
        raise ConfigError(f"register_env({name!r}) needs an env class or function, got {creator!r}")
    _REGISTERED[name] = creator
    return name


def registered_creator(name: str, *, only_here: bool = False) -> EnvCreator | None:
    """The creator ``register_env`` stored under ``name``, if any; with ``only_here``, only
    one that no other process could make from the name (not a ``module:Name``'s)."""
    return None if only_here and ":" in name else _REGISTERED.get(name)


def env_name(env: str | EnvCreator) -> str:
    """The config's ``env`` string for an id, an env class or a creator function.

    A class or function that its module exports is named ``module:name``, which any
    process can import; any other (one defined in a notebook or a function) is registered
    under its own name with ``register_env``.
    """
    if isinstance(env, str):
        return env
    if not callable(env):
        raise ConfigError(_not_a_creator(env))
    module, name = getattr(env, "__module__", None), getattr(env, "__qualname__", "")
    if module and module != "__main__" and name.isidentifier():
        with contextlib.suppress(ImportError):
            if getattr(importlib.import_module(module), name, None) is env:
                return register_env(f"{module}:{name}", env)
    return register_env(getattr(env, "__name__", None) or type(env).__name__, env)


def _not_a_creator(env: Any) -> str:
    """Why ``env`` cannot be a config's env: an env already made (flowrl makes its own,
    one per lane on every worker) is told what to pass instead."""
    if not (hasattr(env, "step") and hasattr(env, "reset")):
        return f"env must be an id, an env class or a function, got {env!r}"
    spec = getattr(env, "spec", None)
    instead = f"its id (env={spec.id!r}), " if getattr(spec, "id", None) else ""
    return (
        f"env is an env instance ({env}); flowrl makes its own envs, one per lane on every "
        f"worker: pass {instead}its class, or a function that makes one (env=lambda: ...)"
    )


def is_atari(env_id: str) -> bool:
    return env_id.startswith("ALE/")


#: the flowrl extra that installs a package an env module may import
EXTRAS = {"pettingzoo": "multiagent", "mujoco": "mujoco", "Box2D": "box2d"}
#: gymnasium's env families that need a package of their own: its name, and the flowrl
#: extra that installs it
FAMILY_PACKAGES = {"box2d": ("Box2D", "box2d"), "mujoco": ("MuJoCo", "mujoco")}


def gymnasium_family(target: Any) -> str | None:
    """The family of a gymnasium env (``classic_control``, ``box2d``, ``mujoco``...), from
    its spec's entry point (or a module's name); None for other envs.

    Examples:
        >>> gymnasium_family(gym.spec("LunarLander-v3")), gymnasium_family(gym.spec("Ant-v5"))
        ('box2d', 'mujoco')
    """
    entry = target if isinstance(target, str) else getattr(target, "entry_point", None)
    if not isinstance(entry, str) or not entry.startswith("gymnasium.envs."):
        return None
    return entry.removeprefix("gymnasium.envs.").split(".")[0].split(":")[0]


@contextlib.contextmanager
def installed(env: str, target: Any) -> Iterator[None]:
    """A package missing as the block makes ``env`` (gymnasium's DependencyNotInstalled;
    ``target`` its spec or module name) as a ConfigError that says what to install:
    flowrl's extra for gymnasium's Box2D and MuJoCo envs (gymnasium's own advice builds
    Box2D from source with swig; the extra installs its wheel), else gymnasium's words."""
    try:
        yield
    except gym.error.DependencyNotInstalled as e:
        package = FAMILY_PACKAGES.get(gymnasium_family(target) or "")
        if package is None:
            raise ConfigError(f"env {env} needs a package that is not installed: {e}") from None
        name, extra = package
        raise ConfigError(
            f"env {env} needs {name}, which is not installed: pip install 'flowrl-ray[{extra}]'"
        ) from None


#: gymnasium ids that a package registers once imported, by how they begin: the module to
#: name (``module:EnvId``) and what pip installs it as
REGISTERED_ON_IMPORT = {
    **dict.fromkeys(("MiniGrid-", "BabyAI-"), ("minigrid", "minigrid")),
    "popgym-": ("popgym", "popgym"),
    "MiniWorld-": ("miniworld", "miniworld"),
    "highway-": ("highway_env", "highway-env"),
    "dm_control/": ("shimmy", "shimmy[dm-control]"),
    **dict.fromkeys(
        ("Fetch", "HandManipulate", "HandReach", "AntMaze", "PointMaze", "Adroit"),
        ("gymnasium_robotics", "gymnasium-robotics"),
    ),
}


def resolve_env(env: str) -> EnvCreator | gym.envs.registration.EnvSpec:
    """What ``env`` names: a creator (registered, or ``module:ClassOrFactory``, its name
    dotted where it is inside a submodule or class) or a gymnasium spec; a ConfigError that
    names the env otherwise."""
    creator = _REGISTERED.get(env)
    if creator is not None:
        return creator
    if is_atari(env):
        import ale_py

        gym.register_envs(ale_py)
    module_name, sep, name = env.rpartition(":")
    if sep:
        try:
            with installed(env, module_name):  # gymnasium's Box2D or MuJoCo modules
                module = importlib.import_module(module_name)
        except ImportError as e:
            extra = EXTRAS.get((e.name or "").split(".")[0])
            hint = f" (pip install 'flowrl-ray[{extra}]')" if extra else ""
            raise ConfigError(f"cannot import {module_name} for env {env}: {e}{hint}") from None
        attr = _attribute(module, name)
        if attr is not None:
            if not callable(attr):
                raise ConfigError(f"env {env} is {attr!r}, not an env class or function")
            return attr
    if not sep and (game := older_atari_id(env)):
        raise ConfigError(
            f"env {env} is an older id of an Atari game: flowrl plays Atari games as ale-py's "
            f"ALE/ ids, --env {game}, preprocessed as NoFrameskip-v4 runs were (a frame skip "
            "of 4, 84x84 grey frames, 4 stacked, no sticky actions)"
        )
    try:
        return gym.spec(name if sep else env)
    except gym.error.Error as e:
        hint = ""
        if sep and isinstance(e, gym.error.NameNotFound):
            guess = str(e)[str(e).find(" Did you mean") :] if "Did you mean" in str(e) else ""
            raise ConfigError(
                f"unknown env '{env}': {module_name} has no {name}, and registers no "
                f"gymnasium env of that name.{guess}"
            ) from None
        if not sep and (newest := _newest_version(env)):
            hint = newest
        elif not sep and isinstance(e, gym.error.NameNotFound):  # (not another version's)
            hint = _registering_package(env) or (
                " (an env a package registers when imported: package:EnvId, as "
                "minigrid:MiniGrid-DoorKey-5x5-v0; your own env: module:ClassOrFactory, or "
                "flowrl.register_env first)"
            )
        raise ConfigError(f"unknown env id '{env}': {e}{hint}") from None


#: an Atari id as gym registered them before ale-py's ``ALE/`` ones (``PongNoFrameskip-v4``,
#: RL Zoo's and CleanRL's), or an ``ALE/`` game without its namespace (``Pong-v5``)
_OLDER_ATARI = re.compile(r"^([A-Z][A-Za-z]*?)(?:NoFrameskip|Deterministic)?-v[045]$")


def older_atari_id(env: str) -> str | None:
    """The ``ALE/`` id of the Atari game that ``env`` names by an older id
    (``PongNoFrameskip-v4`` -> ``ALE/Pong-v5``), which flowrl plays preprocessed as
    NoFrameskip-v4 runs were (ale-py registers the older ids too, as raw screens once it is
    imported); None for another id.

    Examples:
        >>> older_atari_id("BreakoutNoFrameskip-v4"), older_atari_id("CartPole-v1")
        ('ALE/Breakout-v5', None)
    """
    older = _OLDER_ATARI.match(env)
    ale = importlib.util.find_spec("ale_py") if older else None  # (found, not imported)
    if older is None or ale is None or not ale.submodule_search_locations:
        return None
    own = gym.registry.get(env)  # an env of another package's of that name is its own
    if own is not None and not str(own.entry_point).startswith("ale_py"):
        return None
    game = f"ALE/{older[1]}-v5"
    rom = Path(ale.submodule_search_locations[0], "roms", f"{_ale_game(game)}.bin")
    return game if rom.is_file() else None


def _newest_version(env: str) -> str:
    """The hint for an id given without its version: the newest (``CartPole`` ->
    ``CartPole-v1``); "" for another id.

    Examples:
        >>> _newest_version("CartPole")
        ' (did you mean CartPole-v1?)'
    """
    versions = [s for s in gym.registry.values() if s.id.rsplit("-v", 1)[0] == env]
    newest = max(versions, key=lambda s: s.version or 0, default=None)
    return f" (did you mean {newest.id}?)" if newest and newest.version is not None else ""


def _registering_package(env: str) -> str:
    """The hint for an unknown id that a known package registers once imported (its name,
    and pip's where it is not installed); "" for another id."""
    for start, (module, package) in REGISTERED_ON_IMPORT.items():
        if env.startswith(start):
            install = "" if importlib.util.find_spec(module) else f"pip install {package}, then "
            return f" ({module} registers it when imported: {install}name it {module}:{env})"
    return ""


def _attribute(module: Any, path: str) -> Any:
    """``module``'s attribute ``path``, dotted as in an entry point (``mpe2:simple_v3.env``),
    its submodules imported on the way; None where there is none."""
    attr = module
    for part in path.split("."):
        if not part.isidentifier():
            return None
        if not hasattr(attr, part) and inspect.ismodule(attr):
            with contextlib.suppress(ImportError):
                importlib.import_module(f"{attr.__name__}.{part}")
        attr = getattr(attr, part, None)
    return attr


def check_env_id(env: str) -> None:
    """A ConfigError unless ``env`` names an env (see ``resolve_env``)."""
    resolve_env(env)


def make_vector_env(
    env: str,
    *,
    num_envs: int,
    seed: int,
    num_threads: int = 0,
    env_config: Mapping[str, Any] | None = None,
) -> gym.vector.VectorEnv:
    """A vector env of ``num_envs`` copies in NEXT_STEP autoreset mode (seed it on reset).

    ``env_config`` goes to the env's creator as keyword arguments. ``num_threads`` bounds
    the threads of a natively threaded env (ale-py's Atari vector env); 0 leaves the
    env's default, a thread per core. Observation and action spaces flowrl's policies
    cannot take are a ConfigError naming the space.
    """
    target, kwargs = resolve_env(env), dict(env_config or {})
    with installed(env, target):
        if isinstance(target, gym.envs.registration.EnvSpec):
            vec = _make_registered(env, target, num_envs, num_threads, kwargs)
        else:
            vec = _make_from_creator(env, target, num_envs, kwargs)
    mode = vec.metadata.get("autoreset_mode")
    if mode is not None and getattr(mode, "name", str(mode)) != "NEXT_STEP":
        vec.close()
        raise ConfigError(
            f"env {env} resets its envs in {getattr(mode, 'name', mode)} mode: flowrl "
            "steps vector envs in gymnasium's NEXT_STEP autoreset mode"
        )
    try:
        check_spaces(env, vec.single_observation_space, vec.single_action_space)
    except ConfigError:
        vec.close()
        raise
    vec.action_space.seed(seed)
    return as_records(vec)


class RecordObservations(gym.vector.VectorWrapper):
    """A vector env whose Dict or Tuple observations come as one record array per batch
    (``flowrl.learning.spaces``), the form the data path carries; its spaces stay the
    env's.

    Examples:
        >>> env = make_vector_env("flowrl.rollout.toy_envs:MaskedChoice", num_envs=2, seed=0)
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape, obs.dtype.names
        ((2,), ('action_mask', 'observation'))
    """

    def __init__(self, env: gym.vector.VectorEnv) -> None:
        super().__init__(env)
        self.layout = RecordLayout(env.single_observation_space)

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        return self.layout.pack(obs), info

    def step(self, actions: Any) -> tuple[Any, ...]:
        obs, *rest = self.env.step(actions)
        return (self.layout.pack(obs), *rest)


def as_records(vec: gym.vector.VectorEnv) -> gym.vector.VectorEnv:
    """``vec``, with its observations as records when they are a Dict or Tuple."""
    return RecordObservations(vec) if is_composite(vec.single_observation_space) else vec


def probe_writable(directory: str | os.PathLike[str], *, keep: bool = False) -> None:
    """Write (and remove) a file in ``directory``, made where missing: OSError when that
    cannot be done. The folders made for it are removed again unless ``keep``: a check
    leaves nothing behind (a run's directory must be empty when it starts)."""
    directory = Path(directory)
    missing = [d for d in (directory, *directory.parents) if not d.exists()]
    directory.mkdir(parents=True, exist_ok=True)
    probe = directory / ".flowrl-write-test"
    probe.write_text("")
    probe.unlink()
    for made in [] if keep else missing:  # the innermost first
        made.rmdir()


def check_video_dir(video_dir: str | os.PathLike[str]) -> None:
    """A ConfigError naming ``video_dir`` when videos cannot be written there.

    Examples:
        >>> check_video_dir("/proc/videos")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        flowrl.core.config.ConfigError: cannot write videos to /proc/videos: ...
    """
    try:
        probe_writable(video_dir)
    except OSError as e:
        raise ConfigError(f"cannot write videos to {video_dir}: {e.strerror or e}") from None


def check_video_extra(env: str) -> None:
    """A ConfigError unless the ``video`` extra's packages that recording ``env`` needs are
    installed: moviepy for every env, OpenCV for Atari's preprocessing."""
    needed = {"moviepy": "moviepy", **({"cv2": "opencv-python-headless"} if is_atari(env) else {})}
    missing = [pkg for module, pkg in needed.items() if importlib.util.find_spec(module) is None]
    if missing:
        raise ConfigError(
            f"recording videos of {env} needs {', '.join(missing)}: pip install 'flowrl-ray[video]'"
        )


def make_shown_env(
    env: str,
    *,
    seed: int,
    video_dir: str | None = None,
    env_config: Mapping[str, Any] | None = None,
    name_prefix: str = "eval",
) -> gym.vector.VectorEnv:
    """One env, as a vector env of one, whose episodes are shown: written to ``video_dir``
    as ``{name_prefix}-episode-{i}.mp4`` (gymnasium's ``RecordVideo``, so the ``video``
    extra: moviepy, and pygame for the classic-control envs), or without it drawn in a
    window as they play (``render_mode="human"``).

    A creator gets the render mode when it takes it, and must render so otherwise. Atari
    ids get the preprocessing of ``make_vector_env`` from gymnasium's wrappers, which see
    the full-colour screen.
    """
    mode = "rgb_array" if video_dir else "human"
    if video_dir:
        check_video_extra(env)
        check_video_dir(video_dir)  # before an env is made: nothing to close on the way out
    one = make_single_env(env, env_config, render_mode=mode)
    fps = one.metadata.get("render_fps", 60) // 4 if is_atari(env) else None  # a frame a step
    if one.render_mode != mode:
        one.close()
        raise render_refused(env, mode, one.render_mode)
    try:
        one.reset(seed=seed)
        one.render()  # a renderer's missing package (pygame) fails here, not mid-episode
        if video_dir:
            one = gym.wrappers.RecordVideo(
                one, video_dir, episode_trigger=lambda _: True, name_prefix=name_prefix, fps=fps
            )
    except gym.error.DependencyNotInstalled as e:
        one.close()
        raise ConfigError(
            f"env {env} cannot be {RENDERED_FOR[mode]}: a package is not installed ({e}); "
            'pip install "flowrl-ray[video]"'
        ) from None
    except Exception as e:  # no OpenGL for MuJoCo, say
        one.close()
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"env {env} cannot render frames here: {reason}") from None
    check_spaces(env, one.observation_space, one.action_space)
    vec = gym.vector.SyncVectorEnv([lambda: one], autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
    vec.action_space.seed(seed)
    return as_records(vec)


#: what an env made with each render mode is for: its episodes recorded, or shown in a window
RENDERED_FOR = {"rgb_array": "recorded", "human": "shown"}


def render_refused(env: str, mode: str, got: Any) -> ConfigError:
    """The error for ``env``, made to render ``mode``, whose ``render_mode`` is ``got``.

    Examples:
        >>> str(render_refused("Corridor", "human", None)).split(" (")[0]
        'env Corridor cannot be shown: it renders no human frames'
    """
    return ConfigError(
        f"env {env} cannot be {RENDERED_FOR[mode]}: it renders no {mode} frames (render_mode "
        f"{got!r}; let its creator take render_mode='{mode}')"
    )


def check_display(env: str) -> None:
    """A ConfigError where no window can be shown: on Linux without a display (neither
    ``DISPLAY`` nor ``WAYLAND_DISPLAY`` set), where a renderer would draw nowhere and say
    nothing of it.

    Examples:
        >>> from unittest import mock
        >>> with mock.patch.dict(os.environ, {"DISPLAY": ":0"}):
        ...     check_display("CartPole-v1")  # a display: nothing to say
    """
    display = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    if sys.platform.startswith("linux") and not display:
        raise ConfigError(
            f"no display to show env {env} on (DISPLAY is not set); write its episodes "
            "as videos instead (flowrl evaluate --video DIR)"
        )


def make_single_env(
    env: str, env_config: Mapping[str, Any] | None = None, *, render_mode: str | None = None
) -> gym.Env:
    """One env of ``env`` (not a vector env), whose observations are those its policies
    take: an Atari id gets ``make_vector_env``'s preprocessing from gymnasium's wrappers,
    which see the full-colour screen. ``render_mode`` goes to a creator that takes it.

    Examples:
        >>> env = make_single_env("ALE/Pong-v5")
        >>> env.observation_space.shape
        (4, 84, 84)
        >>> env.close()
    """
    target, kwargs = resolve_env(env), dict(env_config or {})
    render = {} if render_mode is None else {"render_mode": render_mode}
    if isinstance(target, gym.envs.registration.EnvSpec) and is_atari(env):
        kwargs = {k: v for k, v in kwargs.items() if k != "life_loss_info"}  # learning's
        one = gym.make(target.id, frameskip=1, **_ATARI_SINGLE, **render, **kwargs)
        one = gym.wrappers.AtariPreprocessing(one, noop_max=30, frame_skip=4, screen_size=84)
        return gym.wrappers.FrameStackObservation(one, stack_size=4)
    if isinstance(target, gym.envs.registration.EnvSpec):
        with installed(env, target):
            return gym.make(target.id, **render, **kwargs)
    if makes_vector_envs(target):
        raise ConfigError(
            f"env {env} makes vector envs, and this needs one env (to record its episodes, "
            "or make_env): give a creator of one env"
        )
    args, kw = creator_arguments(env, target, kwargs, render_mode=render_mode)
    return call_creator(env, target, args, kw, kwargs)


# ale-py's vector env defaults, for the single Atari env a recording uses.
_ATARI_SINGLE = {"repeat_action_probability": 0.0, "max_num_frames_per_episode": 108_000}


def check_spaces(env: str, obs_space: gym.Space, action_space: gym.Space) -> None:
    """A ConfigError naming the space unless flowrl's policies take both: observations of
    ``OBS_SPACES``, actions of
    ``ACTION_SPACES`` (an algorithm may take fewer:
    ``Policy.check_action_space``)."""
    bad = unsupported_obs_leaf(obs_space)
    if bad is not None:  # one entry of a Dict or Tuple is named, not the whole
        whole = (f"env {env} has observation space {obs_space}: flowrl takes {OBS_SPACES} "
                 "observations (flatten others with a gymnasium wrapper)")  # fmt: skip
        raise ConfigError(unsupported_entry(env, obs_space, *bad) if bad[0] else whole)
    try:
        check_action_space(action_space)
    except ConfigError:
        raise ConfigError(
            f"env {env} has action space {action_space}: flowrl takes {ACTION_SPACES} actions"
        ) from None


def unsupported_entry(env: str, space: gym.Space, path: tuple, leaf: gym.Space) -> str:
    """What to tell of observation entry ``path`` (a ``leaf`` flowrl cannot take) of
    ``env``'s composite ``space``: which it is and, for a Dict's top-level entry, the
    gymnasium wrapper that keeps the others.

    Examples:
        >>> space = gym.spaces.Dict({"image": gym.spaces.Box(0, 1, (2,)),
        ...                          "mission": gym.spaces.Text(8)})
        >>> unsupported_entry("grid", space, ("mission",), space["mission"])  # doctest: +ELLIPSIS
        "env grid's observation entry 'mission' is a Text space, which flowrl's networks ...
    """
    name, kind = ".".join(map(str, path)), type(leaf).__name__
    kind += "" if kind.endswith("Space") else " space"  # Text space, MissionSpace
    text = (
        f"env {env}'s observation entry {name!r} is a {kind}, which flowrl's networks "
        f"cannot take (they take {OBS_SPACES})"
    )
    keep = [key for key in getattr(space, "spaces", {}) if key != path[0]]
    if not isinstance(space, gym.spaces.Dict) or len(path) > 1 or not keep:
        return f"{text}: turn it into one of those in your env's creator (an ObservationWrapper)"
    return (
        f"{text}: drop it in your env's creator: gymnasium.wrappers.FilterObservation(env, {keep})"
    )


def _make_registered(
    env: str,
    spec: gym.envs.registration.EnvSpec,
    num_envs: int,
    num_threads: int,
    kwargs: dict[str, Any],
) -> gym.vector.VectorEnv:
    if is_atari(env):
        from ale_py.vector_env import AtariVectorEnv

        kwargs = dict(kwargs)
        life_loss = kwargs.pop("life_loss_info", False)  # flowrl's own, below
        try:  # as a creator's env_config is checked: in one line, before the env starts
            inspect.signature(AtariVectorEnv).bind_partial(**kwargs)
        except TypeError as e:
            raise ConfigError(f"env {env} does not take env_config {kwargs}: {e}") from None
        kwargs = {"reward_clipping": False, **kwargs}
        vec = AtariVectorEnv(
            game=_ale_game(env), num_envs=num_envs, num_threads=num_threads, **kwargs
        )
        fire = kwargs.get("use_fire_reset", True)
        return LifeLossTerminals(vec, fire=fire) if life_loss else vec
    mode = "vector_entry_point" if spec.vector_entry_point is not None else "sync"
    try:
        return gym.make_vec(spec.id, num_envs=num_envs, vectorization_mode=mode, **kwargs)
    except TypeError as e:
        raise ConfigError(f"env {env} rejected env_config {kwargs}: {e}") from None


#: the infos key of a vector env whose ``terminated`` flags mark more than its episodes'
#: ends (``LifeLossTerminals``): which envs' episodes ended at the step
EPISODE_ENDS = "episode_ends"


class LifeLossTerminals(gym.vector.VectorWrapper):
    """An Atari vector env whose lost lives end episodes for learning, as the DQN paper
    and CleanRL train (``EpisodicLifeEnv``), while the episodes counted stay whole games:
    ``terminated`` is set at a step that lost a life too, the step after it presses FIRE
    where the game has it (as ale-py does at a reset; the agent's action there is not
    taken, so the sampler's reset step after a terminal fits it), and
    ``infos[EPISODE_ENDS]`` gives the game's own ends, by which ``VectorLanes`` counts
    episodes. ``env_config={"life_loss_info": True}`` on an ``ALE/`` id; ale-py's own
    option of that name is not used, because it marks a lost life and the game's end
    alike.

    Examples:
        >>> env = make_vector_env("ALE/Breakout-v5", num_envs=2, seed=0,
        ...                       env_config={"life_loss_info": True})
        >>> _ = env.reset(seed=0)
        >>> type(env).__name__, EPISODE_ENDS in env.step(np.zeros(2, np.int64))[4]
        ('LifeLossTerminals', True)
    """

    def __init__(self, env: gym.vector.VectorEnv, *, fire: bool = True) -> None:
        super().__init__(env)
        from ale_py import Action

        actions = list(env.unwrapped.ale.get_action_set())
        #: the action pressed after a lost life (None: the game has no FIRE, or not asked)
        self.fire = actions.index(Action.FIRE) if fire and Action.FIRE in actions else None
        self._lives, self._lost = np.zeros(env.num_envs, np.int64), np.zeros(env.num_envs, bool)

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, infos = self.env.reset(**kwargs)
        self._lives, self._lost = np.array(infos["lives"]), np.zeros(self.num_envs, bool)
        return obs, infos

    def step(self, actions: Any) -> tuple[Any, ...]:
        if self.fire is not None and self._lost.any():
            actions = np.where(self._lost, self.fire, actions)
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        lives = np.array(infos["lives"])
        ends = terminated | truncated
        self._lost = (lives < self._lives) & ~ends  # a reset raises the count: never a loss
        self._lives = lives
        return obs, rewards, terminated | self._lost, truncated, {**infos, EPISODE_ENDS: ends}


def makes_vector_envs(creator: Any) -> bool:
    """Whether ``creator`` makes a whole vector env: a ``gymnasium.vector.VectorEnv``
    subclass, or a function taking ``num_envs``."""
    if isinstance(creator, type):
        return issubclass(creator, gym.vector.VectorEnv)
    try:
        return "num_envs" in inspect.signature(creator).parameters
    except (TypeError, ValueError):  # no signature to read
        return False


def _make_from_creator(
    env: str, creator: EnvCreator, num_envs: int, kwargs: dict[str, Any]
) -> gym.vector.VectorEnv:
    if makes_vector_envs(creator):  # stepped as it is: its own loop over its envs
        args, kw = creator_arguments(env, creator, {"num_envs": num_envs, **kwargs})
        vec = call_creator(env, creator, args, kw, kwargs)
        if not isinstance(vec, gym.vector.VectorEnv) or vec.num_envs != num_envs:
            made = (
                f"{getattr(vec, 'num_envs', '?')} envs"
                if isinstance(vec, gym.vector.VectorEnv)
                else f"a {type(vec).__name__}"
            )
            raise ConfigError(
                f"env {env} takes num_envs, so it must make a gymnasium VectorEnv of "
                f"num_envs={num_envs} envs; it made {made}"
            )
        return vec
    args, kw = creator_arguments(env, creator, kwargs)

    def make_one() -> gym.Env:
        one = call_creator(env, creator, args, kw, kwargs)
        if not isinstance(one, gym.Env):
            raise ConfigError(f"env {env} made a {type(one).__name__}, not a gymnasium.Env")
        return one

    return gym.vector.SyncVectorEnv(
        [make_one] * num_envs, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP
    )


def call_creator(
    env: str, creator: EnvCreator, args: tuple, kw: dict[str, Any], env_config: dict[str, Any]
) -> Any:
    """``creator(*args, **kw)``; a ConfigError where it passes ``env_config`` on
    (``**kwargs``) to a class that does not take it, which its signature did not tell."""
    try:
        return creator(*args, **kw)
    except TypeError as e:
        if env_config and "keyword argument" in str(e):
            raise ConfigError(f"env {env} does not take env_config {env_config}: {e}") from None
        raise


def creator_arguments(
    env: str, creator: EnvCreator, kwargs: dict[str, Any], *, render_mode: str | None = None
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments to call ``creator`` with: ``env_config`` as keyword arguments, or, for
    a creator in RLlib's style that takes it as one dict (``def make(config)``), that dict.
    A ``render_mode`` joins them where the creator takes it (a one-dict creator finds it
    in the dict). ``env_config`` that fits neither is a ConfigError, not a TypeError from
    deep inside a worker.

    Examples:
        >>> def make(config):
        ...     return config["size"]
        >>> creator_arguments("grid", make, {"size": 3}, render_mode="rgb_array")
        (({'size': 3, 'render_mode': 'rgb_array'},), {})
    """
    try:
        signature = inspect.signature(creator)
    except ValueError:  # no signature to check (a builtin): the call itself will say
        return (), kwargs
    try:
        signature.bind(**kwargs)
    except TypeError as e:
        params = list(signature.parameters.values())
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        if len(params) == 1 and params[0].kind in positional:
            render = {"render_mode": render_mode} if render_mode else {}
            return ({**kwargs, **render},), {}
        raise ConfigError(f"env {env} does not take env_config {kwargs}: {e}") from None
    if render_mode:
        with contextlib.suppress(TypeError):
            signature.bind(render_mode=render_mode, **kwargs)
            return (), {**kwargs, "render_mode": render_mode}
    return (), kwargs


def _ale_game(env_id: str) -> str:
    """``ALE/Pong-v5`` -> ``pong``."""
    name = env_id.split("/", 1)[1].split("-")[0]
    return "".join("_" + c.lower() if c.isupper() and i else c.lower() for i, c in enumerate(name))


def reward_threshold(env: str) -> float | None:
    """The env's registered reward threshold, if it has one."""
    target = resolve_env(env)
    return target.reward_threshold if isinstance(target, gym.envs.registration.EnvSpec) else None

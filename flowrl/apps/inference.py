"""A trained policy outside training: load it for inference, or export it to run without
flowrl (ONNX or TorchScript).

:func:`load_policy` reads a checkpoint (or a run directory's newest one) into a
:class:`LoadedPolicy` without Ray and without building a plan. :func:`export_policy`
writes the greedy policy as one model from raw observations to the actions the env takes:
observation normalisation, uint8 frames and action bounds included.

Example:
    >>> import tempfile
    >>> from flowrl import Algorithm
    >>> algo = Algorithm("ppo", num_workers=0)
    >>> path = algo.save(Path(tempfile.mkdtemp()) / "ckpt")
    >>> algo.stop()
    >>> policy = load_policy(path)
    >>> policy.compute_action(np.zeros(4, dtype=np.float32)) in (0, 1)
    True
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from flowrl.core.config import ConfigError
from flowrl.learning.policy import Policy
from flowrl.rollout.envs import make_vector_env
from flowrl.run import checkpoints
from flowrl.run.checkpoints import Checkpoint, CheckpointError

FORMATS = ("onnx", "torchscript")


class LoadedPolicy:
    """A policy read from a checkpoint: actions for one observation or a batch."""

    def __init__(self, policy: Policy, algo: str, env: str) -> None:
        self.policy, self.algo, self.env = policy, algo, env

    def compute_actions(self, obs: np.ndarray, *, explore: bool = False) -> np.ndarray:
        """The env actions for a batch of raw observations (greedy unless ``explore``)."""
        policy = self.policy
        actions, _ = policy.compute_actions(policy.normalizer.observations(obs), explore=explore)
        return policy.env_actions(actions)

    def compute_action(self, obs: np.ndarray, *, explore: bool = False) -> Any:
        """The env action for one raw observation (an int for Discrete action spaces)."""
        action = self.compute_actions(np.asarray(obs)[None], explore=explore)[0]
        return action.item() if action.ndim == 0 else action

    def __repr__(self) -> str:
        return f"LoadedPolicy({self.algo} on {self.env})"


def load_policy(path: str | os.PathLike[str] | Checkpoint) -> LoadedPolicy:
    """The policy of a checkpoint directory, of a run directory's newest checkpoint that
    loads, or of a loaded Checkpoint; builds one env to learn the spaces, and nothing else
    (no Ray).

    Example:
        >>> policy = load_policy("runs/ppo_CartPole-v1_20261121-130000")  # doctest: +SKIP
        >>> policy.compute_action(obs)  # doctest: +SKIP
        1
    """
    from flowrl.run.algorithm import build_config, get_algorithm

    ckpt = path if isinstance(path, Checkpoint) else checkpoints.resolve(path)
    spec = get_algorithm(ckpt.meta["algo"])
    config = build_config(spec, {"preset": False, **ckpt.meta["config"], "num_workers": 0})
    env = make_vector_env(config.env, num_envs=1, seed=0, env_config=config.env_config)
    obs_space, action_space = env.single_observation_space, env.single_action_space
    env.close()
    policy_cls, _ = spec.classes(config)
    policy = policy_cls(obs_space, action_space, config, device="cpu")
    try:
        policy.set_weights(ckpt.state["policy"]["weights"])
    except (KeyError, RuntimeError, ValueError, TypeError) as e:
        reason = checkpoints.error_reason(e)
        raise CheckpointError(f"checkpoint {ckpt.path} has no usable weights ({reason})") from None
    policy.module.eval()
    return LoadedPolicy(policy, spec.name, config.env)


class GreedyPolicy(nn.Module):
    """Raw observations in, the env's greedy actions out: what an export traces."""

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        self.policy = policy
        self.module = policy.module  # the acting module, registered so exports hold it
        stats = policy.normalizer.obs
        self.normalize = stats is not None
        if stats is not None:
            self.register_buffer("obs_mean", torch.as_tensor(stats.mean, dtype=torch.float32))
            inv_std = torch.as_tensor(1.0 / stats.std(), dtype=torch.float32)
            self.register_buffer("obs_inv_std", inv_std)
            self.clip = float(policy.normalizer.clip)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.normalize:
            obs = (obs.float() - self.obs_mean) * self.obs_inv_std
            obs = torch.clamp(obs, -self.clip, self.clip)
        return self.policy.greedy_env_actions(obs)


def export_policy(
    path: str | os.PathLike[str] | Checkpoint,
    out: str | os.PathLike[str],
    *,
    format: str = "onnx",
) -> Path:
    """Write the greedy policy of a checkpoint (or run directory) to ``out`` as an ONNX
    model (input ``obs``, output ``actions``, any batch size) or a TorchScript module;
    returns ``out``.

    Example:
        >>> export_policy("runs/ppo_Hopper-v5_x", "hopper.onnx")  # doctest: +SKIP
        PosixPath('hopper.onnx')
    """
    if format not in FORMATS:
        raise ConfigError(f"unknown export format '{format}'; available: {', '.join(FORMATS)}")
    loaded = load_policy(path)
    module = GreedyPolicy(loaded.policy).eval().requires_grad_(False)
    space = loaded.policy.observation_space
    example = torch.as_tensor(np.stack([space.sample() for _ in range(2)]))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), _quiet_exporters():
        if format == "torchscript":
            torch.jit.trace(module, example).save(str(out))
        else:
            _export_onnx(module, example, out)
    return out


@contextlib.contextmanager
def _quiet_exporters():
    """Without the tracer's notes on constants (the action bounds are meant to be ones)
    and the ONNX exporter's progress lines."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export")]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)


def _export_onnx(module: nn.Module, example: torch.Tensor, out: Path) -> None:
    try:
        import onnx  # noqa: F401  (torch's exporter needs it)
    except ImportError:
        raise ConfigError(
            'ONNX export needs the onnx package: pip install "flowrl[export]"'
        ) from None
    batch = torch.export.Dim("batch", min=1)
    torch.onnx.export(
        module,
        (example,),
        str(out),
        input_names=["obs"],
        output_names=["actions"],
        dynamic_shapes={"obs": {0: batch}},
        dynamo=True,
        verbose=False,
    )

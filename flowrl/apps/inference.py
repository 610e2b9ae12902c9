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
from flowrl.learning.spaces import field
from flowrl.rollout.envs import make_vector_env
from flowrl.run import checkpoints
from flowrl.run.checkpoints import Checkpoint, CheckpointError

FORMATS = ("onnx", "torchscript")


class LoadedPolicy:
    """A policy read from a checkpoint: actions for one observation or a batch."""

    def __init__(self, policy: Policy, algo: str, env: str) -> None:
        self.policy, self.algo, self.env = policy, algo, env

    def compute_actions(self, obs: Any, *, explore: bool = False) -> np.ndarray:
        """The env actions for a batch of raw observations (greedy unless ``explore``); a
        Dict or Tuple space's batch is its nest of arrays."""
        policy = self.policy
        if policy.obs_layout is not None:
            obs = policy.obs_layout.pack(obs)
        actions, _ = policy.compute_actions(policy.normalizer.observations(obs), explore=explore)
        return policy.env_actions(actions)

    def compute_action(self, obs: Any, *, explore: bool = False) -> Any:
        """The env action for one raw observation (an int for Discrete action spaces)."""
        layout = self.policy.obs_layout
        batch = np.asarray(obs)[None] if layout is None else layout.unpack(layout.pack_one(obs))
        action = self.compute_actions(batch, explore=explore)[0]
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
    """Raw observations in, the env's greedy actions out: what an export traces. A Dict or
    Tuple observation comes in as one tensor per leaf, in the order of
    :func:`input_names` (the action mask among them)."""

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        self.policy = policy
        self.module = policy.module  # the acting module, registered so exports hold it
        layout = policy.obs_layout
        leaves = [leaf.path for leaf in layout.leaves] if layout is not None else [()]
        norm = policy.normalizer
        #: (input index, statistics index) of each normalised input
        self.normalized = [(leaves.index(path), i) for i, (_, path) in enumerate(norm.parts)]
        for i, (name, _) in enumerate(norm.parts):
            mean, inv_std = norm.scale(name)
            self.register_buffer(f"obs_mean_{i}", torch.as_tensor(mean))
            self.register_buffer(f"obs_inv_std_{i}", torch.as_tensor(inv_std))
        self.clip = float(norm.clip)

    def forward(self, *obs: torch.Tensor) -> torch.Tensor:
        values = list(obs)
        for j, i in self.normalized:
            mean, inv_std = getattr(self, f"obs_mean_{i}"), getattr(self, f"obs_inv_std_{i}")
            values[j] = torch.clamp((values[j].float() - mean) * inv_std, -self.clip, self.clip)
        layout = self.policy.obs_layout
        return self.policy.greedy_env_actions(values[0] if layout is None else layout.build(values))


def input_names(policy: Policy) -> list[str]:
    """An export's inputs: ``obs``, or one per leaf of a Dict or Tuple observation, named
    by its path (``image``, ``action_mask``, ``pose.0``)."""
    layout = policy.obs_layout
    return ["obs"] if layout is None else [leaf.name for leaf in layout.leaves]


def export_policy(
    path: str | os.PathLike[str] | Checkpoint,
    out: str | os.PathLike[str],
    *,
    format: str = "onnx",
) -> Path:
    """Write the greedy policy of a checkpoint (or run directory) to ``out`` as an ONNX
    model (input ``obs``, or one input per leaf of a Dict or Tuple observation as
    :func:`input_names` names them, the action mask among them; output ``actions``; any
    batch size) or a TorchScript module; returns ``out``.

    Example:
        >>> export_policy("runs/ppo_Hopper-v5_x", "hopper.onnx")  # doctest: +SKIP
        PosixPath('hopper.onnx')
    """
    if format not in FORMATS:
        raise ConfigError(f"unknown export format '{format}'; available: {', '.join(FORMATS)}")
    loaded = load_policy(path)
    policy = loaded.policy
    module = GreedyPolicy(policy).eval().requires_grad_(False)
    space, layout = policy.observation_space, policy.obs_layout
    samples = [space.sample() for _ in range(2)]
    if layout is None:
        example = (torch.as_tensor(np.stack(samples)),)
    else:
        records = layout.pack(layout.stack(samples))
        example = tuple(torch.as_tensor(field(records, leaf.path)) for leaf in layout.leaves)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), _quiet_exporters():
        if format == "torchscript":
            torch.jit.trace(module, example).save(str(out))
        else:
            _export_onnx(module, example, input_names(policy), out)
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


def _export_onnx(
    module: nn.Module, example: tuple[torch.Tensor, ...], names: list[str], out: Path
) -> None:
    try:
        import onnx  # noqa: F401  (torch's exporter needs it)
    except ImportError:
        raise ConfigError(
            'ONNX export needs the onnx package: pip install "flowrl[export]"'
        ) from None
    batch = torch.export.Dim("batch", min=1)
    torch.onnx.export(
        module,
        example,
        str(out),
        input_names=names,
        output_names=["actions"],
        dynamic_shapes=(tuple({0: batch} for _ in example),),  # forward(*obs): one tuple
        dynamo=True,
        verbose=False,
    )

"""A trained policy outside training: load it for inference, or export it to run without
flowrl (ONNX or TorchScript).

``load_policy`` reads a checkpoint (or a run directory's newest one) into a
``LoadedPolicy`` without Ray and without building a plan. ``export_policy``
writes the greedy policy as one model from raw observations to the actions the env takes:
observation normalisation, uint8 frames and action bounds included.

Examples:
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

import logging
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from flowrl.core.config import ConfigError, no_attribute
from flowrl.core.context import EPISODE_RETURN_MEAN
from flowrl.core.sample_batch import STATE_IN, STATE_OUT
from flowrl.learning.policy import Policy
from flowrl.learning.spaces import field, get
from flowrl.rollout.envs import make_single_env, make_vector_env
from flowrl.rollout.multi_agent import agent_env_maker
from flowrl.run import checkpoints
from flowrl.run.checkpoints import Checkpoint, CheckpointError
from flowrl.run.evaluation import EVAL_RETURN_MEAN
from flowrl.run.saving import check_env_here
from flowrl.run.tracking import quiet_loggers

if TYPE_CHECKING:
    from flowrl.run.algorithm import Algorithm

FORMATS = ("onnx", "torchscript")
# the file names each format writes (a suffix names its format)
SUFFIXES = {".onnx": "onnx", ".pt": "torchscript", ".pth": "torchscript", ".ts": "torchscript"}
#: acting methods of Stable-Baselines3's models and RLlib's algorithms, and a loaded policy's
OTHER_METHODS = {
    "predict": "policy.compute_action(obs)",
    "compute_single_action": "policy.compute_action(obs)",
}


def _item(action: np.ndarray) -> Any:
    return action.item() if action.ndim == 0 else action


class LoadedPolicy:
    """A policy read from a checkpoint: actions for one observation or a batch."""

    def __init__(
        self, policy: Policy, algo: str, env: str, env_config: dict[str, Any] | None = None
    ) -> None:
        self.policy, self.algo, self.env = policy, algo, env
        self.env_config = dict(env_config or {})

    def __getattr__(self, name: str) -> Any:
        raise no_attribute(self, name, OTHER_METHODS)

    def make_env(self, render_mode: str | None = None) -> Any:
        """One env as the policy was trained on (its ``env_config``), whose observations
        ``compute_action`` takes: an Atari id preprocessed as in training (84x84 grey
        frames, four stacked), where ``gym.make`` would give the full-colour screen. A
        multi-agent run's env comes as its creator makes it (a PettingZoo env).

        Examples:
            >>> from flowrl import Algorithm
            >>> algo = Algorithm("ppo", env="CartPole-v1", num_workers=0)
            >>> policy = load_policy(algo)
            >>> env = policy.make_env()
            >>> obs, _ = env.reset(seed=0)
            >>> env.step(policy.compute_action(obs))[2]  # terminated
            False
            >>> env.close(); algo.stop()
        """
        env = make_single_env(self.env, self.env_config, render_mode=render_mode)
        made = getattr(env, "render_mode", None)
        if render_mode is not None and made != render_mode:
            env.close()
            raise ConfigError(
                f"env {self.env} does not render in mode {render_mode!r} (its render_mode is "
                f"{made!r}): let its creator take render_mode"
            )
        return env

    def compute_actions(
        self, obs: Any, *, explore: bool = False, state: np.ndarray | None = None
    ) -> Any:
        """The env actions for a batch of raw observations (greedy unless ``explore``); a
        Dict or Tuple space's batch is its nest of arrays. A recurrent policy takes each
        env's state (None: fresh episodes) and returns ``(actions, next_states)``."""
        policy = self.policy
        obs = np.asarray(obs) if policy.obs_layout is None else policy.obs_layout.pack(obs)
        self._check_shape(obs.shape[1:])
        if not policy.module.recurrent:
            return policy.act(obs, explore=explore).env_actions
        if state is None:
            state = policy.initial_state(len(obs))
        acted = policy.act(obs, explore=explore, state=state)
        return acted.env_actions, acted.state

    def compute_action(
        self, obs: Any, *, explore: bool = False, state: np.ndarray | None = None
    ) -> Any:
        """The env action for one raw observation (an int for Discrete action spaces); a
        recurrent policy takes the state the last call returned (None at an episode's
        start) and returns ``(action, next_state)``.

        Examples:
            >>> action, state = policy.compute_action(obs, state=None)  # doctest: +SKIP
            >>> action, state = policy.compute_action(next_obs, state=state)  # doctest: +SKIP
        """
        layout = self.policy.obs_layout
        batch = np.asarray(obs)[None] if layout is None else layout.unpack(layout.pack_one(obs))
        states = None if state is None else np.asarray(state)[None]
        out = self.compute_actions(batch, explore=explore, state=states)
        if self.policy.module.recurrent:
            return self._first(out[0]), out[1][0]
        return self._first(out)

    def _check_shape(self, shape: tuple[int, ...]) -> None:
        """A ValueError, naming both shapes, for observations not of the env's shape
        (matmul's own error names neither)."""
        space = self.policy.observation_space
        if self.policy.obs_layout is None and space.shape is not None and shape != space.shape:
            raise ValueError(
                f"observations of shape {shape} for a policy of {self.env}, whose are "
                f"{space.shape}: compute_action takes one, compute_actions a batch of them"
            )

    def _first(self, actions: Any) -> Any:
        """The first of a batch's env actions: an int for Discrete; a nest for a Tuple
        or Dict action space."""
        layout = self.policy.action_layout
        if layout is None:
            return _item(actions[0])
        return layout.build([_item(get(actions, x.path)[0]) for x in layout.leaves])

    def __repr__(self) -> str:
        return f"LoadedPolicy({self.algo} on {self.env})"


def resolve_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """``checkpoints.resolve(path)``; where ``path`` holds runs instead (a sweep's output,
    a folder of runs), a CheckpointError that names the one whose last return is highest.

    Examples:
        >>> resolve_checkpoint("no/such/run")
        Traceback (most recent call last):
        ...
        flowrl.run.checkpoints.CheckpointError: checkpoint not found: no/such/run
    """
    from flowrl.apps.plotting import find_runs, read_run

    try:
        return checkpoints.resolve(path)
    except CheckpointError:
        try:
            runs = [run for run in find_runs([path]) if run != Path(path)]
        except ConfigError:
            runs = []
        if not runs:
            raise

    def last_return(run: Path) -> float:  # its evaluation's where it evaluates
        rows = read_run(run)[1][-1:]
        value = rows[0].get(EVAL_RETURN_MEAN, rows[0].get(EPISODE_RETURN_MEAN)) if rows else None
        return value if value is not None and math.isfinite(value) else -math.inf

    best = max(runs, key=last_return)
    trial = best.parent if best.name == "flowrl" else best  # a sweep's trial holds its checkpoints
    score = last_return(best)
    said = f", the one whose last return is highest ({score:.1f})" if math.isfinite(score) else ""
    raise CheckpointError(
        f"{path} holds {len(runs)} run{'s' * (len(runs) != 1)}, not a checkpoint: name "
        f"one{said}: {trial}"
    )


def load_policy(
    path: str | os.PathLike[str] | Checkpoint | Algorithm, *, policy_id: str | None = None
) -> LoadedPolicy:
    """The policy of a checkpoint directory, of a run directory's newest checkpoint that
    loads, or of a loaded Checkpoint; builds one env to learn the spaces, and nothing else
    (no Ray). A multi-agent run's checkpoint holds every policy: ``policy_id`` names the
    one (it may be left out when there is one). Given an ``Algorithm`` (a notebook's), a
    copy of its policy as it is now, which later training leaves as it is.

    Examples:
        >>> policy = load_policy("runs/ppo_CartPole-v1_20261121-130000")  # doctest: +SKIP
        >>> policy.compute_action(obs)  # doctest: +SKIP
        1
        >>> from flowrl import Algorithm
        >>> algo = Algorithm("ppo", env="CartPole-v1", num_workers=0)
        >>> load_policy(algo).compute_action(np.zeros(4, np.float32)) in (0, 1)
        True
        >>> algo.stop()
    """
    from flowrl.run.algorithm import Algorithm, build_config, get_algorithm

    if isinstance(path, Algorithm):
        return _current_policy(path, policy_id)
    ckpt = path if isinstance(path, Checkpoint) else resolve_checkpoint(path)
    check_env_here(ckpt)
    spec = get_algorithm(ckpt.meta["algo"])
    config = build_config(spec, {"preset": False, **ckpt.meta["config"], "num_workers": 0})
    state = ckpt.state["policy"]
    make_agent_env = agent_env_maker(config.env, config.env_config)
    if make_agent_env is not None:
        policy_cls, config, obs_space, action_space = _agent_policy(
            spec, config, make_agent_env, policy_id, list(state)
        )
    else:
        if policy_id is not None:
            raise ConfigError(f"policy_id {policy_id!r}: {config.env} is a single-agent env")
        env = make_vector_env(config.env, num_envs=1, seed=0, env_config=config.env_config)
        obs_space, action_space = env.single_observation_space, env.single_action_space
        env.close()
        policy_cls, _ = spec.classes(config)
    state = state[policy_id or next(iter(state))]
    policy = policy_cls(obs_space, action_space, config, device="cpu")
    try:
        policy.set_weights(state["weights"])
    except (KeyError, RuntimeError, ValueError, TypeError) as e:
        reason = checkpoints.error_reason(e)
        raise CheckpointError(f"checkpoint {ckpt.path} has no usable weights ({reason})") from None
    policy.module.eval()
    return LoadedPolicy(policy, spec.name, config.env, config.env_config)


def _agent_policy(
    spec: Any, config: Any, make_env: Any, policy_id: str | None, saved: list[str]
) -> tuple[type[Policy], Any, Any, Any]:
    """The class, config and spaces of policy ``policy_id`` of a multi-agent run."""
    from flowrl.rollout.multi_agent import Lanes, policy_mapping
    from flowrl.run.spec import policy_specs

    policy_id = pick_policy(policy_id, saved, "the checkpoint")
    policy_of = policy_mapping(config.policy_mapping, list(config.policies))
    lanes = Lanes(make_env, num_envs=2, policy_of=policy_of)  # 2: self_play's seats
    lanes.close()
    own = policy_specs(spec, config).get(policy_id)
    policy_cls, config = (own.policy_cls, own.config) if own else (spec.classes(config)[0], config)
    return policy_cls, config, lanes.observation_spaces[policy_id], lanes.action_spaces[policy_id]


def pick_policy(policy_id: str | None, policy_ids: list[str], holder: str) -> str:
    """``policy_id``, or the one id of ``policy_ids`` when it is None; a ConfigError naming
    ``holder`` (a checkpoint, an algorithm) when that is not one of its policies."""
    if policy_id is None and len(policy_ids) != 1:
        raise ConfigError(
            f"{holder} holds policies {policy_ids}: name one (--policy-id; policy_id= in Python)"
        )
    policy_id = policy_id or policy_ids[0]
    if policy_id not in policy_ids:
        raise ConfigError(f"{holder} has no policy {policy_id!r}; it has {policy_ids}")
    return policy_id


def _current_policy(algo: Any, policy_id: str | None) -> LoadedPolicy:
    """A copy of ``algo``'s policy ``policy_id`` as it is now (on the CPU, its weights read
    whole: a learner thread may be updating them)."""
    worker = algo.workers.local_worker
    policy_id = pick_policy(policy_id, list(worker.policies), "the algorithm")
    live, spec = worker.policies[policy_id], worker.policy_spec(policy_id)
    with worker.lock:
        weights = live.get_weights()
    policy = spec.policy_cls(live.observation_space, live.action_space, spec.config, device="cpu")
    policy.set_weights(weights)
    policy.module.eval()
    return LoadedPolicy(policy, algo.spec.name, algo.config.env, algo.config.env_config)


class GreedyPolicy(nn.Module):
    """Raw observations in, the env's greedy actions out: what an export traces. A Dict or
    Tuple observation comes in as one tensor per leaf, in the order of
    ``input_names`` (the action mask among them)."""

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

    def forward(self, *inputs: torch.Tensor) -> Any:
        recurrent = self.policy.module.recurrent
        values, state = (list(inputs[:-1]), inputs[-1]) if recurrent else (list(inputs), None)
        for j, i in self.normalized:
            mean, inv_std = getattr(self, f"obs_mean_{i}"), getattr(self, f"obs_inv_std_{i}")
            values[j] = torch.clamp((values[j].float() - mean) * inv_std, -self.clip, self.clip)
        layout = self.policy.obs_layout
        obs = values[0] if layout is None else layout.build(values)
        if state is None:  # not recurrent: DQN and SAC act on the observations alone
            return self.policy.greedy_env_actions(obs)
        return self.policy.greedy_env_actions(obs, state)


def output_names(policy: Policy) -> list[str]:
    """An export's outputs: ``actions``, or one per leaf of a Tuple or Dict action space
    (``actions.choice``); then ``state_out`` for a recurrent policy."""
    layout = policy.action_layout
    names = ["actions"] if layout is None else [f"actions.{leaf.name}" for leaf in layout.leaves]
    return [*names, STATE_OUT] if policy.module.recurrent else names


def input_names(policy: Policy) -> list[str]:
    """An export's inputs: ``obs``, or one per leaf of a Dict or Tuple observation, named
    by its path (``image``, ``action_mask``, ``pose.0``); then ``state_in`` for a
    recurrent policy (its outputs are ``actions`` and ``state_out``)."""
    layout = policy.obs_layout
    names = ["obs"] if layout is None else [leaf.name for leaf in layout.leaves]
    return [*names, STATE_IN] if policy.module.recurrent else names


def export_policy(
    path: str | os.PathLike[str] | Checkpoint,
    out: str | os.PathLike[str],
    *,
    format: str | None = None,
    policy_id: str | None = None,
) -> Path:
    """Write the greedy policy of a checkpoint (or run directory) to ``out`` as one
    self-contained ONNX file (input ``obs``, or one input per leaf of a Dict or Tuple observation as
    ``input_names`` names them, the action mask among them, and ``state_in`` for a
    recurrent policy; outputs as ``output_names`` names them; any batch size) or a
    TorchScript module; returns ``out``. ``format`` defaults to the one ``out``'s suffix
    names (``export_format``). ``policy_id`` names the policy of a multi-agent
    run's checkpoint (``load_policy``).

    Examples:
        >>> export_policy("runs/ppo_Hopper-v5_x", "hopper.onnx")  # doctest: +SKIP
        PosixPath('hopper.onnx')
    """
    format = export_format(out, format)
    loaded = load_policy(path, policy_id=policy_id)
    policy = loaded.policy
    module = GreedyPolicy(policy).eval().requires_grad_(False)
    space, layout = policy.observation_space, policy.obs_layout
    samples = [space.sample() for _ in range(2)]
    if layout is None:
        example = (torch.as_tensor(np.stack(samples)),)
    else:
        records = layout.pack(layout.stack(samples))
        example = tuple(torch.as_tensor(field(records, leaf.path)) for leaf in layout.leaves)
    if policy.module.recurrent:
        example = (*example, torch.as_tensor(policy.initial_state(2)))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), quiet_loggers("torch.onnx", "torch.export", level=logging.ERROR):
        if format == "torchscript":
            torch.jit.trace(module, example).save(str(out))
        else:
            _export_onnx(module, example, input_names(policy), output_names(policy), out)
    return out


def default_export_file(format: str | None = None, policy_id: str | None = None) -> str:
    """Where ``flowrl export`` writes without ``--out``: ``policy.onnx`` in the current
    directory (``.pt`` for TorchScript), named after the policy when one is named.

    Examples:
        >>> default_export_file(), default_export_file("torchscript", "dqn")
        ('policy.onnx', 'dqn.pt')
    """
    return f"{policy_id or 'policy'}{'.pt' if format == 'torchscript' else '.onnx'}"


def export_format(out: str | os.PathLike[str], format: str | None = None) -> str:
    """The format to write ``out`` in: ``format``, which must agree with what the file's
    suffix names (``.onnx``: ONNX; ``.pt``, ``.pth``, ``.ts``: TorchScript), or else the
    suffix's; a ConfigError when they disagree or neither says.

    Examples:
        >>> export_format("policy.onnx"), export_format("policy.pt")
        ('onnx', 'torchscript')
        >>> export_format("policy.pt", "onnx")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        flowrl.core.config.ConfigError: policy.pt names a TorchScript file, but the format...
    """
    if format is not None and format not in FORMATS:
        raise ConfigError(f"unknown export format '{format}'; available: {', '.join(FORMATS)}")
    path = Path(out)
    named = SUFFIXES.get(path.suffix.lower())
    if format is None and named is None:
        raise ConfigError(
            f"cannot tell the format of {out} from its name: end it in .onnx or .pt, "
            "or use --format onnx|torchscript"
        )
    if format is not None and named is not None and named != format:
        label = {"onnx": "an ONNX", "torchscript": "a TorchScript"}[named]
        suffix = next(k for k, v in SUFFIXES.items() if v == format)
        raise ConfigError(
            f"{out} names {label} file, but the format is {format}: write "
            f"{path.with_suffix(suffix)}, or use --format {named}"
        )
    return format or named


def _export_onnx(
    module: nn.Module,
    example: tuple[torch.Tensor, ...],
    names: list[str],
    outputs: list[str],
    out: Path,
) -> None:
    try:
        import onnx  # noqa: F401  (torch's exporter needs it)
    except ImportError:
        raise ConfigError(
            'ONNX export needs the onnx package: pip install "flowrl-ray[export]"'
        ) from None
    batch = torch.export.Dim("batch", min=1)
    torch.onnx.export(
        module,
        example,
        str(out),
        input_names=names,
        output_names=outputs,
        dynamic_shapes=(tuple({0: batch} for _ in example),),  # forward(*obs): one tuple
        dynamo=True,
        external_data=False,  # one file: the weights inside it, not in policy.onnx.data
        verbose=False,
    )

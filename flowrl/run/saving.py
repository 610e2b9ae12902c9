"""Checkpointing an Algorithm: ``save`` writes what a restore needs
(the policy's weights, the learner's state, the plan's counters and registered state),
``restore`` loads it, ``from_checkpoint`` rebuilds an
algorithm from a checkpoint alone.

Examples:
    >>> import tempfile
    >>> from flowrl import Algorithm
    >>> algo = Algorithm("ppo", num_workers=0)
    >>> path = algo.save(Path(tempfile.mkdtemp()) / "ckpt")
    >>> Algorithm.from_checkpoint(path).iteration
    0
    >>> algo.stop()
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from flowrl.core.callbacks import run_hook
from flowrl.core.config import ConfigError, check_local_path
from flowrl.core.context import ITERATION, STEPS_SAMPLED
from flowrl.learning.policy import Weights
from flowrl.rollout.envs import registered_creator
from flowrl.run import checkpoints
from flowrl.run.checkpoints import Checkpoint, CheckpointError
from flowrl.run.spec import get_algorithm

logger = logging.getLogger(__name__)


class Checkpointing:
    """What ``Algorithm`` does with checkpoints, and with its plan's state when the plan is
    rebuilt (after a restore, or a failure of its workers)."""

    spec: Any
    config: Any
    workers: Any
    plan: Any
    iteration: int
    _build_plan: Any
    _ended: str | None

    def _restart_plan(self, state: dict[str, Any] | None = None) -> None:
        """A new plan on the same context: counters and what its operators kept, or
        ``state`` (``PlanContext.get_state``'s, a checkpoint's) where given: its operators
        start from it as those of a plan built after a restore do."""
        self.plan.close()
        context = self.plan.context
        if state is not None:
            context.checkpointables.clear()
            context.set_state(state)
        self.plan = self._build_plan()
        self.plan.context = context
        if self._ended != "was stopped":  # the last plan's end (its error) is behind it
            self._ended = None

    def rebuild_after_failure(self, broken_workers: Sequence[int] = ()) -> list[str]:
        """Replace dead remote workers, those of ``broken_workers`` (indexes of workers
        whose env raised) and dead replay shards (recreated empty), and rebuild the plan;
        returns what was replaced. Counters, weights and what the plan took from
        ``WorkerSet.keep`` (a replay buffer, say) carry over."""
        failed = self.workers.recreate_failed_workers(broken_workers)
        new = [self.workers.remote_workers[i - 1] for i in failed]
        self.workers.set_env_steps_sampled(self.plan.context.counters[STEPS_SAMPLED], new)
        replaced = [f"rollout worker {i}" for i in failed]
        for name, indexes in self.workers.revive_kept().items():
            replaced += [f"{name} actor {i}" for i in indexes]
        self._restart_plan()
        return replaced

    def save(
        self, path: str | os.PathLike[str], *, weights: dict[str, Weights] | None = None
    ) -> Path:
        """Write a checkpoint directory (weights, optimiser, counters, config, and what the
        plan registered, such as a replay buffer) atomically; returns it. Non-finite
        weights raise ``NonFiniteError`` instead of being saved. ``weights`` (by policy
        id, from ``worker.get_weights()``) replace the current ones: those an evaluation
        scored."""
        check_local_path("Algorithm.save", path)
        local = self.workers.local_worker
        with local.lock:  # not halfway through a learner thread's update
            local.learner.check_finite_weights()
            plan = self.plan.context.get_state()
            policy_state = local.policies.get_state()
            for pid, w in (weights or {}).items():
                policy_state[pid]["weights"] = w
            state = {
                "policy": policy_state,
                "learner": local.learner.get_state(),
                "plan": plan["plan_state"],
                "torch_rng": torch.get_rng_state(),
            }
        meta = {
            "algo": self.spec.name,
            "config": self.config.to_dict(),
            ITERATION: self.iteration,
            "counters": plan["counters"],
        }
        creator = registered_creator(self.config.env, only_here=True)
        if creator is not None:
            name = getattr(creator, "__qualname__", type(creator).__name__)  # (a partial's)
            meta[REGISTERED_ENV] = f"{getattr(creator, '__module__', None) or '?'}.{name}"
        written = checkpoints.write(path, state, meta)
        if self.callbacks is not None:
            run_hook(self.callbacks, "on_checkpoint", algorithm=self, path=written)
        return written

    def restore(self, checkpoint: str | os.PathLike[str] | Checkpoint) -> None:
        """Load a checkpoint written by ``save`` (a path or a loaded
        ``Checkpoint``) into this algorithm; a checkpoint of
        another algorithm or model size raises a CheckpointError."""
        if not isinstance(checkpoint, Checkpoint):
            checkpoint = checkpoints.load(checkpoint)
        if checkpoint.meta["algo"] != self.spec.name:
            raise CheckpointError(
                f"{checkpoint.path} is a {checkpoint.meta['algo']} checkpoint, not {self.spec.name}"
            )
        state = checkpoint.state
        try:
            self.workers.local_worker.policies.set_state(state["policy"])
            self.workers.learner.set_state(state["learner"])
            plan = {"counters": checkpoint.meta["counters"], "plan_state": state["plan"]}
            if self.plan.built:  # into a running plan (PBT's exploit): a new one takes it
                self._restart_plan(plan)
            else:
                self.plan.context.set_state(plan)
            torch.set_rng_state(state["torch_rng"])
        except (KeyError, RuntimeError, ValueError, TypeError) as e:
            reason, saved = checkpoints.error_reason(e), checkpoint.meta["config"]
            env, here = saved.get("env"), self.config.to_dict()
            differ = [f"{k} {v} there, {here[k]} here" for k, v in saved.items()
                      if k in here and here[k] != v and k != "env"]  # fmt: skip
            if env is not None and env != self.config.env:  # most likely other spaces
                reason = f"it was trained on {env}, not {self.config.env}: {reason}"
            elif differ:  # (other model settings, most likely)
                reason = f"its config differs: {'; '.join(differ)}: {reason}"
            raise CheckpointError(
                f"checkpoint {checkpoint.path} does not fit this config ({reason})"
            ) from None
        self.workers.sync_weights()
        self.workers.set_env_steps_sampled(self.plan.context.counters[STEPS_SAMPLED])

    @classmethod
    def from_checkpoint(
        cls,
        path: str | os.PathLike[str] | Checkpoint,
        *,
        address: str | None = None,
        in_process: bool = False,
        **overrides: Any,
    ) -> Any:
        """Rebuild an algorithm from a checkpoint alone: a checkpoint directory, a run
        directory (its newest checkpoint that loads) or a loaded Checkpoint; ``overrides``
        change its config. ``in_process`` drops its rollout workers and other actors
        (replay shards), so Ray does not start: enough to evaluate it.

        Examples:
            >>> path = "runs/dqn/checkpoints/checkpoint_000010"
            >>> Algorithm.from_checkpoint(path, in_process=True).evaluate(10)  # doctest: +SKIP
        """
        ckpt = path if isinstance(path, Checkpoint) else checkpoints.resolve(path)
        meta = ckpt.meta
        if "env" not in overrides:
            check_env_here(ckpt)
        if in_process:
            overrides = {**get_algorithm(meta["algo"]).config_cls.in_process(), **overrides}
        # a checkpoint states its whole config: no preset fills a field it predates
        config = {"preset": False, **meta["config"], **overrides}
        if config.get("device") == "cuda" and "device" not in overrides:
            config["device"] = _device_here()
        algo = cls(meta["algo"], config, address=address)
        try:
            algo.restore(ckpt)
        except BaseException:
            algo.stop()
            raise
        return algo


#: a checkpoint's meta key: where the env was defined, when its process registered it
#: under a bare name (a notebook's class, ``register_env``), which other processes lack
REGISTERED_ENV = "registered_env"


def check_env_here(ckpt: Checkpoint) -> None:
    """A ConfigError saying what to do where ``ckpt``'s env is one that its own process
    registered and this one has not (its name alone is no gymnasium id either)."""
    env, where = ckpt.meta["config"].get("env"), ckpt.meta.get(REGISTERED_ENV)
    if where and registered_creator(env) is None:
        name = where.rpartition(".")[2] if where.rpartition(".")[2].isidentifier() else "..."
        raise ConfigError(
            f"checkpoint {ckpt.path} was trained on env {env!r}, defined as {where} in the "
            f"process that trained it, which this process lacks: flowrl.register_env({env!r}, "
            f"{name}) first (from_checkpoint also takes env={name}; flowrl evaluate, --env "
            "module:Class with the class in a module)"
        )


def _device_here() -> str:
    """Where a checkpoint of a run that learned on a GPU learns and acts here: the GPU, or
    with a warning the CPU where torch sees none (training on a GPU server, evaluating on
    a laptop); ``device=cuda`` among the overrides insists on the GPU."""
    if torch.cuda.is_available():
        return "cuda"
    logger.warning("the checkpoint's run learned on a GPU (device=cuda); torch sees none here, "
                   "so it loads on the CPU")  # fmt: skip
    return "cpu"

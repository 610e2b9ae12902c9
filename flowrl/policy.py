"""Policy: a torch model, its action distribution, an optimiser and a loss.

Algorithms subclass :class:`Policy` and define :meth:`Policy.loss` (and, when they need
returns or advantages, :meth:`Policy.postprocess`); ``loss_columns`` names the batch
columns the loss reads, so the learner slices only those per minibatch. Weights travel as
numpy arrays, so they cross Ray's object store without pickling torch tensors.

Example:
    >>> class MyPolicy(Policy):
    ...     loss_columns = ("obs", "actions", "rewards")
    ...
    ...     def loss(self, batch):
    ...         dist, values = self.distribution(batch["obs"])
    ...         loss = -(dist.log_prob(batch["actions"]) * batch["rewards"]).mean()
    ...         return loss, {"loss": loss.detach()}
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable
from functools import cached_property
from typing import Any, ClassVar, TypeVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from flowrl.config import Config, ConfigError
from flowrl.distributions import Distribution, distribution_for
from flowrl.models import ActorCritic
from flowrl.normalization import Normalizer, split_state
from flowrl.postprocessing import add_advantages
from flowrl.sample_batch import (
    ACTION_DIST_INPUTS,
    ACTIONS,
    LOGP,
    VF_PREDS,
    Fragment,
    SampleBatch,
)

Weights = dict[str, np.ndarray]

# Batches fetched from Ray's object store are read-only numpy views; the learner only reads
# them, so wrapping them without a copy is safe and torch's warning about it is noise.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


class NonFiniteError(RuntimeError):
    """A NaN or infinity reached training: the update that met it was not applied."""


def resolve_device(device: str) -> torch.device:
    """``auto`` is CUDA when torch sees a GPU, else CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device=cuda, but torch {torch.__version__} sees no CUDA GPU here")
    return torch.device(device)


def module_weights(module: nn.Module) -> Weights:
    """A module's state as numpy copies (they travel through Ray without torch pickling)."""
    return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def load_module_weights(module: nn.Module, weights: Weights) -> None:
    """Load numpy weights; torch.tensor copies, since Ray's object-store arrays are read-only."""
    module.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict, lr: float) -> None:
    """Load a saved optimiser state but keep the config's learning rate: a run resumed
    (or a Tune trial restored) with another ``lr`` trains with it, not the saved one."""
    optimizer.load_state_dict(state)
    for group in optimizer.param_groups:
        group["lr"] = lr


def adam(params: Any, lr: float, *, eps: float = 1e-8) -> torch.optim.Adam:
    """Adam with the fused kernel (one call per step for all parameters: several times
    faster than the per-tensor loop for small models)."""
    return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)


Method = TypeVar("Method", bound=Callable[..., Any])


def inference(method: Method) -> Method:
    """``torch.inference_mode`` around a policy method, entered only when it is not on
    already: the rollout loop turns it on once per fragment, and entering it costs about
    3 us, 1-2% of a CartPole rollout step.

    Example:
        >>> class MyPolicy(Policy):
        ...     @inference
        ...     def compute_actions(self, obs, *, explore=True): ...
    """

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if torch.is_inference_mode_enabled():
            return method(*args, **kwargs)
        with torch.inference_mode():
            return method(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


class Policy:
    """Model + distribution + optimiser; subclasses supply ``loss``."""

    #: The batch columns ``loss`` reads: the learner moves and slices only these for each
    #: minibatch (all of the batch's columns when None). A subclass whose loss reads more
    #: adds them here.
    loss_columns: ClassVar[tuple[str, ...] | None] = None

    @property
    def sequence_length(self) -> int:
        """Rows that belong together, in order (a V-trace learner's time steps of one env):
        minibatches are made of whole sequences. 1: every row stands alone."""
        return 1

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: Config,
        *,
        device: str = "cpu",
        worker_index: int = 0,
    ) -> None:
        self.config = config
        #: the worker this copy acts for: 0 is the local worker (the learner), 1..N remote
        self.worker_index = worker_index
        self.observation_space = observation_space
        self.action_space = action_space
        self.device = resolve_device(device)
        self.dist_cls, _ = distribution_for(action_space)
        self.model = self.make_model().to(self.device)
        #: observation and reward statistics, which travel with the weights
        self.normalizer = Normalizer(observation_space, config)
        self.rng = np.random.default_rng(config.seed)
        self.num_updates = 0

    @cached_property
    def optimizer(self) -> torch.optim.Optimizer:
        """Adam over the model's parameters, built on first use: building an optimiser
        imports torch's compiler stack (about 1.5 s), which rollout workers never need."""
        return adam(self.model.parameters(), self.config.lr, eps=1e-5)

    def make_model(self) -> nn.Module:
        """The torch model; override for another architecture."""
        return ActorCritic(
            self.observation_space, self.action_space, hiddens=self.config.model_hiddens
        )

    # -- acting --------------------------------------------------------------------------
    def distribution(self, obs: torch.Tensor) -> tuple[Distribution, torch.Tensor]:
        dist_inputs, values = self.model(obs)
        return self.dist_cls(dist_inputs), values

    @inference
    def compute_actions(
        self, obs: np.ndarray, *, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Actions for a batch of observations, with the distribution inputs and value
        estimates that gave them. The actions' log-probs are added per fragment by
        :meth:`postprocess` (one vectorised pass instead of a gather per step)."""
        dist_inputs, values = self.model(self._as_tensor(obs))
        dist = self.dist_cls(dist_inputs)
        actions = dist.sample() if explore else dist.mode()
        extras = {ACTION_DIST_INPUTS: self._as_numpy(dist_inputs), VF_PREDS: self._as_numpy(values)}
        return self._as_numpy(actions), extras

    # per-step conversions: on the CPU (every rollout worker) skip the no-op device moves,
    # which cost about as much as the conversion itself on a batch of 8 observations
    def _as_tensor(self, array: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(array)
        return tensor if self.device.type == "cpu" else tensor.to(self.device)

    def _as_numpy(self, tensor: torch.Tensor) -> np.ndarray:
        return tensor.numpy() if self.device.type == "cpu" else tensor.cpu().numpy()

    def metrics(self) -> dict[str, float]:
        """What this copy reports about its acting beside its episodes (an exploration
        rate, say); results show it per worker as ``worker_<index>/<name>``."""
        return {}

    def set_env_steps_sampled(self, steps: int) -> None:
        """The run has sampled ``steps`` env steps in all. A worker that starts mid-run (the
        replacement of a dead one, or any worker of a restored run) hears it before it
        samples, so a schedule of its acting (DQN's epsilon) goes on from there instead
        of from its start. Nothing by default."""

    @inference
    def compute_values(self, obs: np.ndarray) -> np.ndarray:
        return self._as_numpy(self.model(self._as_tensor(obs))[1])

    def env_actions(self, actions: np.ndarray) -> np.ndarray:
        """What the env receives: Box actions are clipped to their bounds."""
        if isinstance(self.action_space, gym.spaces.Box):
            return np.clip(actions, self.action_space.low, self.action_space.high)
        return actions

    def greedy_env_actions(self, obs: torch.Tensor) -> torch.Tensor:
        """``env_actions(compute_actions(obs, explore=False))`` as torch operations alone,
        which an exported model (:mod:`flowrl.inference`) traces; ``obs`` already
        normalised."""
        actions = self.dist_cls(self.model(obs)[0]).mode()
        if isinstance(self.action_space, gym.spaces.Box):
            low, high = bounds(self.action_space, actions)
            actions = torch.minimum(torch.maximum(actions, low), high)
        return actions

    def postprocess(self, fragment: Fragment) -> SampleBatch:
        """Turn a sampled fragment into training rows (returns, advantages, ...)."""
        return self.add_action_logp(fragment).to_batch()

    @inference
    def add_action_logp(self, fragment: Fragment) -> Fragment:
        """Adds ``action_logp``: each sampled action's log-prob under the distribution
        inputs recorded when it was sampled (a no-op for fragments without them)."""
        cols = fragment.columns
        if ACTION_DIST_INPUTS in cols:
            dist = self.dist_cls(torch.from_numpy(cols[ACTION_DIST_INPUTS]))
            cols[LOGP] = dist.log_prob(torch.from_numpy(cols[ACTIONS])).numpy()
        return fragment

    # -- learning ------------------------------------------------------------------------
    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
        """The scalar loss and a dict of detached statistics."""
        raise NotImplementedError

    def _tensors(self, batch: SampleBatch) -> dict[str, torch.Tensor]:
        keys = batch.keys() if self.loss_columns is None else self.loss_columns
        return {k: torch.from_numpy(batch[k]).to(self.device) for k in keys}

    def _backward(self, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        self.optimizer.zero_grad(set_to_none=True)
        try:
            loss, stats = self.loss(batch)
        except KeyError as e:
            if self.loss_columns is None or not e.args or e.args[0] in batch:
                raise
            raise KeyError(
                f"{e.args[0]!r}: the loss read a column that {type(self).__name__}.loss_columns "
                f"{self.loss_columns} leaves out; add it there"
            ) from None
        loss.backward()
        norm = self.clip_gradients(list(self.model.parameters()), loss, batch)
        if self.config.grad_clip > 0:
            stats["grad_norm"] = norm
        return stats

    def clip_gradients(
        self,
        params: list[torch.Tensor],
        loss: torch.Tensor,
        batch: dict[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Clip the gradients of ``params`` to ``grad_clip`` (when set) and return their
        global norm. A non-finite norm raises :class:`NonFiniteError`, before any optimiser
        step, saying where it came from: the batch's columns, the loss, or the gradient."""
        if self.config.grad_clip > 0:
            norm = nn.utils.clip_grad_norm_(params, self.config.grad_clip)
        else:
            norm = nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        if not torch.isfinite(norm):
            raise NonFiniteError(self._non_finite_source(loss, batch))
        return norm.detach()

    def _non_finite_source(self, loss: torch.Tensor, batch: dict[str, torch.Tensor] | None) -> str:
        name = f"{type(self).__name__} (update {self.num_updates})"
        weight = self._non_finite_weight()
        if weight is not None:
            return f"{name}: weight {weight} is non-finite before the update"
        bad = [
            k
            for k, v in (batch or {}).items()
            if v.is_floating_point() and not bool(torch.isfinite(v).all())
        ]
        if bad:
            return f"{name}: non-finite values in the training batch's {', '.join(bad)}"
        if not bool(torch.isfinite(loss).all()):
            return (
                f"{name}: the loss is {float(loss.detach().sum())} on a finite batch "
                "(a learning rate or loss setting too large?)"
            )
        return f"{name}: the gradient is non-finite on a finite batch and loss"

    def check_finite_weights(self) -> None:
        """Raise :class:`NonFiniteError` when a weight of any of the policy's networks is
        NaN or infinite (checkpoints call it, so a bad update never overwrites good
        weights on disk)."""
        weight = self._non_finite_weight()
        if weight is not None:
            raise NonFiniteError(f"{type(self).__name__}: weight {weight} is non-finite")

    def _non_finite_weight(self) -> str | None:
        """The name of the first NaN or infinite weight of the policy's networks, if any."""
        for attr, module in vars(self).items():
            if isinstance(module, nn.Module):
                for pname, p in module.named_parameters():
                    if not bool(torch.isfinite(p).all()):
                        return f"{attr}.{pname}"
        return None

    def learn_on_batch(
        self, batch: SampleBatch, *, num_sgd_iter: int = 1, minibatch_size: int = 0
    ) -> dict[str, float]:
        """``num_sgd_iter`` passes of minibatch SGD (the whole batch when size is 0).

        The batch moves to the learner device once; minibatches are shuffled index sets
        of whole sequences (see :attr:`sequence_length`; rows, when it is 1).
        """
        tensors = self._tensors(batch)
        seq = self.sequence_length
        n = len(batch) // seq
        size = max(1, minibatch_size // seq) if 0 < minibatch_size < len(batch) else n
        steps = torch.arange(seq, device=self.device)
        stats: list[dict[str, Any]] = []
        for _ in range(num_sgd_iter):
            order = torch.from_numpy(self.rng.permutation(n)).to(self.device)
            for start in range(0, n, size):
                idx = order[start : start + size]
                if seq > 1:
                    idx = (idx[:, None] * seq + steps).flatten()
                stats.append(self._sgd_step({k: v[idx] for k, v in tensors.items()}))
        return mean_stats(stats)

    def _sgd_step(self, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        """One optimiser step on the loss of ``batch``; returns its statistics."""
        stats = self._backward(batch)
        self.optimizer.step()
        self.num_updates += 1
        return stats

    def compute_gradients(self, batch: SampleBatch) -> tuple[list[np.ndarray], dict[str, float]]:
        """Gradients of the loss on ``batch`` as numpy arrays (parameters are unchanged)."""
        stats = self._backward(self._tensors(batch))
        grads = [
            np.zeros(p.shape, np.float32) if p.grad is None else p.grad.cpu().numpy()
            for p in self.model.parameters()
        ]
        return grads, mean_stats([stats])

    def apply_gradients(self, grads: list[np.ndarray]) -> None:
        """One optimiser step with gradients computed elsewhere."""
        for p, g in zip(self.model.parameters(), grads, strict=True):
            p.grad = torch.tensor(g, device=self.device)  # copy: Ray arrays are read-only
        self.optimizer.step()
        self.num_updates += 1

    # -- weights and state ---------------------------------------------------------------
    def get_weights(self) -> Weights:
        """The model's weights and the normalisation statistics (``normalizer/...``)."""
        return {**module_weights(self.model), **self.normalizer.get_state()}

    def set_weights(self, weights: Weights) -> None:
        model, normalizer = split_state(weights)
        load_module_weights(self.model, model)
        self.normalizer.set_state(normalizer)

    def get_state(self) -> dict[str, Any]:
        """Everything a restore needs: weights, optimiser, shuffling RNG, update count."""
        return {
            "weights": self.get_weights(),
            "optimizer": self.optimizer.state_dict(),
            "rng": self.rng.bit_generator.state,
            "num_updates": self.num_updates,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self.set_weights(state["weights"])
        load_optimizer_state(self.optimizer, state["optimizer"], self.config.lr)
        self.rng.bit_generator.state = state["rng"]
        self.num_updates = state["num_updates"]


def bounds(space: gym.spaces.Box, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A Box's low and high as tensors of ``like``'s dtype and device."""
    low = torch.as_tensor(space.low, dtype=like.dtype, device=like.device)
    return low, torch.as_tensor(space.high, dtype=like.dtype, device=like.device)


def explained_variance(predictions: np.ndarray, targets: np.ndarray) -> float:
    """``1 - Var(targets - predictions) / Var(targets)``: 1 for perfect value predictions,
    0 for predicting the mean, negative for worse (NaN when the targets are constant).

    Example:
        >>> explained_variance(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0]))
        1.0
        >>> explained_variance(np.full(3, 2.0), np.array([1.0, 2.0, 3.0]))
        0.0
    """
    variance = float(np.var(targets))
    return 1.0 - float(np.var(targets - predictions)) / variance if variance > 0 else math.nan


def mean_stats(stats: list[dict[str, Any]]) -> dict[str, float]:
    """The mean of each statistic over several updates' ``stats``.

    Example:
        >>> mean_stats([{"loss": 1.0}, {"loss": 2.0}])
        {'loss': 1.5}
    """
    if not stats:
        return {}
    out = {}
    for key in stats[0]:
        values = torch.stack([torch.as_tensor(s[key], dtype=torch.float32) for s in stats])
        out[key] = float(values.mean())
    return out


class ActorCriticPolicy(Policy):
    """A policy trained on GAE advantages and value targets (its config is an
    :class:`~flowrl.config.ActorCriticConfig`); subclasses supply ``loss``."""

    def postprocess(self, fragment: Fragment) -> SampleBatch:
        last_values = self.compute_values(fragment.last_obs)
        return add_advantages(
            self.add_action_logp(fragment),
            last_values,
            gamma=self.config.gamma,
            lam=self.config.gae_lambda,
        )


class ClippedSurrogate:
    """Mixin for policies with a clipped surrogate objective and an optional adaptive KL
    penalty (Schulman et al. 2017); their config is a
    :class:`~flowrl.config.ClippedSurrogateConfig`. Put it before the policy class it
    extends: ``class MyPolicy(ClippedSurrogate, ActorCriticPolicy)``.
    """

    config: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kl_coeff = self.config.kl_coeff

    def surrogate(
        self,
        log_ratio: torch.Tensor,
        advantages: torch.Tensor,
        mean: Callable[[torch.Tensor], torch.Tensor] = torch.mean,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The clipped surrogate loss (plus the KL penalty while its weight is not 0) of
        ``log_ratio = log pi_new - log pi_old``, and its statistics; ``mean`` averages
        over the steps (a masked mean, say)."""
        clip = self.config.clip_param
        ratio = log_ratio.exp()
        clipped = ratio.clamp(1 - clip, 1 + clip)
        policy_loss = -mean(torch.min(ratio * advantages, clipped * advantages))
        kl = mean((ratio - 1) - log_ratio)  # unbiased estimate of KL(old || new)
        stats = {
            "policy_loss": policy_loss,
            "kl": kl,
            "clip_fraction": mean(((ratio - 1).abs() > clip).float()),
        }
        # a term with a zero weight stays out of the loss: backward then skips it
        return (policy_loss + self.kl_coeff * kl if self.kl_coeff > 0 else policy_loss), stats

    def learn_on_batch(self, batch: SampleBatch, **kwargs: Any) -> dict[str, float]:
        """Learn, then adapt the KL weight as in the PPO paper: x1.5 when the KL overshoots
        twice its target, x0.5 when it stays under half of it."""
        stats = super().learn_on_batch(batch, **kwargs)  # type: ignore[misc]
        if self.kl_coeff > 0 and stats["kl"] > 2.0 * self.config.kl_target:
            self.kl_coeff *= 1.5
        elif self.kl_coeff > 0 and stats["kl"] < 0.5 * self.config.kl_target:
            self.kl_coeff *= 0.5
        return {**stats, "kl_coeff": self.kl_coeff}

    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), "kl_coeff": self.kl_coeff}  # type: ignore[misc]

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)  # type: ignore[misc]
        self.kl_coeff = state["kl_coeff"]

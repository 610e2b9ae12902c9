"""The learner: loss, optimisers, target networks, gradient clipping, non-finite checks and
the one minibatch SGD loop.

A learner trains a ``Policy``'s acting module in place (on the
policy's device). An algorithm subclasses ``Learner`` and supplies ``loss``;
one with several networks (SAC: actor, critics, temperature) also says which parameters
each optimiser steps (``optimized``) and returns one loss per optimiser. Rollout
workers never build a learner (A3C's gradient workers do, for the loss alone).

Examples:
    >>> class Reinforce(Learner):
    ...     loss_columns = ("obs", "actions", "rewards")
    ...
    ...     def loss(self, batch):
    ...         dist, _ = self.distribution(batch)
    ...         loss = -(dist.log_prob(batch["actions"]) * batch["rewards"]).mean()
    ...         return loss, {"loss": loss.detach()}
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from flowrl.core.config import Config
from flowrl.core.sample_batch import OBS, STATE_IN, STATE_STARTS, NonFiniteError, SampleBatch
from flowrl.core.schedules import Schedule, is_schedule, scheduled
from flowrl.learning.optim import adam
from flowrl.learning.policy import Policy, load_module_weights, module_weights
from flowrl.learning.postprocessing import VALID, sequence_states
from flowrl.learning.spaces import to_tensor

Losses = torch.Tensor | dict[str, torch.Tensor]


def _spend_read_only_warning() -> None:
    """torch warns once per process when it wraps a read-only numpy array, which is what
    Ray's object store hands out; the learner only reads such arrays. Spending that one
    warning here, silenced, beats installing a process-wide warnings filter."""
    array = np.zeros(1)
    array.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.from_numpy(array)


def load_optimizer_state(optimizer: Any, state: dict, lr: float) -> None:
    """Load a saved optimiser state but keep the config's learning rate: a run resumed
    (or a Tune trial restored) with another ``lr`` trains with it, not the saved one."""
    optimizer.load_state_dict(state)
    for group in optimizer.param_groups:
        group["lr"] = lr


def mean_stats(stats: list[dict[str, Any]]) -> dict[str, float]:
    """The mean of each statistic over several updates' ``stats``.

    Examples:
        >>> mean_stats([{"loss": 1.0}, {"loss": 2.0}])
        {'loss': 1.5}
    """
    if not stats:
        return {}
    if len(stats) == 1:  # one update's (a replay step's): as below, without the stack
        values = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in stats[0].items()}
        return {k: float(v if v.ndim == 0 else v.mean()) for k, v in values.items()}
    out = {}
    for key in stats[0]:
        values = torch.stack([torch.as_tensor(s[key], dtype=torch.float32) for s in stats])
        out[key] = float(values.mean())
    return out


@dataclass
class Optimized:
    """Parameters one Adam optimiser steps, with its learning rate (a constant, or a
    schedule of env steps: ``flowrl.core.schedules``) and epsilon."""

    params: list[torch.Tensor]
    lr: Schedule
    eps: float = 1e-5


def minibatches(
    tensors: dict[str, torch.Tensor],
    *,
    rows: int,
    seq: int,
    size: int,
    order: torch.Tensor | None,
) -> Iterator[tuple[Any, dict[str, torch.Tensor]]]:
    """The minibatches of one pass over ``rows`` rows, with the rows each holds: ``size``
    whole sequences of ``seq`` rows, taken in ``order`` (a permutation of the sequences),
    or in row order as slices (views, no gather) when ``order`` is None."""
    n = rows // seq
    for start in range(0, n, size):
        if order is None:
            idx: Any = slice(start * seq, (start + size) * seq)
            yield idx, tensors if size == n else {k: v[idx] for k, v in tensors.items()}
            continue
        idx = order[start : start + size]
        if seq > 1:
            idx = (idx[:, None] * seq + torch.arange(seq, device=idx.device)).flatten()
        yield idx, {k: v[idx] for k, v in tensors.items()}


def restarts(batch: dict[str, torch.Tensor], length: int, initial_state: Any) -> tuple[Any, Any]:
    """Where a recurrent unroll over sequences of ``length`` rows takes a state, and which
    (``ActingModule.unroll``'s ``states`` ``[B, L, ...]`` and ``starts`` ``[B, L]``): each
    sequence's first valid step its recorded state (``state_in``), an episode's start
    (``state_starts``) ``initial_state(B)``."""
    valid = batch[VALID].view(-1, length)
    fresh = initial_state(len(valid))
    recorded = sequence_states(batch[STATE_IN], length, fresh.shape[1:]).to(fresh)
    starts = batch[STATE_STARTS].view(-1, length)
    resumes = valid & (valid.cumsum(1) == 1) & ~starts  # each sequence's first valid step
    at = starts.view(*starts.shape, *[1] * (fresh.dim() - 1))
    return torch.where(at, fresh[:, None], recorded[:, None]), starts | resumes


def take_per_row(
    stats: dict[str, Any], per_row: dict[str, torch.Tensor], idx: Any, rows: int
) -> dict[str, Any]:
    """Move the per-row statistics of a minibatch (tensors of one value per row) from
    ``stats`` into ``per_row``, at the minibatch's rows ``idx`` of a batch of ``rows``;
    returns the scalar statistics left."""
    for key in [k for k, v in stats.items() if torch.is_tensor(v) and v.ndim > 0]:
        value = stats.pop(key)
        out = per_row.setdefault(key, value.new_zeros((rows, *value.shape[1:])))
        out[idx] = value
    return stats


#: torch's private kernels that ``clip_gradients`` calls, looked up once (a torch without
#: them clips with ``clip_grad_norm_``)
_FOREACH = hasattr(torch, "_foreach_norm") and hasattr(torch, "_foreach_mul_")


def clip_gradients(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Clip the gradients of ``params`` to a global norm of ``max_norm`` (0: no clipping);
    returns their norm before clipping. The update of ``nn.utils.clip_grad_norm_`` (the same
    norms, scale and kernels) without its grouping by device and dtype: a learner's
    parameters share both, and on a small network that grouping cost as much as the rest.

    Examples:
        >>> p = torch.nn.Parameter(torch.zeros(2))
        >>> p.grad = torch.tensor([3.0, 4.0])
        >>> clip_gradients([p], 1.0).item(), [round(g, 4) for g in p.grad.tolist()]
        (5.0, [0.6, 0.8])
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    if not _FOREACH or len({(g.device, g.dtype) for g in grads}) > 1:
        if max_norm > 0:  # torch's own, which groups them
            return nn.utils.clip_grad_norm_(params, max_norm).detach()
        return nn.utils.get_total_norm(grads).detach()
    with torch.no_grad():
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        if max_norm > 0:
            torch._foreach_mul_(grads, torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    return norm


def missing_column(learner: str, column: str, loss_columns: tuple[str, ...]) -> str:
    """What a loss that read a column its learner does not move should be told."""
    return (
        f"{column!r}: the loss read a column that {learner}.loss_columns {loss_columns} "
        "leaves out; add it there"
    )


def non_finite_weight(modules: dict[str, nn.Module]) -> str | None:
    """The name of the first NaN or infinite weight of ``modules``, if any."""
    for attr, module in modules.items():
        for pname, p in module.named_parameters():
            if not bool(torch.isfinite(p).all()):
                return f"{attr}.{pname}"
    return None


def non_finite_source(
    name: str,
    modules: dict[str, nn.Module],
    loss: torch.Tensor,
    batch: dict[str, torch.Tensor] | None,
) -> str:
    """Where a non-finite gradient came from: a weight, the batch's columns, the loss, or
    the gradient itself."""
    weight = non_finite_weight(modules)
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


class Learner:
    """Trains ``policy``'s acting module: subclasses supply ``loss``.

    Examples:
        >>> from flowrl.algorithms.ppo import PPOConfig, PPOLearner, PPOPolicy
        >>> import gymnasium as gym
        >>> policy = PPOPolicy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), PPOConfig())
        >>> learner = PPOLearner(policy, PPOConfig())
        >>> list(learner.optimizers)
        ['model']
    """

    #: The batch columns ``loss`` reads, the only ones each minibatch moves (None: all).
    loss_columns: ClassVar[tuple[str, ...] | None] = None
    #: Minibatches are shuffled rows (or sequences) each pass; False: slices in row order
    #: (replayed rows are a random sample already).
    shuffle: ClassVar[bool] = True
    #: Several optimisers whose losses each reach only their own parameters: one backward
    #: pass of their sum (``backward``). False: one pass per loss.
    disjoint_losses: ClassVar[bool] = False

    def __init__(self, policy: Policy, config: Config) -> None:
        self.policy, self.config = policy, config
        self.module = policy.module
        self.device = policy.device
        self.rng = np.random.default_rng(config.seed)
        self.num_updates = 0
        #: the run's env steps sampled when the current iteration began: the config's
        #: schedules take their values there (``set_env_steps``)
        self.env_steps = 0.0
        #: (online, target) pairs that ``update_targets`` moves together
        self.targets: list[tuple[nn.Module, nn.Module]] = []
        #: parts of the loss that adapt after every trained batch, by name (a KL penalty's
        #: weight: ``AdaptiveKL``): ``after_batch(stats)`` returns statistics to report
        self.adapted: dict[str, Any] = {}
        _spend_read_only_warning()

    @property
    def sequence_length(self) -> int:
        """Rows that belong together in order (a V-trace learner's steps of one env, a
        recurrent module's sequences; 1: none), kept whole in minibatches."""
        return self.config.max_seq_len if self.module.recurrent else 1

    def forward(self, batch: dict[str, torch.Tensor], module: nn.Module | None = None) -> Any:
        """The acting module (or ``module``, a target copy) on a minibatch's observations,
        masked as the policy masks them; a recurrent module runs through each sequence
        from the state its first valid step recorded (``state_in``), restarting from a
        fresh state where the sampler did (``state_starts``: episode starts)."""
        if not self.module.recurrent:
            return self.policy.forward(batch[OBS], module=module)
        states, starts = restarts(batch, self.sequence_length, self.module.initial_state)
        return self.policy.forward(batch[OBS], states, module=module, starts=starts)

    def distribution(self, batch: dict[str, torch.Tensor]) -> tuple[Any, torch.Tensor | None]:
        """The action distribution and value estimates of a minibatch (``forward``)."""
        out = self.forward(batch)
        return self.policy.dist_cls(out.dist_inputs), out.value

    # -- what a subclass supplies ----------------------------------------------------------
    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[Losses, dict[str, Any]]:
        """The loss of a minibatch (one per ``optimized`` name with several optimisers) and
        detached statistics; one with a value per row (a TD error) comes back in row order."""
        raise NotImplementedError

    def optimized(self) -> dict[str, Optimized]:
        """What each optimiser steps, by name: by default one over the acting module."""
        params = list(self.module.parameters())
        return {"model": Optimized(params, self.config.lr, eps=self.config.adam_eps)}

    def batch_stats(self, batch: SampleBatch) -> dict[str, float]:
        """Statistics of a whole train batch, beside the loss's (explained variance, say)."""
        return {}

    def target_of(self, module: nn.Module) -> nn.Module:
        """A frozen copy of ``module`` that ``update_targets`` moves towards it; keep
        it in an attribute (checkpoints save the learner's modules by attribute)."""
        target = copy.deepcopy(module).requires_grad_(False)
        self.targets.append((module, target))
        return target

    # -- optimisers ----------------------------------------------------------------------
    @cached_property
    def _optimized(self) -> dict[str, Optimized]:
        return self.optimized()

    @cached_property
    def optimizers(self) -> dict[str, Any]:
        """One Adam per ``optimized`` entry (``adam``), built on first use."""
        return {
            name: adam(o.params, scheduled(o.lr, self.env_steps), eps=o.eps)
            for name, o in self._optimized.items()
        }

    # -- schedules -----------------------------------------------------------------------
    def set_env_steps(self, env_steps: float) -> None:
        """Where the run is, for the config's schedules: an optimiser whose learning rate
        is a schedule takes its value at ``env_steps``, and ``scheduled`` reads the
        other schedulable settings (``entropy_coeff``) there, until the next call."""
        self.env_steps = float(env_steps)
        for name, o in self._optimized.items():
            if is_schedule(o.lr):
                for group in self.optimizers[name].param_groups:
                    group["lr"] = scheduled(o.lr, env_steps)

    def scheduled(self, name: str) -> float:
        """The config value ``name`` (a constant or a schedule) at ``env_steps``.

        Examples:
            >>> loss = loss - self.scheduled("entropy_coeff") * entropy  # doctest: +SKIP
        """
        return scheduled(getattr(self.config, name), self.env_steps)

    # -- the SGD loop --------------------------------------------------------------------
    def learn_on_batch(
        self, batch: SampleBatch, *, num_sgd_iter: int = 1, minibatch_size: int = 0
    ) -> dict[str, Any]:
        """``num_sgd_iter`` passes of minibatch SGD (the whole batch when size is 0), the
        batch moved to the device once; minibatches are whole sequences (``sequence_length``),
        shuffled unless ``shuffle`` is False. Returns the mean of each statistic, and
        per-row statistics in the batch's row order."""
        tensors, rows, seq = self._tensors(batch), len(batch), self.sequence_length
        size = max(1, minibatch_size // seq) if 0 < minibatch_size < rows else rows // seq
        stats: list[dict[str, Any]] = []
        per_row: dict[str, torch.Tensor] = {}
        for _ in range(num_sgd_iter):
            order = self._order(rows // seq)
            for idx, minibatch in minibatches(tensors, rows=rows, seq=seq, size=size, order=order):
                stats.append(take_per_row(self._sgd_step(minibatch), per_row, idx, rows))
        out: dict[str, Any] = {**mean_stats(stats), **self.batch_stats(batch)}
        for part in self.adapted.values():
            out.update(part.after_batch(out))
        return out | {k: v.cpu().numpy() for k, v in per_row.items()}

    def _order(self, n: int) -> torch.Tensor | None:
        """A shuffled order of ``n`` rows (or sequences) for one pass, or None: in order."""
        return torch.from_numpy(self.rng.permutation(n)).to(self.device) if self.shuffle else None

    def _tensors(self, batch: SampleBatch) -> dict[str, torch.Tensor]:
        keys = batch.keys() if self.loss_columns is None else self.loss_columns
        if self.module.recurrent:  # what forward reads of sequences
            keys = [*keys, *(k for k in (STATE_IN, STATE_STARTS, VALID) if k not in keys)]
        return {k: to_tensor(batch[k]).to(self.device) for k in keys}

    def _sgd_step(self, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        """One step of every optimiser on the loss of ``batch``; returns its statistics."""
        stats = self._gradients(batch)
        self._step()
        return stats

    def _step(self) -> None:
        for optimizer in self.optimizers.values():
            optimizer.step()
        self.policy.weights_changed()  # (the numpy copy that acts, if any, reloads)
        self.num_updates += 1

    def _gradients(self, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        """Each optimiser's parameters get the gradient of their loss, clipped and checked
        finite before any of them steps."""
        optimizers = self.optimizers
        for optimizer in optimizers.values():
            optimizer.zero_grad(set_to_none=True)
        with naming_missing_columns(self, batch):
            losses, stats = self.loss(batch)
        losses = backward(losses, self._optimized, disjoint=self.disjoint_losses)
        for name, loss in losses.items():
            norm = clip_gradients(self._optimized[name].params, self.config.grad_clip)
            if not torch.isfinite(norm):  # before any optimiser steps
                where = f"{type(self).__name__} (update {self.num_updates})"
                raise NonFiniteError(non_finite_source(where, self._modules(), loss, batch))
            if self.config.grad_clip > 0:
                stats["grad_norm" if name == "model" else f"{name}_grad_norm"] = norm
        return stats

    # -- gradients computed elsewhere (A3C) ------------------------------------------------
    def compute_gradients(self, batch: SampleBatch) -> tuple[list[np.ndarray], dict[str, float]]:
        """Gradients of the loss on ``batch`` as numpy arrays (parameters are unchanged)."""
        stats = self._gradients(self._tensors(batch))
        return [as_numpy_gradient(p) for p in self._params()], mean_stats([stats])

    def apply_gradients(self, grads: list[np.ndarray]) -> None:
        """One optimiser step with gradients computed elsewhere."""
        for p, g in zip(self._params(), grads, strict=True):
            p.grad = torch.tensor(g, device=self.device)  # copy: Ray arrays are read-only
        self._step()

    def _params(self) -> list[torch.Tensor]:
        return [p for o in self._optimized.values() for p in o.params]

    # -- periodic updates (operators of the plan call these) -------------------------------
    @torch.no_grad()
    def update_targets(self, tau: float = 1.0) -> None:
        """target <- tau * online + (1 - tau) * target, for every target (tau=1: a copy)."""
        for online, target in self.targets:
            torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), tau)

    # -- non-finite checks ---------------------------------------------------------------
    def check_finite_weights(self) -> None:
        """Raise ``NonFiniteError`` when a weight of any network the learner trains is
        NaN or infinite (checkpoints call it, so a bad update never overwrites good
        weights on disk)."""
        weight = non_finite_weight(self._modules())
        if weight is not None:
            raise NonFiniteError(f"{type(self).__name__}: weight {weight} is non-finite")

    def _modules(self) -> dict[str, nn.Module]:
        return {k: v for k, v in vars(self).items() if isinstance(v, nn.Module)}

    # -- state ---------------------------------------------------------------------------
    def _own_modules(self) -> dict[str, nn.Module]:
        """The networks only the learner holds (targets, critics), by attribute."""
        return {k: m for k, m in self._modules().items() if m is not self.module}

    def get_state(self) -> dict[str, Any]:
        """What a restore needs beyond the policy's weights: the learner's own networks,
        optimisers, shuffling RNG, update count and adapted parts (``learner_state``)."""
        return learner_state(self)

    def set_state(self, state: dict[str, Any]) -> None:
        load_learner_state(self, state)


def backward(losses: Losses, optimized: dict[str, Optimized], *, disjoint: bool) -> dict[str, Any]:
    """The gradients of ``losses`` into each optimiser's parameters: one backward pass for
    one loss, or for the sum of ``disjoint`` ones (each reaching its own optimiser's
    parameters alone), else one pass per loss into its optimiser's. Returns the losses
    by optimiser name."""
    if isinstance(losses, torch.Tensor):  # one optimiser: plain backward
        losses.backward()
        return {name: losses for name in optimized}
    if disjoint:
        torch.stack(list(losses.values())).sum().backward()
        return losses
    names = list(losses)
    for i, name in enumerate(names):
        params = optimized[name].params
        grads = torch.autograd.grad(
            losses[name], params, retain_graph=i < len(names) - 1, allow_unused=True
        )
        for p, g in zip(params, grads, strict=True):
            p.grad = g
    return losses


@contextlib.contextmanager
def naming_missing_columns(learner: Learner, batch: dict[str, Any]) -> Iterator[None]:
    """A loss's KeyError for a column the minibatch lacks because ``loss_columns`` leaves
    it out becomes one that says so (``missing_column``)."""
    try:
        yield
    except KeyError as e:
        missing, columns = e.args[0] if e.args else None, learner.loss_columns
        if columns is None or missing is None or missing in batch:
            raise
        raise KeyError(missing_column(type(learner).__name__, missing, columns)) from None


def learner_state(learner: Learner) -> dict[str, Any]:
    """``Learner.get_state``: its own networks (targets, critics), optimisers, shuffling
    RNG, update count and adapted parts."""
    return {
        "modules": {k: module_weights(m) for k, m in learner._own_modules().items()},
        "optimizers": {k: o.state_dict() for k, o in learner.optimizers.items()},
        "rng": learner.rng.bit_generator.state,
        "num_updates": learner.num_updates,
        "adapted": {name: part.get_state() for name, part in learner.adapted.items()},
    }


def load_learner_state(learner: Learner, state: dict[str, Any]) -> None:
    """``Learner.set_state``: ``learner_state``'s output back, each optimiser at the
    learning rate its schedule gives now."""
    for name, module in learner._own_modules().items():
        load_module_weights(module, state["modules"][name])
    learner.policy.weights_changed()
    for name, optimizer in learner.optimizers.items():
        lr = scheduled(learner._optimized[name].lr, learner.env_steps)
        load_optimizer_state(optimizer, state["optimizers"][name], lr)
    learner.rng.bit_generator.state = state["rng"]
    learner.num_updates = state["num_updates"]
    # checkpoints written before adapted parts kept the KL weight alone
    adapted = state.get("adapted", {"kl": {"coeff": state.get("kl_coeff")}})
    for name, part in learner.adapted.items():  # a part the checkpoint lacks starts fresh
        if name in adapted and adapted[name].get("coeff", 0) is not None:
            part.set_state(adapted[name])


def as_numpy_gradient(param: torch.Tensor) -> np.ndarray:
    """A parameter's gradient as a numpy array (zeros where it has none)."""
    return np.zeros(param.shape, np.float32) if param.grad is None else param.grad.cpu().numpy()

"""The learner: the one SGD loop (per-row statistics in row order, several optimisers each
stepping its own parameters, nothing stepped on a non-finite gradient), the periodic
updates as plan operators, and what rollout workers hold."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from flowrl.core.config import Config
from flowrl.core.context import STEPS_TRAINED
from flowrl.core.iter import LocalIterator
from flowrl.core.sample_batch import SampleBatch
from flowrl.learning.learner import Learner, NonFiniteError, Optimized
from flowrl.learning.losses import AdaptiveKL
from flowrl.learning.optim import FusedAdam, adam
from flowrl.learning.policy import Policy
from flowrl.ops import UpdateTargets
from flowrl.rollout.worker import WorkerSet
from flowrl.run.spec import list_algorithms

SPACES = gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2)


class RowLearner(Learner):
    """A loss that reports each row's id as a per-row statistic."""

    loss_columns = ("obs", "row")

    def loss(self, batch):
        dist, values = self.policy.distribution(batch["obs"])
        loss = values.pow(2).mean() - dist.entropy().mean()
        return loss, {"loss": loss.detach(), "row_id": batch["row"].float()}


def batch(n: int) -> SampleBatch:
    rng = np.random.default_rng(0)
    return SampleBatch(obs=rng.normal(size=(n, 3)).astype(np.float32), row=np.arange(n))


def test_per_row_statistics_come_back_in_row_order_from_shuffled_minibatches():
    learner = RowLearner(Policy(*SPACES, Config()), Config())
    stats = learner.learn_on_batch(batch(100), num_sgd_iter=2, minibatch_size=16)
    np.testing.assert_array_equal(stats["row_id"], np.arange(100))
    assert learner.num_updates == 2 * 7 and isinstance(stats["loss"], float)


class TwoOptimisers(Learner):
    """The policy head learns from one loss, the value head from another."""

    def optimized(self):
        module = self.module
        return {
            "pi": Optimized(list(module.pi.parameters()), 0.01),
            "vf": Optimized(list(module.vf.parameters()), 0.01),
        }

    def loss(self, batch):
        dist, values = self.policy.distribution(batch["obs"])
        # each loss also pulls on the other head's parameters, which must not follow it
        pi_loss = -dist.entropy().mean() + 10 * values.mean()
        vf_loss = (values - 1).pow(2).mean() + 10 * dist.inputs[:, 0].mean()
        error = (values - 1).pow(2).mean().detach()
        return {"pi": pi_loss, "vf": vf_loss}, {"value_error": error}


def test_each_optimiser_steps_its_parameters_on_its_own_loss():
    learner = TwoOptimisers(Policy(*SPACES, Config()), Config())
    data = batch(64)
    first = learner.learn_on_batch(data)["value_error"]
    for _ in range(100):
        last = learner.learn_on_batch(data)["value_error"]
    assert last < first / 10, "the value head learns its own loss alone"
    entropy = learner.policy.distribution(torch.from_numpy(data["obs"]))[0].entropy()
    assert float(entropy.mean().detach()) > 0.69, "the policy head moved towards maximum entropy"


def test_a_non_finite_loss_steps_no_optimiser():
    learner = TwoOptimisers(Policy(*SPACES, Config()), Config())
    before = [p.clone() for p in learner.module.parameters()]
    loss = learner.loss
    learner.loss = lambda b: ({**loss(b)[0], "vf": loss(b)[0]["vf"] * math.nan}, {})
    with pytest.raises(NonFiniteError, match=r"TwoOptimisers.*the loss is nan"):
        learner.learn_on_batch(batch(8))
    after = list(learner.module.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_no_algorithm_writes_its_own_sgd_loop():
    loop = ("learn_on_batch", "_sgd_step", "_gradients", "compute_gradients", "apply_gradients")
    for spec in list_algorithms():
        for cls in spec.learner_cls.__mro__[:-2]:  # all but Learner and object
            assert not set(loop) & set(vars(cls)), f"{cls.__name__} overrides the SGD loop"
        for cls in spec.policy_cls.__mro__:
            assert not {"loss", "learn_on_batch", "optimizer"} & set(vars(cls)), cls.__name__


class KLLearner(Learner):
    """A loss with a KL penalty whose batches report a given mean KL."""

    loss_columns = ("obs", "kl")

    def __init__(self, policy, config):
        super().__init__(policy, config)
        self.kl = self.adapted["kl"] = AdaptiveKL(coeff=0.2, target=0.01)

    def loss(self, batch):
        loss = self.policy.distribution(batch["obs"])[1].pow(2).mean()
        return loss, {"kl": batch["kl"].mean()}


def test_a_loss_s_kl_weight_adapts_after_each_batch_and_is_checkpointed_with_its_learner():
    learner = KLLearner(Policy(*SPACES, Config()), Config())
    coeffs = []
    for kl in (0.05, 0.01, 0.001):  # overshoot: x1.5; near the target: kept; far under: x0.5
        rows = batch(4)
        rows["kl"] = np.full(4, kl, np.float32)
        coeffs.append(learner.learn_on_batch(rows)["kl_coeff"])
    assert coeffs == pytest.approx([0.3, 0.3, 0.15])
    clone = KLLearner(Policy(*SPACES, Config()), Config())
    clone.set_state(learner.get_state())
    assert clone.kl.coeff == pytest.approx(0.15)
    older = {k: v for k, v in learner.get_state().items() if k != "adapted"}
    clone.set_state({**older, "kl_coeff": 0.6})  # a checkpoint from before adapted parts
    assert clone.kl.coeff == 0.6


def test_update_targets_keeps_its_last_copy_in_checkpoints():
    def train(n):
        op.context.counters[STEPS_TRAINED] += n
        return n

    calls = []
    op = UpdateTargets(calls.append, period=25)
    list(LocalIterator.from_items([10] * 3).for_each(train).for_each(op))
    state = op.context.get_state()["plan_state"]["update_targets"]
    assert calls == [1.0] and state == {"last": 30}


@pytest.mark.ray
@pytest.mark.parametrize("name", [pytest.param("sac", marks=pytest.mark.slow), "dqn"])
def test_a_remote_rollout_worker_holds_only_the_acting_module(name, ray_session):
    ray = ray_session
    spec = next(s for s in list_algorithms() if s.name == name)
    env = "Pendulum-v1" if name == "sac" else "CartPole-v1"
    config = spec.config_cls(env=env, num_workers=1, num_envs_per_worker=2)
    policy_cls, learner_cls = spec.classes(config)
    workers = WorkerSet(policy_cls=policy_cls, learner_cls=learner_cls, config=config)
    try:
        remote = workers.remote_workers[0]
        ray.get(remote.sample.remote())
        acting = sum(p.numel() for p in workers.local_worker.policy.module.parameters())
        learner = workers.local_worker.parameter_count()
        assert ray.get(remote.parameter_count.remote()) == acting
        # DQN: the Q-network and its target; SAC: the actor, two critics and their targets
        assert learner >= (2 if name == "dqn" else 4) * acting
        sent = workers.local_worker.get_weights()["default"]
        assert sum(v.size for k, v in sent.items() if not k.startswith("normalizer/")) == acting
    finally:
        workers.stop()


def test_adam_falls_back_to_torch_optim_when_the_private_kernel_changes(monkeypatch):
    """torch._fused_adam_ is private: a release that changes its signature or its update
    gets torch.optim.Adam, not a wrong step."""
    from flowrl.learning import optim

    def changed(*args, **kwargs):
        raise TypeError("_fused_adam_() got an unexpected keyword argument 'beta1'")

    for kernel in (changed, lambda params, *a, **k: torch._foreach_add_(params, 1.0)):
        monkeypatch.setattr(torch, "_fused_adam_", kernel)
        optim.fused_kernel_agrees.cache_clear()
        assert isinstance(adam(torch.nn.Linear(2, 1).parameters(), 1e-3), torch.optim.Adam)
    monkeypatch.undo()
    optim.fused_kernel_agrees.cache_clear()
    assert isinstance(adam(torch.nn.Linear(2, 1).parameters(), 1e-3), FusedAdam)


def test_fused_adam_steps_and_saves_as_torch_adam_does():
    """flowrl's Adam (no torch._dynamo import) makes torch.optim.Adam's update, and either
    loads the other's state_dict."""
    torch.manual_seed(0)
    ours_net, theirs_net = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    theirs_net.load_state_dict(ours_net.state_dict())
    ours = adam(ours_net.parameters(), 1e-2, eps=1e-5)
    theirs = torch.optim.Adam(theirs_net.parameters(), lr=1e-2, eps=1e-5, fused=True)
    assert isinstance(ours, FusedAdam)
    for _ in range(5):
        x = torch.randn(8, 4)
        for net, opt in ((ours_net, ours), (theirs_net, theirs)):
            opt.zero_grad(set_to_none=True)
            net(x).pow(2).sum().backward()
            opt.step()
    for a, b in zip(ours_net.parameters(), theirs_net.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    saved = theirs.state_dict()
    assert ours.state_dict()["param_groups"] == saved["param_groups"]
    again = adam(ours_net.parameters(), 1e-2, eps=1e-5)
    again.load_state_dict(saved)  # a checkpoint written with torch's Adam
    theirs.load_state_dict(ours.state_dict())  # and the other way
    for s in (again.state_dict()["state"][0], theirs.state_dict()["state"][0]):
        assert s["step"].item() == 5
        torch.testing.assert_close(s["exp_avg"], saved["state"][0]["exp_avg"])

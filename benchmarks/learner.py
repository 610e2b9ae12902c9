"""Learner overhead: SGD updates per second of flowrl's PPO and DQN learners against a plain
torch loop doing the same work (same network, loss, optimiser and minibatches) on the same
batch, so the framework's overhead shows as the ratio.

    python benchmarks/learner.py [--seconds 6] [--rounds 12] [--device cuda] [--atari]

Writes benchmarks/results/learner.json (learner_<device>.json with --device or --atari).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from common import interleaved, print_table, ratio_spread, steady, write_results

OBS_SPACE = gym.spaces.Box(-1, 1, (4,), np.float32)  # CartPole-v1's spaces
ACTION_SPACE = gym.spaces.Discrete(2)
FRAMES = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)  # Atari's stacked frames


def ppo_batch(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "obs": rng.normal(size=(n, 4)).astype(np.float32),
        "actions": rng.integers(0, 2, n),
        "action_logp": np.full(n, np.log(0.5), np.float32),
        "advantages": rng.normal(size=n).astype(np.float32),
        "value_targets": rng.normal(size=n).astype(np.float32),
        "vf_preds": rng.normal(size=n).astype(np.float32),
    }


#: an update's label, and one update of flowrl's learner and of the plain torch loop
#: (each returns the SGD steps it made)
Steps = tuple[str, Callable[[], int], Callable[[], int]]


def plain_ppo(cfg: Any, device: str = "cpu") -> Callable[[dict[str, np.ndarray]], None]:
    """PPO's update as a plain torch loop: ``cfg``'s epochs of minibatches over a batch of
    any size, on PPO's network for CartPole's spaces, with its loss, Adam and clipping (the
    learner's work without flowrl; ``scaling.py`` puts it between lockstep rounds too)."""
    from flowrl.algorithms.ppo import PPOPolicy
    from flowrl.learning.distributions import Categorical

    model = PPOPolicy(OBS_SPACE, ACTION_SPACE, cfg, device=device).module
    opt = torch.optim.Adam(model.parameters(), cfg.lr, eps=1e-5, fused=True)
    rng = np.random.default_rng(0)

    def update(batch: dict[str, np.ndarray]) -> None:
        tensors = {k: torch.from_numpy(v).to(device) for k, v in batch.items()}
        n = len(batch["obs"])
        for _ in range(cfg.num_sgd_iter):
            order = torch.from_numpy(rng.permutation(n)).to(device)
            for start in range(0, n, cfg.sgd_minibatch_size):
                mb = {
                    k: v[order[start : start + cfg.sgd_minibatch_size]] for k, v in tensors.items()
                }
                logits, values, _ = model(mb["obs"])
                dist = Categorical(logits)
                ratio = (dist.log_prob(mb["actions"]) - mb["action_logp"]).exp()
                adv = mb["advantages"]
                clipped = ratio.clamp(1 - cfg.clip_param, 1 + cfg.clip_param)
                surrogate = -torch.min(ratio * adv, clipped * adv).mean()
                vf_loss = 0.5 * (values - mb["value_targets"]).pow(2).mean()
                opt.zero_grad(set_to_none=True)
                (surrogate + cfg.vf_loss_coeff * vf_loss).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                opt.step()

    return update


def ppo(device: str = "cpu") -> Steps:
    """A train batch of PPO's defaults on CartPole (its epochs of minibatches)."""
    from flowrl.algorithms.ppo import PPOConfig, PPOLearner, PPOPolicy
    from flowrl.core.sample_batch import SampleBatch

    cfg = PPOConfig(device=device)
    batch = ppo_batch(cfg.train_batch_size, np.random.default_rng(0))
    learner = PPOLearner(PPOPolicy(OBS_SPACE, ACTION_SPACE, cfg, device=device), cfg)
    per_call = cfg.num_sgd_iter * -(-cfg.train_batch_size // cfg.sgd_minibatch_size)

    def flowrl_step() -> int:
        learner.learn_on_batch(
            SampleBatch(batch), num_sgd_iter=cfg.num_sgd_iter, minibatch_size=cfg.sgd_minibatch_size
        )
        return per_call

    plain_update = plain_ppo(cfg, device)

    def plain_step() -> int:
        plain_update(batch)
        return per_call

    epochs = f"{cfg.num_sgd_iter} epochs x {cfg.sgd_minibatch_size}"
    return f"PPO ({cfg.train_batch_size} rows, {epochs})", flowrl_step, plain_step


def dqn_batch(n: int, obs_space: gym.Space, action_space: gym.Space, gamma: float) -> dict:
    """``n`` replayed rows of random transitions in ``obs_space``."""
    rng = np.random.default_rng(0)
    return {
        "obs": np.asarray([obs_space.sample() for _ in range(n)]),
        "next_obs": np.asarray([obs_space.sample() for _ in range(n)]),
        "actions": rng.integers(0, action_space.n, n),
        "rewards": np.ones(n, np.float32),
        "terminateds": np.zeros(n, bool),
        "discounts": np.full(n, gamma, np.float32),
    }


def plain_dqn(
    cfg: Any, obs_space: gym.Space, action_space: gym.Space, device: str = "cpu"
) -> Callable[[dict[str, np.ndarray]], None]:
    """DQN's update as a plain torch loop (double Q, dueling, Huber, clipped) on ``cfg``'s
    Q-network for the spaces: the learner's work without flowrl (``scaling.py`` runs Ape-X's
    beside plain sampling processes too)."""
    from flowrl.algorithms.dqn import DQNLearner, DQNPolicy

    learner = DQNLearner(DQNPolicy(obs_space, action_space, cfg, device=device), cfg)
    model, target = learner.module, learner.target
    opt = torch.optim.Adam(model.parameters(), cfg.lr, eps=1e-5, fused=True)

    def update(batch: dict[str, np.ndarray]) -> None:
        t = {k: torch.from_numpy(v).to(device) for k, v in batch.items()}
        q = model(t["obs"]).dist_inputs.gather(1, t["actions"][:, None]).squeeze(1)
        with torch.no_grad():
            best = model(t["next_obs"]).dist_inputs.argmax(1, keepdim=True)
            next_q = target(t["next_obs"]).dist_inputs.gather(1, best).squeeze(1)
            y = t["rewards"] + t["discounts"] * (1.0 - t["terminateds"].float()) * next_q
        loss = F.smooth_l1_loss(q, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()

    return update


def dqn(device: str = "cpu", *, atari: bool = False) -> Steps:
    """DQN's update (double Q, dueling, Huber, clipped): its CartPole MLP on 64 rows, or
    with ``atari`` its Nature CNN on 32 rows of stacked frames, copied to ``device``
    each update as a sampled replay batch is."""
    from flowrl.algorithms.dqn import DQNConfig, DQNLearner, DQNPolicy
    from flowrl.core.sample_batch import SampleBatch

    obs_space, action_space = (
        (FRAMES, gym.spaces.Discrete(4)) if atari else (OBS_SPACE, ACTION_SPACE)
    )
    cfg = DQNConfig(device=device, **({"train_batch_size": 32, "n_step": 1} if atari else {}))
    n = cfg.train_batch_size
    batch = dqn_batch(n, obs_space, action_space, cfg.gamma**cfg.n_step)
    learner = DQNLearner(DQNPolicy(obs_space, action_space, cfg, device=device), cfg)

    def flowrl_step() -> int:
        learner.learn_on_batch(SampleBatch(batch))
        return 1

    plain_update = plain_dqn(cfg, obs_space, action_space, device)

    def plain_step() -> int:
        plain_update(batch)
        return 1

    net = "Nature CNN" if atari else "MLP"
    return f"DQN ({n} rows, {net}, double + dueling)", flowrl_step, plain_step


def compare(steps: Steps, seconds: float, rounds: int) -> list[dict]:
    name, flowrl_step, plain_step = steps
    # short windows taken in turn, so the machine's drifting load hits both alike; each
    # step function returns the SGD updates it made
    rates, per_round = interleaved(
        {
            "plain torch loop": lambda s: steady(plain_step, s),
            "flowrl": lambda s: steady(flowrl_step, s),
        },
        rounds,
        seconds / rounds,
    )
    plain, ours = rates["plain torch loop"], rates["flowrl"]
    return [
        {"learner": name, "contender": c, "updates_per_s": rate, "x plain": rate / plain,
         "x plain p10-p90": ratio_spread(per_round, c, "plain torch loop")}
        for c, rate in (("plain torch loop", plain), ("flowrl", ours))
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="per contender")
    parser.add_argument("--rounds", type=int, default=12, help="windows per contender")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda for a GPU")
    parser.add_argument("--atari", action="store_true", help="and DQN's Nature CNN")
    args = parser.parse_args()
    torch.manual_seed(0)
    device = args.device
    measured = [ppo(device), dqn(device)] + ([dqn(device, atari=True)] if args.atari else [])
    rows = [row for steps in measured for row in compare(steps, args.seconds, args.rounds)]
    print(f"SGD updates per second on {device}, torch threads: {torch.get_num_threads()}")
    print_table(rows)
    name = "learner" if device == "cpu" and not args.atari else f"learner_{device}"
    write_results(name, {"device": device, "results": rows})


if __name__ == "__main__":
    main()

"""Sampling throughput: env steps per second of flowrl's ParallelRollouts (bulk_sync and
async) with N workers x M envs and PPO's default network, against

- the limit: N plain processes, each stepping the same gymnasium vector env with the same
  torch network (one batched forward pass per step) and nothing else;
- RLlib's EnvRunners sampling the same env, when ``ray[rllib]`` is installed (PPO's module;
  on Atari with RLlib's own Atari wrappers and the same Nature CNN trunk).

Every request asks for the same work: flowrl's fragments hold as many steps per env as
RLlib PPO's ``"auto"`` fragment for the same runners and envs (its 4,000-step train batch
divided over all envs), so both pay one round trip per as many steps. ``bulk_sync`` is
also measured with PPO's own 128-step fragments (one train batch per round with 2 x 8).

On CartPole-v1, a row samples the same numpy vector env made by a creator of yours
(``toy_envs:cartpole_vector``, taking ``num_envs``), stepped as it is.

An LSTM row samples with PPO's ``use_lstm`` network (the MLP's features into a 128-cell
LSTM) and 128-step fragments, beside the MLP's row with the same fragments and beside the
LSTM's own limit: the plain processes stepping that network in numpy, state and all.

Every contender is started once, then they take turns in short windows (``--rounds`` of
``--seconds`` each, in a rotating order), so a slow minute of this shared machine costs
them all alike. A contender's figure is its steps over its time, summed over its windows.

    python benchmarks/sampling.py                    # CartPole-v1, 1 and 2 workers x 8 envs
    python benchmarks/sampling.py --env ALE/Pong-v5 --envs 4

Writes benchmarks/results/sampling_<env>.json and a PNG of throughput against workers.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Iterator

import numpy as np

from common import (
    RESULTS,
    interleaved,
    print_table,
    ratio_spread,
    rllib_available,
    rllib_environment,
    start_ray,
    steady,
    write_results,
)

# RLlib PPO's default train_batch_size_per_learner; its "auto" rollout_fragment_length
# spreads it over every env of every runner
RLLIB_PPO_TRAIN_BATCH = 4000


def rllib_fragment(workers: int, envs: int) -> int:
    """Steps per env in one RLlib EnvRunner ``sample()`` call with PPO's defaults."""
    return math.ceil(RLLIB_PPO_TRAIN_BATCH / (workers * envs))


def policy_for(env):
    """PPO's default network for the env's spaces (the same for every contender)."""
    from flowrl.algorithms.ppo import PPOConfig
    from flowrl.learning.models import ActorCritic

    hiddens = PPOConfig.model_hiddens
    return ActorCritic(env.single_observation_space, env.single_action_space, hiddens=hiddens)


class TorchNetwork:
    """PPO's default network in torch, one batched forward pass per step."""

    state = None

    def __init__(self, env) -> None:
        from flowrl.learning.distributions import distribution_for

        self.model = policy_for(env)
        self.dist_cls, _ = distribution_for(env.single_action_space)

    def act(self, obs: np.ndarray, record: dict | None, t: int) -> np.ndarray:
        """The actions drawn; into ``record`` at ``t``, what a fragment keeps of the step."""
        import torch

        with torch.inference_mode():
            out = self.model(torch.from_numpy(obs))
            dist = self.dist_cls(out.dist_inputs)
            sampled = dist.sample()
            if record is not None:
                record["logp"][t] = dist.log_prob(sampled).numpy()
                record["values"][t] = out.value.numpy()
        return sampled.numpy()


class NumpyNetwork:
    """PPO's network stepped in numpy (``NumpyActing``, the fastest step flowrl has for
    it, as its rollout workers without torch act): the MLP, or with ``state_every`` the
    ``use_lstm`` network, its state carried per env and zeroed when an episode ends; a
    fragment then also keeps the state its steps started from: every step's, as flowrl's
    fragments do, or every ``state_every``-th step's (a sequence's first, all a learner
    reads)."""

    def __init__(self, env, seed: int, state_every: int = 0) -> None:
        from flowrl.algorithms.ppo import PPOConfig, PPOPolicy
        from flowrl.learning.numpy_acting import NumpyActing

        spaces = env.single_observation_space, env.single_action_space
        config = PPOConfig(use_lstm=bool(state_every))
        self.acting = NumpyActing.of(PPOPolicy(*spaces, config, worker_index=seed + 1))
        self.state = None
        if state_every:
            self.state = np.zeros((env.num_envs, 2, self.acting.plan.cell_size), np.float32)
        self.state_every = state_every

    def act(self, obs: np.ndarray, record: dict | None, t: int) -> np.ndarray:
        from flowrl.learning.numpy_acting import logp

        actions, dist_inputs, values, state = self.acting.act(obs, explore=True, state=self.state)
        if record is not None:
            if self.state is not None and t % self.state_every == 0:
                record["state_in"][t // self.state_every] = self.state
            record["logp"][t] = logp(True, dist_inputs, actions)
            record["values"][t] = values
        self.state = state
        return actions


def _plain_child(
    conn,
    env_id: str,
    num_envs: int,
    seed: int,
    env_config: dict,
    lstm_state_every: int = 0,
    numpy_mlp: bool = False,
) -> None:
    """One plain process: on each request, step the vector env for that many seconds with
    one batched forward pass per step (``TorchNetwork``; with ``lstm_state_every``, the
    LSTM in ``NumpyNetwork`` keeping every such step's state; with ``numpy_mlp``, the MLP
    in ``NumpyNetwork``) and answer with its env steps per second, or with a fragment of
    that many steps.

    Counted like every contender: transitions, not the reset steps of NEXT_STEP autoreset
    (on a random CartPole policy about one step in 20)."""
    import torch

    from flowrl.rollout.envs import make_vector_env

    torch.set_num_threads(1)
    # one thread, as a rollout worker's Atari env with its one reserved CPU
    env = make_vector_env(
        env_id, num_envs=num_envs, seed=seed, num_threads=1, env_config=env_config
    )
    every = lstm_state_every
    numpy = every or numpy_mlp
    network = NumpyNetwork(env, seed, every) if numpy else TorchNetwork(env)
    obs, _ = env.reset(seed=seed)
    resetting = np.zeros(num_envs, bool)

    def step(record: dict | None = None, t: int = 0) -> int:
        nonlocal obs, resetting
        if record is not None:
            record["obs"][t] = obs
        actions = network.act(obs, record, t)
        obs, rewards, terminated, truncated, _ = env.step(actions)
        if record is not None:
            record["actions"][t], record["rewards"][t] = actions, rewards
            record["dones"][t] = terminated | truncated
        transitions = num_envs - int(resetting.sum())
        resetting = terminated | truncated
        if network.state is not None:
            network.state[resetting] = 0.0
        return transitions

    def fragment(length: int) -> tuple[int, dict]:
        """``length`` steps of every env into fresh arrays, as a rollout worker answers."""
        record = {"obs": np.empty((length, *obs.shape), obs.dtype),
                  "actions": np.empty((length, num_envs), np.int64),
                  **{k: np.empty((length, num_envs), np.float32)
                     for k in ("logp", "values", "rewards")},
                  "dones": np.empty((length, num_envs), bool)}  # fmt: skip
        if network.state is not None:
            kept = -(-length // network.state_every)
            record["state_in"] = np.empty((kept, *network.state.shape), np.float32)
        return sum(step(record, t) for t in range(length)), record

    for _ in range(10):
        step()
    conn.send("ready")
    try:
        while (request := conn.recv()) is not None:
            if isinstance(request, tuple) and request[0] == "fragment":  # a lockstep round
                conn.send(fragment(request[1]))
                continue
            # seconds: the rate over them; ("turn", seconds): the steps of a turn that long
            seconds = request[1] if isinstance(request, tuple) else request
            steps, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                steps += step()
            elapsed = time.perf_counter() - start
            conn.send(steps if isinstance(request, tuple) else steps / elapsed)
    except EOFError:  # the benchmark stopped without saying goodbye
        pass


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """Processes started inside run numpy's matrix products on one thread, as Ray's
    workers do (``OMP_NUM_THREADS=1``): several processes each spinning up a BLAS thread
    per core fight over the cores."""
    names = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    before = {name: os.environ.get(name) for name in names}
    os.environ.update(dict.fromkeys(names, "1"))
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name)
            else:
                os.environ[name] = value


class PlainProcesses:
    """The limit: ``workers`` plain processes that step at the same time when measured
    (``env_config`` to the env's creator; ``lstm_state_every``: PPO's LSTM network in
    numpy, keeping every such step's state; 0: PPO's MLP, in torch or with ``numpy_mlp``
    in numpy)."""

    def __init__(
        self,
        env_id: str,
        workers: int,
        envs: int,
        env_config: dict | None = None,
        lstm_state_every: int = 0,
        numpy_mlp: bool = False,
    ) -> None:
        ctx = mp.get_context("spawn")
        self.conns, self.procs = [], []
        for i in range(workers):
            parent, child = ctx.Pipe()
            args = (child, env_id, envs, i, env_config or {}, lstm_state_every, numpy_mlp)
            proc = ctx.Process(target=_plain_child, args=args, daemon=True)
            with one_blas_thread():
                proc.start()
            self.conns.append(parent)
            self.procs.append(proc)
        for conn in self.conns:
            assert conn.recv() == "ready"

    def measure(self, seconds: float) -> tuple[float, float]:
        start = time.perf_counter()
        for conn in self.conns:
            conn.send(seconds)
        rate = sum(conn.recv() for conn in self.conns)
        elapsed = time.perf_counter() - start
        return rate * elapsed, elapsed

    def close(self) -> None:
        for conn in self.conns:
            conn.send(None)
        for proc in self.procs:
            proc.join()


class PlainLockstep(PlainProcesses):
    """The bound of synchronous sampling without a framework: the same plain processes in
    rounds, each answering a fragment of ``fragment`` steps per env (every step's obs,
    action, log-prob, value, reward and done) over a pipe, the rounds' arrays concatenated,
    and the next round asked for when every process has answered."""

    def __init__(
        self,
        env_id: str,
        workers: int,
        envs: int,
        fragment: int,
        lstm_state_every: int = 0,
        env_config: dict | None = None,
        numpy_mlp: bool = False,
    ) -> None:
        super().__init__(
            env_id,
            workers,
            envs,
            env_config,
            lstm_state_every=lstm_state_every,
            numpy_mlp=numpy_mlp,
        )
        self.fragment = fragment

    def _round(self) -> int:
        for conn in self.conns:
            conn.send(("fragment", self.fragment))
        answers = [conn.recv() for conn in self.conns]
        batch = {k: np.concatenate([a[1][k] for a in answers], 1) for k in answers[0][1]}
        assert len(batch["obs"]) == self.fragment
        return sum(a[0] for a in answers)

    def measure(self, seconds: float) -> tuple[float, float]:
        return steady(self._round, seconds)


class PlainOnPolicy(PlainLockstep):
    """The bound of on-policy PPO without a framework: the lockstep rounds, the processes
    acting in numpy as PPO's rollout workers do, gathered as PPO's ``ConcatBatches`` does
    (up to its train batch), and PPO's update on each batch in plain torch in this process
    (``learner.py``'s loop, one torch thread as flowrl's learner takes for a network this
    small) before the next round is asked for."""

    def __init__(self, env_id: str, workers: int, envs: int, fragment: int, **kwargs) -> None:
        from flowrl.algorithms.ppo import PPOConfig

        from learner import plain_ppo, ppo_batch

        super().__init__(env_id, workers, envs, fragment, numpy_mlp=True, **kwargs)
        cfg = PPOConfig()
        self.rounds = -(-cfg.train_batch_size // (workers * envs * fragment))
        rows = self.rounds * workers * envs * fragment
        self.batch = ppo_batch(rows, np.random.default_rng(0))
        self.update = plain_ppo(cfg)

    def _train_batch(self) -> int:
        steps = sum(self._round() for _ in range(self.rounds))
        self.update(self.batch)
        return steps

    def measure(self, seconds: float) -> tuple[float, float]:
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return steady(self._train_batch, seconds)
        finally:
            torch.set_num_threads(threads)


class PlainOffPolicy(PlainProcesses):
    """The bound of Ape-X without a framework: the plain processes acting in numpy, each
    sampling in turns of ``turn_s`` and asked for its next turn as soon as it answers,
    while this process makes Ape-X's update (``learner.plain_dqn`` on its batch of 128
    rows, one torch thread) as often as Ape-X's two gates allow: no more rows trained than
    ``training_intensity`` per env step sampled, and no turn asked for while sampling is
    ``max_sampling_lead`` env steps ahead of that. No replay, priorities or weights travel:
    only the sampling and the SGD share the cores."""

    def __init__(self, env_id: str, workers: int, envs: int, turn_s: float = 0.2, **kwargs):
        from flowrl.algorithms.apex import ApexConfig

        from learner import ACTION_SPACE, OBS_SPACE, dqn_batch, plain_dqn

        super().__init__(env_id, workers, envs, numpy_mlp=True, **kwargs)
        self.cfg, self.turn_s = ApexConfig(), turn_s
        spaces = OBS_SPACE, ACTION_SPACE  # CartPole's, as SleepyVectorEnv's
        self.batch = dqn_batch(self.cfg.train_batch_size, *spaces, self.cfg.gamma)
        self.update = plain_dqn(self.cfg, *spaces)

    def measure(self, seconds: float) -> tuple[float, float]:
        from multiprocessing.connection import wait

        import torch

        cfg, rows = self.cfg, self.cfg.train_batch_size
        sampled = trained = 0
        waiting = set(self.conns)  # between turns
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        start = time.perf_counter()
        try:
            while time.perf_counter() - start < seconds or len(waiting) < len(self.conns):
                lead = sampled - trained / cfg.training_intensity
                if time.perf_counter() - start < seconds and lead < cfg.max_sampling_lead:
                    for conn in waiting:
                        conn.send(("turn", self.turn_s))
                    waiting.clear()
                sampling = [c for c in self.conns if c not in waiting]
                for conn in wait(sampling, timeout=0):
                    sampled += conn.recv()
                    waiting.add(conn)
                if trained + rows <= cfg.training_intensity * sampled:
                    self.update(self.batch)
                    trained += rows
                elif sampling:
                    wait(sampling, timeout=0.005)
        finally:
            torch.set_num_threads(threads)
        return sampled, time.perf_counter() - start


class FlowrlRollouts:
    """``ParallelRollouts(mode, num_async)`` over a WorkerSet with PPO's defaults.

    ``async`` builds its source afresh for each window and closes it after (requests still
    in flight finish then, outside every window, and are not counted). ``bulk_sync`` has
    nothing in flight between rounds and keeps one source, as a plan does: its round
    batches reuse their memory from one round to the next."""

    def __init__(
        self,
        env_id: str,
        workers: int,
        envs: int,
        mode: str,
        num_async: int,
        fragment: int,
        use_lstm: bool = False,
        channels: bool = True,
    ) -> None:
        from flowrl.algorithms.ppo import PPOConfig, PPOPolicy
        from flowrl.ops import ParallelRollouts
        from flowrl.rollout.worker import WorkerSet

        config = PPOConfig(env=env_id, num_workers=workers, num_envs_per_worker=envs,
                           rollout_fragment_length=fragment, use_lstm=use_lstm,
                           request_channels=channels)  # fmt: skip
        self.workers = WorkerSet(policy_cls=PPOPolicy, config=config)
        self.mode, self.num_async = mode, num_async
        self.rounds = ParallelRollouts(self.workers, mode=mode) if mode == "bulk_sync" else None
        self.measure(0.0)  # actors started, first fragments done

    def measure(self, seconds: float) -> tuple[float, float]:
        from flowrl.ops import ParallelRollouts

        if self.rounds is not None:
            return steady(lambda: len(next(self.rounds)), seconds)
        rollouts = ParallelRollouts(self.workers, mode=self.mode, num_async=self.num_async)
        try:
            # one item per request in flight
            warmup = len(self.workers.remote_workers) * self.num_async
            return steady(lambda: len(next(rollouts)), seconds, warmup=warmup)
        finally:
            rollouts.close()

    def close(self) -> None:
        if self.rounds is not None:
            self.rounds.close()
        self.workers.stop()


class RLlibRollouts:
    """RLlib's EnvRunnerGroup with PPO's module sampling as its training step does
    (``synchronous_parallel_sample``: every runner at once, then gather)."""

    def __init__(self, env_id: str, workers: int, envs: int) -> None:
        from ray.rllib.algorithms.ppo import PPOConfig

        config = PPOConfig().learners(num_learners=0)
        config = rllib_environment(config, env_id)
        config = config.env_runners(num_env_runners=workers, num_envs_per_env_runner=envs)
        self.algo = config.build_algo()
        self.fragment = self.algo.config.get_rollout_fragment_length()  # steps per env per call
        self.group = self.algo.env_runner_group
        self._sample()

    def _sample(self) -> int:
        episodes = self.group.foreach_env_runner(lambda r: r.sample(), local_env_runner=False)
        return sum(len(e) for runner in episodes for e in runner)

    def measure(self, seconds: float) -> tuple[float, float]:
        return steady(self._sample, seconds)

    def close(self) -> None:
        self.algo.stop()


def measure_workers(args: argparse.Namespace, workers: int) -> tuple[int, list[dict]]:
    from flowrl.algorithms.ppo import PPOConfig

    env, envs = args.env, args.envs
    frag = args.fragment or rllib_fragment(workers, envs)
    ppo_frag = PPOConfig.rollout_fragment_length
    makers: dict[str, Callable[[], object]] = {
        "plain processes (limit)": lambda: PlainProcesses(env, workers, envs),
        "plain processes in lockstep": lambda: PlainLockstep(env, workers, envs, frag),
        "flowrl bulk_sync": lambda: FlowrlRollouts(env, workers, envs, "bulk_sync", 1, frag),
        "flowrl async": lambda: FlowrlRollouts(env, workers, envs, "async", 2, frag),
        "flowrl async (num_async=1)": lambda: FlowrlRollouts(env, workers, envs, "async", 1, frag),
        # each request a Ray task, as before request channels (request_channels=false)
        "flowrl bulk_sync, Ray tasks": lambda: FlowrlRollouts(
            env, workers, envs, "bulk_sync", 1, frag, channels=False
        ),
        "flowrl async, Ray tasks": lambda: FlowrlRollouts(
            env, workers, envs, "async", 2, frag, channels=False
        ),
    }
    if ppo_frag != frag:  # what PPO's plan gets with its defaults
        makers[f"plain processes in lockstep ({ppo_frag}-step fragments)"] = lambda: PlainLockstep(
            env, workers, envs, ppo_frag
        )
        makers[f"flowrl bulk_sync ({ppo_frag}-step fragments)"] = lambda: FlowrlRollouts(
            env, workers, envs, "bulk_sync", 1, ppo_frag
        )
    if env == "CartPole-v1":  # the same numpy env, made whole by a creator of yours
        makers["flowrl bulk_sync (your VectorEnv)"] = lambda: FlowrlRollouts(
            "flowrl.rollout.toy_envs:cartpole_vector", workers, envs, "bulk_sync", 1, frag
        )
    # the same plain processes stepping PPO's LSTM network: no sampler acting with it is faster
    lockstep_lstm = f"plain processes in lockstep, LSTM network in numpy ({ppo_frag}-step fragments"
    makers["plain processes, LSTM network in numpy"] = lambda: PlainProcesses(
        env, workers, envs, lstm_state_every=1
    )
    makers[f"{lockstep_lstm}, every step's state)"] = lambda: PlainLockstep(
        env, workers, envs, ppo_frag, lstm_state_every=1
    )
    seq = PPOConfig.max_seq_len  # what a learner reads: each sequence's first state
    makers[f"{lockstep_lstm}, a state per {seq}-step sequence)"] = lambda: PlainLockstep(
        env, workers, envs, ppo_frag, lstm_state_every=seq
    )
    # PPO's plan with use_lstm: the state carried per env, recorded per step, sequences cut
    makers[f"flowrl bulk_sync LSTM ({ppo_frag}-step fragments)"] = lambda: FlowrlRollouts(
        env, workers, envs, "bulk_sync", 1, ppo_frag, use_lstm=True
    )
    # IMPALA's and APPO's (async): the free-running plain processes are its bound
    makers[f"flowrl async LSTM ({ppo_frag}-step fragments)"] = lambda: FlowrlRollouts(
        env, workers, envs, "async", 2, ppo_frag, use_lstm=True
    )
    if rllib_available():
        makers["rllib"] = lambda: RLlibRollouts(env, workers, envs)
    if args.only:  # the limit, and the contenders whose names hold one of the words
        makers = {n: m for n, m in makers.items()
                  if n == "plain processes (limit)" or any(w in n for w in args.only)}  # fmt: skip
    contenders = {}
    try:
        for name, make in makers.items():
            print(f"{workers} worker(s): starting {name}")
            contenders[name] = make()
        rllib_frag = getattr(contenders.get("rllib"), "fragment", frag)
        if rllib_frag != frag:
            print(f"note: RLlib samples {rllib_frag} steps per env per call, flowrl {frag}")
        measures = {name: c.measure for name, c in contenders.items()}
        rates, per_round = interleaved(measures, args.rounds, args.seconds)
    finally:
        for c in contenders.values():
            c.close()
    limit_name = "plain processes (limit)"
    limit, rllib = rates[limit_name], rates.get("rllib")
    return frag, [
        {"contender": name, "workers": workers, "envs_per_worker": envs,
         "env_steps_per_s": rate, "x limit": rate / limit,
         "x limit p10-p90": ratio_spread(per_round, name, limit_name),
         "x rllib": rate / rllib if rllib else None,
         "windows_env_steps_per_s": [r[name] for r in per_round]}
        for name, rate in rates.items()
    ]  # fmt: skip


def plot(rows: list[dict], path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for contender in dict.fromkeys(r["contender"] for r in rows):
        pts = [(r["workers"], r["env_steps_per_s"]) for r in rows if r["contender"] == contender]
        ax.plot(*zip(*pts, strict=True), marker="o", label=contender)
    ax.set(xlabel="workers", ylabel="env steps / s", title=title)
    ax.set_xticks(sorted({r["workers"] for r in rows}))
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--envs", type=int, default=8, help="envs per worker")
    parser.add_argument("--fragment", type=int, default=None,
                        help="flowrl's steps per env per fragment (default: RLlib's)")  # fmt: skip
    parser.add_argument("--only", nargs="+", metavar="WORD",
                        help="only the contenders whose names hold one of the words")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=5, help="windows per contender")
    parser.add_argument("--seconds", type=float, default=2.0, help="length of one window")
    args = parser.parse_args()

    import ray

    start_ray(8 * max(args.workers) + 4)  # every contender's actors (RLlib asks for a learner too)
    fragments, rows = {}, []
    for w in args.workers:
        fragments[w], measured = measure_workers(args, w)
        rows += measured
    ray.shutdown()
    print(f"{args.env}: env steps/s, {args.envs} envs per worker, fragments of "
          + ", ".join(f"{f} steps per env ({w} workers)" for w, f in fragments.items())
          + f", {args.rounds} x {args.seconds:g} s windows per contender")  # fmt: skip
    print_table([{k: v for k, v in r.items() if k != "windows_env_steps_per_s"} for r in rows])
    name = "sampling_" + args.env.replace("/", "_").replace("-", "_").lower()
    if args.only:  # a partial run keeps the whole run's file
        name += "_only_" + "_".join(w.replace("-", "_").lower() for w in args.only)
    write_results(name, {"env": args.env, "fragment_by_workers": fragments, "rounds": args.rounds,
                         "window_s": args.seconds, "results": rows})  # fmt: skip
    plot(rows, RESULTS / f"{name}.png", f"{args.env} sampling ({args.envs} envs/worker)")


if __name__ == "__main__":
    main()

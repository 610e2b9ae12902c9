"""Algorithm: builds the workers and the execution plan, pulls one result per ``train()``.

Examples:
    >>> import tempfile
    >>> algo = Algorithm("ppo", env="CartPole-v1", num_workers=0)
    >>> result = algo.train()
    >>> path = algo.save(tempfile.mkdtemp())
    >>> algo.evaluate(episodes=5)["episodes"]
    5
    >>> Algorithm.from_checkpoint(path).iteration
    1
    >>> algo.stop()
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from flowrl.core.callbacks import load_callbacks, run_hook
from flowrl.core.config import ArgumentTypeError, Config, ConfigError, fixed, no_attribute
from flowrl.core.context import ITERATION, STEPS_SAMPLED, Result
from flowrl.core.iter import LocalIterator, NotReady
from flowrl.core.schedules import is_schedule, scheduled
from flowrl.diagnostics.autotune import Layout, choose_layout, cluster_cpus, is_auto, ray_running
from flowrl.diagnostics.graph import PlanGraph, plan_graph
from flowrl.diagnostics.profiler import Profile, Profiler
from flowrl.learning.models import large_images
from flowrl.learning.registry import resolve_model
from flowrl.rollout.envs import (
    check_env_id,
    check_spaces,
    check_video_dir,
    check_video_extra,
    env_name,
    make_vector_env,
)
from flowrl.rollout.minari_datasets import recorded_env
from flowrl.rollout.multi_agent import Lanes, agent_env_maker, policy_mapping
from flowrl.rollout.worker import EVALUATION_SEED, WorkerSet, one_torch_thread
from flowrl.run.evaluation import Evaluation, EvaluationBar, episode_stats
from flowrl.run.presets import preset_for
from flowrl.run.ray_start import init_ray
from flowrl.run.runner import StopCriteria, describe_error, run
from flowrl.run.saving import Checkpointing
from flowrl.run.spec import (
    AlgorithmSpec,
    Plan,
    check_keys,
    check_plan_trains_its_policies,
    get_algorithm,
    policy_specs,
)

logger = logging.getLogger(__name__)
#: the warnings said in this process (``_say_if_images_are_large``)
_SAID: set[str] = set()

#: methods of Stable-Baselines3's models and RLlib's algorithms, and flowrl's way to do
#: what each does (an Algorithm's missing attribute names it)
OTHER_METHODS = {
    "learn": "algo.run(stop={'timesteps': N})",
    "predict": "flowrl.load_policy(algo).compute_action(obs)",
    "compute_single_action": "flowrl.load_policy(algo).compute_action(obs)",
    "get_policy": "flowrl.load_policy(algo)",
    "get_env": "flowrl.load_policy(algo).make_env()",
    "get_weights": "algo.workers.local_worker.get_weights()",
    "set_weights": "algo.workers.local_worker.set_weights(weights)",
    "save_checkpoint": "algo.save(path)",
    "restore_from_path": "algo.restore(path)",
    "load": "Algorithm.from_checkpoint(path)",
    "cleanup": "algo.stop()",
    "close": "algo.stop()",
}


def check_env(spec: AlgorithmSpec, config: Config) -> None:
    """Build one env of ``config`` and check its spaces against ``spec``'s policy (each
    policy's, for a multi-agent env): a bad env or space is a ConfigError here, before Ray
    or a worker starts. A model that no name finds is one too."""
    check_model(config)
    make_agent_env = agent_env_maker(config.env, config.env_config)
    if make_agent_env is not None:
        specs = policy_specs(spec, config)
        for own in specs.values():
            check_model(own.config)
        policy_of = policy_mapping(config.policy_mapping, list(config.policies))
        lanes = Lanes(make_agent_env, num_envs=2, policy_of=policy_of)  # 2: self_play's seats
        lanes.close()
        for pid, space in lanes.action_spaces.items():
            check_spaces(f"{config.env} (policy {pid})", lanes.observation_spaces[pid], space)
            own = specs.get(pid)
            policy_cls = own.policy_cls if own else spec.classes(config)[0]
            policy_cls.check_action_space(space, own.config if own else config)
        return
    env = make_vector_env(config.env, num_envs=1, seed=0, env_config=config.env_config)
    env.close()
    spec.classes(config)[0].check_action_space(env.single_action_space, config)


def check_model(config: Config) -> None:
    """The class ``config.model`` names, found now: a ConfigError when none is."""
    if config.model:
        resolve_model(config.model)


def ensure_ray(address: str | None, **init_kwargs: Any) -> None:
    """Start Ray with this machine's CPUs unless it is already running, or join the
    cluster at ``address`` (by default the ``RAY_ADDRESS`` environment variable's, as
    ``ray.init`` reads it); ``init_kwargs`` go to ``ray.init`` (``log_to_driver``)."""
    import ray

    address = address or os.environ.get("RAY_ADDRESS")
    if address:  # even with Ray up in this process: an address that is wrong says so
        check_reachable(address)
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, logging_level="ERROR", **init_kwargs)
    else:
        init_ray(num_cpus=os.cpu_count() or 1, include_dashboard=False, logging_level="ERROR",
                 **init_kwargs)  # fmt: skip


def check_worker_cpus(config: Config, address: str | None = None) -> None:
    """A ConfigError when the rollout workers reserve more CPUs than the Ray cluster has,
    or, before a local Ray starts, this machine: Ray would never place them, and would
    start worker processes while it waited. A cluster not joined yet is not checked.
    Sharing CPUs on purpose is a fractional ``num_cpus_per_worker``.

    Examples:
        >>> check_worker_cpus(Config(num_workers=10_000))
        Traceback (most recent call last):
        ...
        flowrl.core.config.ConfigError: 10000 rollout workers reserve 10000 CPUs ...
    """
    per_worker = config.num_cpus_per_worker
    need = config.num_workers * per_worker
    ray_up = ray_running()
    if not ray_up and (address or os.environ.get("RAY_ADDRESS")):
        return
    cpus = cluster_cpus()
    if need <= cpus:
        return
    where = "the Ray cluster" if ray_up else "this machine"
    raise ConfigError(
        f"{config.num_workers} rollout workers reserve {need:g} CPUs (num_cpus_per_worker="
        f"{per_worker:g} each), but {where} has {cpus}: use at most {int(cpus // per_worker)} "
        f"workers, or set num_cpus_per_worker={cpus / config.num_workers:.3g} to share its "
        "CPUs on purpose"
    )


def check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """A ConfigError unless something listens at a ``host:port`` cluster address (Ray
    itself retries an unreachable address for many minutes); ``auto`` and ``ray://``
    addresses are left to Ray.

    Examples:
        >>> check_reachable("127.0.0.1:1")
        Traceback (most recent call last):
        ...
        flowrl.core.config.ConfigError: cannot reach a Ray cluster at 127.0.0.1:1: ...
    """
    import socket

    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s).close()
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise ConfigError(f"cannot reach a Ray cluster at {address}: {reason}") from None


def build_config(spec: AlgorithmSpec, config: Config | Mapping[str, Any] | None, **overrides):
    """The config of ``spec`` from a Config or a mapping, with ``overrides`` applied; an env
    given as a class or function becomes its name (see ``flowrl.rollout.envs.env_name``). A
    mapping's values go over the algorithm's preset for the env (``flowrl.run.presets``)
    unless they say ``preset=False``; a Config is taken as it is. An offline algorithm's
    env is by default its recording's (``input``)."""
    if not isinstance(config, Config | Mapping | None):  # Stable-Baselines3's PPO(policy, env)
        raise ArgumentTypeError(
            f"the second argument is the config (a Config or a dict), got {config!r}: "
            f"an env goes by name, Algorithm({spec.name!r}, env=...)"
        )
    if isinstance(config, Mapping) and "env" in config:
        config = {**config, "env": env_name(config["env"])}
    if "env" in overrides:
        overrides["env"] = env_name(overrides["env"])
    if isinstance(config, Config):
        return config.replace(**overrides) if overrides else config
    values = {**(config or {}), **overrides}
    if spec.offline and values.get("input") and "env" not in values:  # the recording's
        values["env"] = recorded_env(values["input"])
    check_keys(spec, values)
    return spec.config_cls.from_dict({**preset_values(spec, values), **values})


def preset_values(spec: AlgorithmSpec, values: Mapping[str, Any]) -> dict[str, Any]:
    """The preset's values that ``spec``'s config has, for the env ``values`` name (or
    the config's default env); none when ``values`` turn presets off."""
    if not values.get("preset", True):
        return {}
    env = values.get("env", spec.config_cls.__dataclass_fields__["env"].default)
    preset = preset_for(spec, env) if isinstance(env, str) else None
    if preset is None:
        return {}
    fields = spec.config_cls.__dataclass_fields__
    return {k: v for k, v in preset.values.items() if k in fields}


def check_and_start_ray(
    spec: AlgorithmSpec, config: Config, address: str | None, *, own_plan: bool = True
) -> None:
    """What a config must pass before anything starts, one line each (its env id, its
    policies' algorithms when the algorithm's ``own_plan`` trains them, its video settings,
    an address for a run that has no workers, the env and the CPUs before Ray starts), then
    Ray started or joined when the config uses it."""
    check_env_id(config.env)
    if own_plan:
        check_plan_trains_its_policies(spec, config)
    if config.evaluation_video_dir:  # before training, not at the first evaluation
        check_video_extra(config.env)
        check_video_dir(config.evaluation_video_dir)
    if address and not config.uses_ray:
        raise ConfigError(
            f"address={address} joins a Ray cluster, but this config runs in-process "
            "(num_workers=0): set num_workers > 0 or drop the address"
        )
    if config.uses_ray:
        check_env(spec, config)  # before Ray starts
        check_worker_cpus(config, address)  # before a local Ray starts
        ensure_ray(address)
        check_worker_cpus(config, address)  # a cluster, once joined


def auto_algorithm(
    cls: type[Algorithm],
    algo: str | AlgorithmSpec,
    config: Config | Mapping[str, Any] | None,
    *,
    plan: Plan | None,
    address: str | None,
    stop: StopCriteria | None,
    **overrides: Any,
) -> Algorithm:
    """``Algorithm.auto``: the layout ``choose_layout`` measures fastest, built (or the
    measuring run itself, when it is the choice)."""
    spec = get_algorithm(algo) if isinstance(algo, str) else algo
    values = {**(config.to_dict() if isinstance(config, Config) else config or {})}
    values.update(overrides)
    values.pop("num_workers", None)
    if address:
        ensure_ray(address)
    config = build_config(spec, values)
    criteria = stop.for_config(config) if stop is not None else None
    layout, run, results = choose_layout(
        spec,
        config,
        algorithm_cls=cls,
        plan=plan,
        envs=(values["num_envs_per_worker"],) if "num_envs_per_worker" in values else None,
        min_workers=max(1 if address else 0, spec.config_cls.auto_min_workers),
        until=criteria.reason if criteria is not None else None,
        step_budget=criteria.timesteps if criteria is not None else None,
    )
    if run is None:
        run = cls(spec, {**values, **layout.overrides()}, plan=plan, address=address)
    run.layout, run.unreported = layout, results
    return run


#: a network whose weights have at most this many entries each (torch's grain size: it
#: splits an op among threads only past it) trains no faster on more threads: its ops are
#: too small to pay for the split, and idle threads spin between them (docs/performance.md,
#: learner's threads)
SMALL_WEIGHT = 32_768


def _say_if_images_are_large(policies: Mapping[str, Any]) -> None:
    """Warn, once per process and line, where a policy's images make its CNN many times an
    84x84 frame's (``large_images``)."""
    for pid, policy in policies.items():
        module = getattr(policy, "module", None)
        for line in large_images(module) if isinstance(module, torch.nn.Module) else []:
            line = line if len(policies) == 1 else f"policy {pid}'s {line}"
            if line not in _SAID:
                _SAID.add(line)
                logger.warning(
                    "%s: sampling and learning slow down with them; downsample the frames in "
                    'an env creator of your own (docs/environments.md, "Large images")',
                    line,
                )


def _learner_threads(config: Config, policies: Mapping[str, Any], torchs: int) -> int:
    """The torch threads of the learner's process while the run lasts: the config's
    ``learner_threads``, or where that is 0, one when no weight of the policies' modules
    has more than ``SMALL_WEIGHT`` entries (the CPU the others would spin away goes to the
    rollout workers, the envs or a second plan), else ``torchs`` (the process's own)."""
    if config.learner_threads:
        return config.learner_threads
    modules = [
        m for p in policies.values() if isinstance(m := getattr(p, "module", None), torch.nn.Module)
    ]
    weights = (size for m in modules for size in _weight_sizes(m))
    return 1 if modules and max(weights, default=0) <= SMALL_WEIGHT else torchs


def _weight_sizes(module: torch.nn.Module) -> Iterator[int]:
    """The entries of each weight of ``module``, a recurrent cell's counted per gate: the
    cell steps its sequences one time step at a time, a row per sequence instead of per
    minibatch row, so only a large cell gains from a second thread."""
    recurrent = (torch.nn.RNNCellBase, torch.nn.RNNBase)
    for m in module.modules():
        for w in m.parameters(recurse=False):
            gates = w.shape[0] // m.hidden_size if isinstance(m, recurrent) else 1
            yield w.numel() // max(gates, 1)


class Algorithm(Checkpointing):
    """An algorithm ready to train: its config, workers and execution plan.

    ``algo`` is a name (``"ppo"``), a ``"file.py:plan"`` reference or an AlgorithmSpec;
    ``plan`` replaces the algorithm's execution plan with your own function
    ``plan(workers, config) -> LocalIterator[result dict]``.

    Examples:
        >>> algo = Algorithm("ppo", env="CartPole-v1", num_workers=0, seed=1)
        >>> algo.train()["env_steps_sampled"] > 0
        True
        >>> algo.stop()
    """

    def __init__(
        self,
        algo: str | AlgorithmSpec,
        config: Config | Mapping[str, Any] | None = None,
        *,
        plan: Plan | None = None,
        address: str | None = None,
        **overrides: Any,
    ) -> None:
        self.spec = get_algorithm(algo) if isinstance(algo, str) else algo
        if is_auto(overrides) or (isinstance(config, Mapping) and is_auto(config)):
            raise ConfigError(
                'num_workers="auto" measures layouts by running the plan for a few seconds: '
                "build with Algorithm.auto(...) (flowrl train does when no layout is set)"
            )
        #: the layout ``auto`` chose, and why (None: the config's own)
        self.layout: Layout | None = None
        self.config = fixed(build_config(self.spec, config, **overrides))
        try:  # the driver's own instance: train results and checkpoints
            self.callbacks = load_callbacks(self.config.callbacks)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        check_and_start_ray(self.spec, self.config, address, own_plan=plan is None)
        torch.manual_seed(self.config.seed)
        policy_cls, learner_cls = self.spec.classes(self.config)
        with one_torch_thread():  # the weights start alike whatever threads the process has
            self.workers = WorkerSet(policy_cls=policy_cls, learner_cls=learner_cls,
                                     config=self.config, workers_learn=self.spec.workers_learn,
                                     policy_specs=policy_specs(self.spec, self.config))  # fmt: skip
        self._plan_fn = _two_argument_plan(plan or self.spec.execution_plan)
        self.plan: LocalIterator[dict[str, Any]] = self._build_plan()
        #: "interrupted" (Ctrl-C, a notebook's), "was stopped", or the error that ended the plan
        self._ended: str | None = None
        if self.config.profile:  # before the first pull builds the plan
            self.plan.context.profiler = Profiler()
        self.evaluation = Evaluation(
            self.workers,
            interval=self.config.evaluation_interval,
            episodes=self.config.evaluation_episodes,
            video_dir=self.config.evaluation_video_dir,
        )
        self.last_result: dict[str, Any] | None = None
        #: results ``train`` returned before ``run`` took over (those of
        #: ``auto``'s measuring run): ``run`` logs them first, in order
        self.unreported: list[dict[str, Any]] = []
        self._torch_threads = torch.get_num_threads()  # stop() gives them back
        policies = self.workers.local_worker.policies
        _say_if_images_are_large(policies)
        self._learner_threads = _learner_threads(self.config, policies, self._torch_threads)
        torch.set_num_threads(self._learner_threads)

    @classmethod
    def auto(
        cls,
        algo: str | AlgorithmSpec,
        config: Config | Mapping[str, Any] | None = None,
        *,
        plan: Plan | None = None,
        address: str | None = None,
        stop: StopCriteria | None = None,
        **overrides: Any,
    ) -> Algorithm:
        """Measure the plan (``choose_layout``: a few seconds of sampling and learning
        in-process) and build the algorithm with the fastest layout of workers and envs,
        which ``layout`` reports with the reason. When the in-process run that measured
        learning is the choice, it is returned and goes on from where it got, its results
        so far in ``unreported`` (which ``run`` logs first). ``stop`` is the run's
        ``StopCriteria`` (pass the same to ``run``): the measuring run ends where a result
        meets it, and is then the run. With a cluster ``address``, Ray joins it first and
        every layout has workers; an algorithm may ask for more (Ape-X: 2).

        Examples:
            >>> algo = Algorithm.auto("ppo", env="CartPole-v1")  # doctest: +SKIP
            >>> print(algo.layout.reason)  # doctest: +SKIP
        """
        return auto_algorithm(cls, algo, config, plan=plan, address=address, stop=stop, **overrides)

    def __repr__(self) -> str:
        return f"Algorithm({self.spec.name}, env={self.config.env!r})\nplan: {self.plan}"

    def __getattr__(self, name: str) -> Any:
        raise no_attribute(self, name, OTHER_METHODS)

    @property
    def iteration(self) -> int:
        return self.plan.context.counters[ITERATION]

    def train(self) -> dict[str, Any]:
        """Run the plan until it produces its next result, and return that result. After
        an interrupt (a notebook's, say) the next call goes on with a new plan on the same
        counters, weights and kept state; the interrupted iteration's samples are lost."""
        if self._ended not in (None, "interrupted"):
            raise RuntimeError(f"this algorithm {self._ended}: build another (or from_checkpoint)")
        if self._ended == "interrupted":
            self._ended = None
            self._restart_plan()
        schedules = step_schedules(self)
        while True:
            try:
                result = next(self.plan)
            except StopIteration:
                raise RuntimeError(f"the execution plan {self.plan} ended") from None
            except KeyboardInterrupt:  # the plan's generators are closed by it
                self._ended = "interrupted"
                raise
            except Exception as e:  # and by this: a new plan (a restore, a rebuild) goes on
                self._ended = f"ended with {describe_error(e)}"
                raise
            if result is not NotReady:
                check_result(result, self._plan_fn)
                result = Result(result)
                self.last_result = result  # a run logs it even when evaluation or a hook raises
                result.update(self.evaluation.step(self.iteration))
                result.update(schedules)
                if self.callbacks is not None:
                    run_hook(self.callbacks, "on_train_result", algorithm=self, result=result)
                return result

    def profile(self, *, since_start: bool = True) -> Profile:
        """Where the plan's time went since it started (or in the last iteration): each
        operator's share of wall-clock, items/s and NotReady count, queue depths and the
        bottleneck (``print(algo.profile())``). Needs ``profile=True``.

        Examples:
            >>> algo = Algorithm("ppo", num_workers=0, profile=True)
            >>> _ = algo.train()
            >>> algo.profile().bottleneck().split(":")[0] in (
            ...     "sampling-bound", "learner-bound", "weight-sync-bound")
            True
            >>> algo.stop()
        """
        profiler = self.plan.context.profiler
        if profiler is None:
            raise ConfigError("this run is not profiled: create it with profile=True")
        if since_start or profiler.last_window is None:
            return profiler.profile()
        return profiler.last_window

    def graph(self) -> PlanGraph:
        """The plan's operator graph (``print(algo.graph())``; ``to_mermaid()``,
        ``to_dot()``, ``to_png()``; notebooks draw it).

        Examples:
            >>> algo = Algorithm("ppo", num_workers=0)
            >>> "TrainOneStep" in algo.graph().to_text()
            True
            >>> algo.stop()
        """
        return plan_graph(self.plan, title=f"{self.spec.name} on {self.config.env}")

    def _build_plan(self) -> LocalIterator[dict[str, Any]]:
        plan = self._plan_fn(self.workers, self.config)
        if not isinstance(plan, LocalIterator):
            raise ConfigError(
                f"{_plan_name(self._plan_fn)} returned {type(plan).__name__}, not a "
                f"LocalIterator of results {END_WITH_REPORTING}"
            )
        return plan

    def run(self, **kwargs: Any) -> dict[str, Any]:
        """Train until a stop criterion holds; see ``flowrl.run.runner.run`` for the options.

        Examples:
            >>> algo.run(stop=StopCriteria(reward=450), output_dir=Path("runs"))  # doctest: +SKIP
        """
        return run(self, **kwargs)

    # -- evaluation and shutdown ---------------------------------------------------------
    def evaluate(
        self,
        episodes: int = 10,
        *,
        explore: bool = False,
        video_dir: str | None = None,
        render: bool = False,
        progress: bool | None = None,
        seed: int = EVALUATION_SEED,
    ) -> dict[str, Any]:
        """Mean return and length over ``episodes`` fresh episodes of the current policy,
        each also written to ``video_dir`` as an MP4 or, with ``render``, shown in a window
        as it plays. ``progress`` draws a bar of the episodes on stderr (default: when stderr
        is a terminal). The episodes' seeds start from ``seed`` (default: every evaluation's)."""
        if episodes < 1:
            raise ConfigError(f"episodes must be >= 1, got {episodes}")
        with EvaluationBar(episodes, progress) as bar:
            return episode_stats(self.workers.local_worker.evaluate(
                episodes, explore=explore, seed=seed, video_dir=video_dir, window=render,
                after_step=bar))  # fmt: skip

    def stop(self) -> None:
        """Stop the plan (its learner thread, its requests in flight) and the workers (Ray
        itself stays up for the next algorithm)."""
        self._ended = "was stopped"
        self.plan.close()
        self.evaluation.stop()
        self.workers.stop()
        if self._learner_threads == torch.get_num_threads():  # unless changed since
            torch.set_num_threads(self._torch_threads)

    def __enter__(self) -> Algorithm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


END_WITH_REPORTING = "(end the plan with StandardMetricsReporting(...))"


def _plan_name(plan_fn: Plan) -> str:
    return getattr(plan_fn, "__name__", "the execution plan")


def _two_argument_plan(plan_fn: Plan) -> Plan:
    """``plan_fn``, where it takes ``(workers, config)``; a ConfigError naming it where it
    does not (a TypeError from deep inside the build before)."""
    try:
        inspect.signature(plan_fn).bind(None, None)
    except TypeError as e:
        raise ConfigError(f"{_plan_name(plan_fn)} must take (workers, config): {e}") from None
    except ValueError:  # no signature to read: the call will say
        pass
    return plan_fn


def check_result(result: Any, plan_fn: Plan) -> None:
    """A ConfigError, saying how to end a plan, unless ``result`` (what the plan of
    ``plan_fn`` produced) is a result dict.

    Examples:
        >>> check_result((1, 2), lambda workers, config: None)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        flowrl.core.config.ConfigError: <lambda> produced a tuple, not a result dict (end ...
    """
    if not isinstance(result, dict):
        name = _plan_name(plan_fn)
        raise ConfigError(
            f"{name} produced a {type(result).__name__}, not a result dict {END_WITH_REPORTING}"
        )


def step_schedules(algo: Algorithm) -> dict[str, float]:
    """An iteration of ``algo`` begins: every schedule reads the plan's env steps so far,
    the learner's and those of every worker's policies (DQN's epsilon, A3C's loss on
    remote workers), told without waiting; the results show the config's as
    ``schedule/<name>``."""
    steps = algo.plan.context.counters[STEPS_SAMPLED]
    algo.workers.local_worker.policies.set_env_steps_sampled(steps)
    algo.workers.local_worker.learner.set_env_steps(steps)
    algo.workers.set_env_steps_sampled(steps, plan=algo.plan.context)
    return {
        f"schedule/{f.name}": scheduled(getattr(algo.config, f.name), steps)
        for f in dataclasses.fields(algo.config)
        if f.metadata.get("schedule") and is_schedule(getattr(algo.config, f.name))
    }

"""RolloutWorker (a vector env + a copy of the policy) and WorkerSet (local + N remote).

A worker steps all its envs with one batched forward pass per step and returns
post-processed ``SampleBatch`` fragments. As a Ray actor it is also a shard of a
``ParallelIterator`` that yields one fragment per pull. A worker
holds the policy's acting module; the local worker also builds the
``Learner`` that trains it (remote workers only when a plan
asks them for gradients).

Remote workers act without torch (``NumpyPolicy``) where every policy of the local worker
acts in numpy and post-processes as ``Policy`` does, unless the WorkerSet's
``workers_learn`` (a plan that asks them for gradients, A3C's): then they hold torch and
a learner.

Examples:
    >>> from flowrl.core.config import Config
    >>> from flowrl.learning.policy import Policy
    >>> worker = RolloutWorker(policy_cls=Policy, config=Config(num_envs_per_worker=2))
    >>> len(worker.sample()) <= 2 * worker.config.rollout_fragment_length
    True
"""

from __future__ import annotations

import contextlib
import gc
import logging
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import numpy as np

from flowrl.core.callbacks import Callbacks, load_callbacks
from flowrl.core.channels import Ticket, taking_turns
from flowrl.core.config import Config, ConfigError
from flowrl.core.context import WORKER_SAMPLE_S, WORKER_WEIGHTS_S, PlanContext
from flowrl.core.errors import quoted_error
from flowrl.core.iter import (
    Carry,
    Operator,
    ParallelIteratorWorker,
    ray_call,
    send_call,
    take_result,
    tell,
    wait_for,
)
from flowrl.core.sample_batch import MultiAgentBatch
from flowrl.learning.acting import BasePolicy, Weights, worker_seed
from flowrl.learning.multi import PolicyMap, PolicySpec, PolicyStats
from flowrl.learning.numpy_policy import NumpyPolicy
from flowrl.rollout.envs import (
    EnvCreator,
    EnvError,
    check_display,
    located,
    make_shown_env,
    make_vector_env,
    register_env,
    registered_creator,
)
from flowrl.rollout.episodes import Episode, headless_rendering
from flowrl.rollout.experiences import experience_writer
from flowrl.rollout.multi_agent import (
    AgentLanes,
    EpisodeFrames,
    agent_env_maker,
    policy_mapping,
)
from flowrl.rollout.sampler import Sampler, VectorLanes
from flowrl.rollout.turns import TurnLanes

if TYPE_CHECKING:
    from flowrl.learning.learner import Learner
    from flowrl.learning.multi import Learners

logger = logging.getLogger(__name__)

T = TypeVar("T")


#: the seed evaluation's episodes start from, whatever the run's: every evaluation plays the
#: same episodes, so two runs' (or checkpoints') scores compare
EVALUATION_SEED = 12345


class RolloutWorker(ParallelIteratorWorker):
    """Samples experience from a gymnasium vector env with a local copy of the policy."""

    def __init__(
        self,
        *,
        policy_cls: type[BasePolicy],
        config: Config,
        learner_cls: type[Learner] | None = None,
        worker_index: int = 0,
        device: str = "cpu",
        env_creator: EnvCreator | None = None,
        model_cls: type | None = None,
        policy_specs: dict[str, PolicySpec] | None = None,
    ) -> None:
        super().__init__(self._fragments)
        if env_creator is not None:  # the driver's register_env, in this process too
            register_env(config.env, env_creator)
        if model_cls is not None:  # and its register_model
            from flowrl.learning.registry import register_model

            register_model(config.model, model_cls)
        self.config = config
        self.worker_index = worker_index
        self.policy_cls, self.learner_cls = policy_cls, learner_cls
        seed = worker_seed(config, worker_index)
        seed_torch(seed, worker_index)
        # a remote worker's env threads stay within the CPUs Ray reserved for it
        threads = max(1, int(config.num_cpus_per_worker)) if worker_index > 0 else 0
        # held while a learner thread changes the policy: a checkpoint reads whole updates
        self.lock = threading.Lock()
        # seconds spent sampling and loading weights, reported when profiling
        self.busy_s = {WORKER_SAMPLE_S: 0.0, WORKER_WEIGHTS_S: 0.0}
        self.policy_specs = dict(policy_specs or {})
        #: the config's Callbacks, this worker's own instance (None: no callbacks)
        self.callbacks = load_callbacks(config.callbacks)
        #: the env as lanes, and a policy for each policy id of them (``SINGLE`` alone for
        #: a single-agent env)
        self.env = make_lanes(config, config.num_envs_per_worker, seed=seed, threads=threads,
                              callbacks=self.callbacks, worker_index=worker_index)  # fmt: skip
        try:  # a policy the env's spaces do not fit: the env closed (ale-py's leaks)
            self.policies = make_policies(self.env, self.policy_spec, device, worker_index)
            writer = experience_writer(config, self.env, worker_index)
            try:  # (the first reset)
                self.sampler = Sampler(self.env, self.policies, seed=seed, where=self._where,
                                       writer=writer)  # fmt: skip
            except EnvError as e:
                raise located(e, self._where, worker_index, ", in reset(),") from e.__cause__
        except BaseException:
            self.env.close()
            raise
        if worker_index > 0:  # what a remote worker started with lives as long as it does
            freeze_start_up()

    @property
    def policy(self) -> BasePolicy:
        """The worker's one policy; with several, name one: ``policies[policy_id]``."""
        if len(self.policies) != 1:
            raise AttributeError(f"this worker has policies {list(self.policies)}: name one")
        return next(iter(self.policies.values()))

    def flush_experiences(self) -> None:
        """Write the experiences this worker still holds (``record_experiences``)."""
        if self.sampler.writer is not None:
            self.sampler.writer.close()

    def policy_spec(self, policy_id: str) -> PolicySpec:
        """Policy ``policy_id``'s classes and config: its entry of ``policy_specs``, or the
        run's own."""
        default = PolicySpec(self.policy_cls, self.learner_cls, self.config)
        return self.policy_specs.get(policy_id, default)

    @property
    def _where(self) -> str:
        return f"env {self.config.env} (worker {self.worker_index})"

    # -- sampling ------------------------------------------------------------------------
    def _fragments(self) -> Iterator[MultiAgentBatch]:
        count = fragments_per_call(self.config)  # per request, as one batch
        while True:
            batches = [self.sample() for _ in range(count)]
            yield batches[0] if count == 1 else MultiAgentBatch.concat(batches)

    def sample(self) -> MultiAgentBatch:
        """One post-processed fragment: ``rollout_fragment_length`` steps of every env, as
        each policy's part."""
        start = time.perf_counter()
        steps = self.config.rollout_fragment_length
        try:
            fragments = self.sampler.sample(steps)
        except EnvError as e:  # the env's own fault: this worker is replaced
            raise located(e, self._where, self.worker_index) from e.__cause__
        batch = self.policies.postprocess(fragments, steps * self.env.num_envs)
        if self.callbacks is not None:
            self.callbacks.on_fragment_postprocessed(batch=batch, worker_index=self.worker_index)
        self.busy_s[WORKER_SAMPLE_S] += time.perf_counter() - start
        return batch

    def get_metrics(self) -> tuple[list[Episode], dict[str, float], dict[str, np.ndarray]]:
        """Episodes completed since the last call, as ``(return, length)``, what the
        policy reports about its acting (``Policy.metrics``) with, when profiling, its
        seconds sampling and loading weights so far, and the normalisation statistics
        added since the last call (for the learner to merge)."""
        episodes = self.env.take_episodes()
        unsent = self.policies.take_unsent()
        metrics = self.policies.metrics()
        if hasattr(self.env, "illegal_moves"):  # a turn-based game's, so far
            metrics = {**metrics, "illegal_moves": sum(self.env.illegal_moves.values())}
        if self.config.profile:
            metrics = {**metrics, **self.busy_s}
        return episodes, metrics, unsent

    def report(self) -> tuple[int, list[Episode], dict[str, float], dict[str, np.ndarray]]:
        """``(worker index, *get_metrics())``: what the plan takes in (``WorkerReports``)."""
        return (self.worker_index, *self.get_metrics())

    # -- learning (used on the local worker, and by remote gradient workers) -------------
    @cached_property
    def learner(self) -> Learners:
        """The learners of this worker's trainable policies by policy id, built on first
        use: rollout workers that only sample never build them."""
        from flowrl.learning.multi import Learners

        learners = {}
        for pid, policy in self.policies.items():
            spec = self.policy_spec(pid)
            if spec.trainable and spec.learner_cls is not None:
                learners[pid] = spec.learner_cls(policy, spec.config)
        if not learners:
            raise TypeError(
                f"worker {self.worker_index} has no learner class: a plan that asks "
                "remote workers for gradients needs WorkerSet(workers_learn=True)"
            )
        return Learners(learners)

    def learn_on_batch(self, batch: MultiAgentBatch, **kwargs: Any) -> PolicyStats:
        return self.learner.learn_on_batch(batch, **kwargs)

    def compute_gradients(self, batch: MultiAgentBatch) -> tuple[dict[str, Any], PolicyStats]:
        return self.learner.compute_gradients(batch)

    def apply_gradients(self, grads: dict[str, list[np.ndarray]]) -> None:
        self.learner.apply_gradients(grads)

    def parameter_count(self) -> int:
        """How many weights this worker holds in torch modules: its policy's, and its
        learner's once built (a sampling worker holds the acting module alone)."""
        seen: dict[int, int] = {}
        policies = self.policies.values()
        learners = self.__dict__["learner"].learners.values() if "learner" in self.__dict__ else []
        torch = sys.modules.get("torch")  # (none: every policy acts in numpy)
        for owner in filter(None, [*policies, *learners]):
            for value in vars(owner).values():
                if torch is not None and isinstance(value, torch.nn.Module):
                    seen.update((id(p), p.numel()) for p in value.parameters())
        in_numpy = [p.weight_count() for p in policies if hasattr(p, "weight_count")]
        return sum(seen.values()) + sum(in_numpy)

    def get_weights(self) -> dict[str, Weights]:
        return self.policies.get_weights()

    def set_env_steps_sampled(self, steps: int) -> None:
        """The run has sampled ``steps`` env steps: the policy's acting schedule and, where
        this worker has built a learner (gradients computed here), its schedules."""
        self.policies.set_env_steps_sampled(steps)
        if "learner" in self.__dict__:  # built: cached_property keeps it in __dict__
            self.learner.set_env_steps(steps)

    def set_weights(self, weights: dict[str, Weights] | StoredWeights) -> None:
        """Load ``weights``; those a request brought as ``StoredWeights`` are fetched here,
        timed with the loading (what profiling counts as weight sync)."""
        start = time.perf_counter()
        if isinstance(weights, StoredWeights):
            import ray

            weights = ray.get(weights.ref)
        self.policies.set_weights(weights)
        self.busy_s[WORKER_WEIGHTS_S] += time.perf_counter() - start

    # -- evaluation ----------------------------------------------------------------------
    def evaluate(
        self,
        episodes: int,
        *,
        explore: bool = False,
        seed: int = EVALUATION_SEED,
        video_dir: str | None = None,
        window: bool = False,
        after_step: Callable[[list[Episode]], None] | None = None,
    ) -> list[Episode]:
        """Run exactly ``episodes`` fresh episodes (greedy actions unless ``explore``);
        with ``video_dir``, one at a time, each written there as an MP4; with ``window``,
        one at a time in a window. ``after_step`` hears of every step, with the episodes
        it ended (a progress bar's)."""
        try:
            return evaluate_policies(
                self.config, self.policies, episodes, explore=explore, seed=seed,
                video_dir=video_dir, window=window, where=self._where, after_step=after_step,
            )  # fmt: skip
        except EnvError as e:  # the env's fault, or episodes that never end: this worker's
            raise located(e, self._where, self.worker_index, ", evaluating,") from e.__cause__

    def evaluate_with(
        self, weights: dict[str, Weights], episodes: int, video_dir: str | None = None
    ) -> list[Episode]:
        """``evaluate`` with ``weights`` (an evaluation worker's one call)."""
        self.set_weights(weights)
        return self.evaluate(episodes, video_dir=video_dir)

    def ping(self) -> int:
        return self.worker_index

    def close(self) -> None:
        self.flush_experiences()
        self.env.close()


def make_policies(
    lanes: Any, spec_of: Callable[[str], PolicySpec], device: str, worker_index: int
) -> PolicyMap:
    """A policy for each policy id of ``lanes``, of the class and config ``spec_of(pid)`` gives."""
    policies = PolicyMap()
    for pid in lanes.policy_ids:
        spec = spec_of(pid)
        spaces = lanes.observation_spaces[pid], lanes.action_spaces[pid]
        policies[pid] = spec.policy_cls(
            *spaces, spec.config, device=device, worker_index=worker_index
        )
    return policies


def make_lanes(
    cfg: Config,
    copies: int,
    *,
    seed: int,
    threads: int = 0,
    video_dir: str | None = None,
    window: bool = False,
    callbacks: Callbacks | None = None,
    worker_index: int = 0,
) -> Any:
    """``cfg``'s env as lanes of ``copies`` envs: a vector env's (one policy; with
    ``video_dir``, one env recording its episodes there; with ``window``, one showing them
    in a window), or a multi-agent env's copies (a Parallel env's or a turn-based game's),
    each agent mapped to a policy; ``callbacks``' episode hooks run on them as worker
    ``worker_index``'s."""
    hooks = {"callbacks": callbacks, "worker_index": worker_index}
    render = "rgb_array" if video_dir else "human" if window else None
    if window:
        check_display(cfg.env)
    make_agent_env = agent_env_maker(cfg.env, cfg.env_config, render=render)
    if make_agent_env is not None:
        policy_of = policy_mapping(cfg.policy_mapping, list(cfg.policies))
        kind = TurnLanes if make_agent_env.turn_based else AgentLanes
        return kind(make_agent_env, num_envs=copies, policy_of=policy_of, **hooks)
    if render:  # one env: its episodes are written or shown one at a time
        env = make_shown_env(cfg.env, video_dir=video_dir, seed=seed,
                             env_config=cfg.env_config)  # fmt: skip
    else:
        env = make_vector_env(cfg.env, num_envs=copies, seed=seed, num_threads=threads,
                              env_config=cfg.env_config)  # fmt: skip
    return VectorLanes(env, **hooks)


def evaluate_policies(
    cfg: Config,
    policies: PolicyMap,
    episodes: int,
    *,
    explore: bool,
    seed: int,
    video_dir: str | None,
    where: str,
    window: bool = False,
    after_step: Callable[[list[Episode]], None] | None = None,
) -> list[Episode]:
    """Exactly ``episodes`` episodes of ``policies`` on fresh envs of ``cfg``'s env (a
    multi-agent env's copies with every policy acting as mapped); with ``video_dir``, one
    env whose episodes are written there; with ``window``, one that shows them in a window.
    ``after_step`` as ``Sampler.episodes`` has it."""
    if video_dir and window:
        raise ConfigError("episodes are written to video_dir or shown in a window: not both")
    with contextlib.ExitStack() as stack:
        if video_dir:
            stack.enter_context(headless_rendering())
        copies = 1 if video_dir or window else min(episodes, cfg.num_envs_per_worker)
        lanes = make_lanes(cfg, copies, seed=seed, video_dir=video_dir, window=window)
        stack.callback(lanes.close)  # before the rendering variables go (videos are written)
        sampler = Sampler(lanes, policies, seed=seed, where=where)  # resets the lanes
        hooks = [after_step] if after_step is not None else []
        if video_dir and not isinstance(lanes, VectorLanes):  # (a vector env records itself)
            hooks.append(EpisodeFrames(lanes.envs[0], video_dir))  # a multi-agent env's

        def step(finished: list[Episode]) -> None:
            for hook in hooks:
                hook(finished)

        return sampler.episodes(episodes, explore=explore, after_step=step if hooks else None)


def fragments_per_call(config: Config) -> int:
    """Fragments a remote worker returns per request: ``fragments_per_call``, or by default
    one per 32 workers (at least one). Each request costs the driver and the worker a Ray
    call (about a millisecond of CPU between them); past 32 workers, larger replies keep
    the calls per env step from growing with the workers.

    Examples:
        >>> fragments_per_call(Config(num_workers=64)), fragments_per_call(Config(num_workers=8))
        (2, 1)
    """
    return config.fragments_per_call or max(1, config.num_workers // 32)


def numpy_worker_args(local_worker: RolloutWorker) -> dict[str, Any] | None:
    """What a remote worker without torch is built with: each policy of ``local_worker``
    as its ``NumpyPolicy`` and every config portable; None where a policy needs torch."""
    specs = {}
    for pid, policy in local_worker.policies.items():
        if (make := NumpyPolicy.remote_of(policy)) is None:
            return None
        spec = local_worker.policy_spec(pid)
        specs[pid] = PolicySpec(make, None, spec.config.portable(), spec.trainable)
    first = next(iter(specs.values())).policy_cls
    return dict(policy_cls=first, config=local_worker.config.portable(), policy_specs=specs)


def follows_env_steps(worker: RolloutWorker) -> bool:
    """Whether a policy of ``worker`` acts on the run's env steps (``set_env_steps_sampled``:
    DQN's epsilon, say), so its remote copies are told them every iteration; PPO's and
    IMPALA's are not (a Ray call per worker per iteration saved)."""
    base = BasePolicy.set_env_steps_sampled
    return any(type(p).set_env_steps_sampled is not base for p in worker.policies.values())


def torch_worker_args(args: dict[str, Any]) -> dict[str, Any]:
    """What a remote worker with torch is built with: the local worker's ``args`` and the
    registered model class, if any (``register_model``)."""
    from flowrl.learning.registry import registered_model  # (the driver has torch)

    return {**args, "model_cls": registered_model(args["config"].model)}


def freeze_start_up() -> None:
    """Collect garbage once and keep what survives (modules, env, policy) out of the
    collector's later passes (``gc.freeze``): otherwise the first full pass over them runs
    in the middle of some later call, long enough to miss a metrics request's deadline."""
    gc.collect()
    gc.freeze()


def seed_torch(seed: int, worker_index: int) -> None:
    """Seed torch, and keep a remote worker to one torch thread, where this process has
    torch: a worker whose policies act in numpy has none."""
    if torch := sys.modules.get("torch"):
        torch.manual_seed(seed)
        if worker_index > 0:
            torch.set_num_threads(1)


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """One torch thread inside the block, the process's own number after it (an error
    too): what is computed inside comes out the same whatever threads the process had.

    Examples:
        >>> import torch
        >>> with one_torch_thread():
        ...     torch.get_num_threads()
        1
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _answers(actor: Any, timeout_s: float = 30) -> bool:
    """Whether a remote worker answers a ping within ``timeout_s``."""
    import ray

    try:
        ray.get(ray_call(actor, "ping"), timeout=timeout_s)
    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
        return False
    return True


class WorkerReports:
    """What the remote workers report: the episodes they finished, their policies' acting
    metrics and the normalisation statistics they added (``RolloutWorker.report``).

    A fragment brings its worker's report where the plan's source asks for it
    (``ParallelRollouts``): ``receive`` takes it, with no call of its own. ``collect``
    asks the workers that sent none since the last collect, over the plan's channels where
    open (``send_call``); one that is busy past ``timeout_s`` keeps its request pending
    and reports on a later call, so nothing is lost and nobody waits for a long sample.
    """

    def __init__(self, local_worker: RolloutWorker) -> None:
        self.local_worker = local_worker  # the learner's policies merge the statistics
        self.pending: dict[Any, Any] = {}  # actor -> its report's request
        self.episodes: list[Episode] = []
        self.metrics: dict[int, dict[str, float]] = {}
        self.reported: set[int] = set()

    def receive(self, reports: Sequence[tuple]) -> None:
        """Reports ``(worker index, episodes, metrics, unsent)``, however they came."""
        for index, episodes, metrics, unsent in reports:
            if unsent:
                with self.local_worker.lock:  # a checkpoint reads whole updates
                    self.local_worker.policies.merge(unsent)
            self.episodes.extend(episodes)
            if metrics:
                self.metrics[index] = metrics
            self.reported.add(index)

    def collect(
        self, actors: Sequence[Any], timeout_s: float, plan: PlanContext | None = None
    ) -> tuple[list[Episode], dict[int, dict[str, float]]]:
        """Everything reported since the last call, asking ``actors`` (worker ``i + 1`` at
        ``i``) that reported nothing meanwhile (over ``plan``'s channels where open)."""
        for actor, request in list(self.pending.items()):
            if isinstance(request, Ticket) and not (request.answered or request.channel.open):
                del self.pending[actor]  # asked on a plan's channel closed since: ask anew
        for index, actor in enumerate(actors, start=1):
            if index not in self.reported and actor not in self.pending:
                self.pending[actor] = send_call(plan, actor, "report")
        requests = list(self.pending.values())
        ready = set(wait_for(requests, len(requests), timeout_s)[0] if requests else [])
        for actor, request in list(self.pending.items()):
            if request in ready:
                self.receive([take_result(request)])
                del self.pending[actor]
        taken = self.episodes, self.metrics
        self.episodes, self.metrics, self.reported = [], {}, set()
        return taken


class WithReport(Operator):
    """On a rollout worker: its batch carries what the worker reports (its episodes,
    acting metrics and normalisation statistics: ``RolloutWorker.report``) to the plan,
    which takes it off where the batch arrives (``WorkerReports.receive``), instead of
    asking for it in a Ray call of its own."""

    def __call__(self, batch: MultiAgentBatch) -> MultiAgentBatch:
        batch.reports = (*batch.reports, self.context.worker.report())
        return batch


#: weights up to this many bytes travel inside each request that carries them, larger ones
#: are put in the object store once and the requests carry the reference: Ray sends a task's
#: argument inline below its ``max_direct_call_object_size`` (100 KiB unless set), and puts
#: a larger one in the store for every task it goes with
INLINE_WEIGHTS_BYTES = 100 * 1024


def weights_payload(weights: dict[str, Weights]) -> Any:
    """What requests carry of ``weights`` (by policy id): the weights themselves where they
    are small enough to travel inside every request, else put once in the object store.

    Inline, a worker's request brings them with no fetch from the object store, which
    costs the worker, the raylets and the driver round trips each time the weights change
    (``docs/performance.md``, "Weights inside the requests").

    Examples:
        >>> import numpy as np
        >>> weights_payload({"default": {"w": np.zeros(4, np.float32)}})
        {'default': {'w': array([0., 0., 0., 0.], dtype=float32)}}
    """
    if _nbytes(weights) <= INLINE_WEIGHTS_BYTES:
        return weights
    import ray

    return ray.put(weights)


def _nbytes(value: Any) -> int:
    """The bytes of ``value``'s arrays, through dicts, lists and tuples."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, dict):
        return sum(map(_nbytes, value.values()))
    if isinstance(value, list | tuple):
        return sum(map(_nbytes, value))
    return sys.getsizeof(value)


class StoredWeights(NamedTuple):
    """Weights in the object store, as a request carries them: Ray fetches a reference
    that is a call's argument before the call begins, where the worker cannot time it, so
    the reference travels inside this and the worker fetches it in ``set_weights``."""

    ref: Any


def weights_carry(payload: Any) -> Carry:
    """Weights for a rollout worker's next request to carry (``weights_payload``: the
    weights, or their reference in the object store): it loads them (``set_weights``)
    before it samples."""
    import ray

    if isinstance(payload, ray.ObjectRef):
        payload = StoredWeights(payload)
    return Carry("set_weights", payload)


#: this process's WorkerSets whose remote workers hold Ray's CPUs (until ``stop``)
_HOLDING: weakref.WeakSet[WorkerSet] = weakref.WeakSet()


def check_cpus_free(config: Config) -> None:
    """A ConfigError when Ray has too few free CPUs for ``config``'s remote workers because
    WorkerSets of this process, not stopped, hold them: Ray would wait for them forever (a
    notebook cell that builds an algorithm again while the last one still holds its
    workers). CPUs held elsewhere (another job on a cluster) are waited for, as Ray does."""
    import ray

    if not _HOLDING or ray.util.get_current_placement_group() is not None:  # Tune's trials
        return
    need = config.num_workers * config.num_cpus_per_worker
    if need <= (free := ray.available_resources().get("CPU", 0.0)):
        return
    if held := cpus_held_here():
        raise ConfigError(
            f"{config.num_workers} rollout workers need {need:g} CPUs and Ray has {free:g} free: "
            f"the workers of {', '.join(held)} (built earlier in this process and not stopped) "
            f"hold {sum(held.values()):g}; stop that first (algo.stop()), or use num_workers=0"
        )


def cpus_held_here() -> dict[str, float]:
    """The Ray CPUs that this process's WorkerSets, not stopped, hold with their remote
    workers, by algorithm and env (one let go without ``stop()`` is collected first: its
    workers go with it)."""
    if _HOLDING:
        gc.collect()
    return {f"{ws.config.algo_name or 'an algorithm'} on {ws.config.env}":
            len(ws.remote_workers) * ws.config.num_cpus_per_worker for ws in _HOLDING}  # fmt: skip


def check_policy_ids(config: Config, policy_ids: Sequence[str]) -> None:
    """A ConfigError for an entry of ``config.policies`` that no agent of the env maps to
    (a misspelt id: its settings went unused, and said nothing)."""
    for pid in config.policies:
        if pid not in policy_ids:
            raise ConfigError(
                f"policies names {pid!r}, which no agent of env {config.env} maps to "
                f"(policy_mapping {config.policy_mapping!r}); its policies: "
                f"{', '.join(policy_ids)}"
            )


def _wait_until_up(actors: list[Any]) -> None:
    """Block until ``actors`` are constructed (env and policy built), so a request timeout
    (``sample_timeout_s``) measures sampling, not a worker's start."""
    import ray

    try:
        ray.get([actor.ping.remote() for actor in actors])
    except ray.exceptions.RayActorError as e:
        raise _error_inside(e) or e from None


class WorkerStartError(RuntimeError):
    """A remote rollout worker raised while it was built (its env or its policy): what it
    raised, in one line, and ``raised_at``, the line of code that raised it."""

    def __init__(self, message: str, raised_at: str | None = None) -> None:
        super().__init__(message, raised_at)
        self.message, self.raised_at = message, raised_at

    def __str__(self) -> str:
        return self.message


def _error_inside(error: Any) -> Exception | None:
    """What a remote worker raised while it was built, which Ray's error quotes at the end
    of the worker's traceback: a ConfigError as itself (an env module that the driver
    imports from its own ``sys.path``, a notebook's ``sys.path.append``, and Ray's
    workers cannot), anything else as a WorkerStartError; None for a worker that died."""
    quoted = quoted_error(str(getattr(error, "error_msg", "")))
    if not getattr(error, "actor_init_failed", False) or quoted is None:
        return None
    said, raised_at = quoted
    config_error = f"{ConfigError.__module__}.{ConfigError.__qualname__}: "
    if not said.startswith(config_error):
        return WorkerStartError(f"a rollout worker could not start: {said}", raised_at)
    message = f"a rollout worker: {said.removeprefix(config_error)}"
    if message.startswith("a rollout worker: cannot import"):
        message += (" (this process imports it, Ray's worker processes cannot: Ray started "
                    "before its directory was added to sys.path, or runs elsewhere; put the "
                    "directory on PYTHONPATH before Python starts, or pip install it)")  # fmt: skip
    return ConfigError(message)


class WorkerSet:
    """One local worker (the learner, and the sampler when there are no remote workers)
    and ``num_workers`` remote ``RolloutWorker`` actors.

    While a plan samples over its channel to a remote worker, the worker may be parked
    (``channels.Parking``): call it with ``flowrl.core.iter.ray_call(actor, "ping")``,
    which ends the park first, or a plain ``actor.ping.remote()`` waits up to 5 s.

    Examples:
        >>> from flowrl.core.config import Config
        >>> from flowrl.learning.policy import Policy
        >>> workers = WorkerSet(policy_cls=Policy, config=Config(num_workers=0))
        >>> workers.remote_workers
        []
    """

    def __init__(
        self,
        *,
        policy_cls: type[BasePolicy],
        config: Config,
        learner_cls: type[Learner] | None = None,
        policy_specs: dict[str, PolicySpec] | None = None,
        workers_learn: bool = False,
    ) -> None:
        self.config = config
        args = dict(policy_cls=policy_cls, learner_cls=learner_cls, config=config,
                    policy_specs=dict(policy_specs or {}))  # fmt: skip
        self.local_worker = RolloutWorker(**args, device=config.device)
        self._remote_cls: Any = None
        self.remote_workers: list[Any] = []
        self._kept: dict[str, Any] = {}
        self._weights_deferred = False
        try:  # a learner or a remote worker that cannot be built: nothing left running
            self._start(args, learner_cls, workers_learn)
        except BaseException:
            self.stop()
            raise
        #: what the remote workers report, with their fragments or when asked
        self.reports = WorkerReports(self.local_worker)

    def _start(self, args: dict[str, Any], learner_cls: type[Learner] | None, learn: bool) -> None:
        """The learner, and the remote workers, up and with the local worker's weights."""
        config = self.config
        check_policy_ids(config, self.local_worker.env.policy_ids)
        light = None if learn else numpy_worker_args(self.local_worker)
        #: remote workers act in numpy, without torch (``NumpyPolicy``; module docstring)
        self.numpy_workers = light is not None
        self._remote_args = light or torch_worker_args(args)
        self._follow_env_steps = learn or follows_env_steps(self.local_worker)
        if learner_cls is not None:  # built now: its networks take their seeds in order
            _ = self.local_worker.learner
        if config.num_workers > 0:
            import ray

            check_cpus_free(config)
            remote_cls = ray.remote(num_cpus=config.num_cpus_per_worker)
            self._remote_cls = remote_cls(taking_turns(RolloutWorker))
            self.remote_workers = [self._make_remote(i) for i in range(1, config.num_workers + 1)]
            _HOLDING.add(self)
            # the learner's optimisers, built while they start: nothing is left for the
            # first update to build
            if learner_cls is not None:
                _ = self.local_worker.learner.optimizers
            _wait_until_up(self.remote_workers)
            self.sync_weights()

    @property
    def learner(self) -> Learners:
        """The learners by policy id, on the local worker: what training operators
        update."""
        return self.local_worker.learner

    @property
    def policy_ids(self) -> list[str]:
        """The ids of the run's policies (``[SINGLE]`` for a single-agent env)."""
        return list(self.local_worker.policies)

    def policy_config(self, policy_id: str) -> Config:
        """The config policy ``policy_id`` acts and learns with."""
        return self.local_worker.policy_spec(policy_id).config

    def keep(self, name: str, make: Callable[[], T]) -> T:
        """The object ``make()`` built the first time a plan asked for ``name``.

        A plan is rebuilt after a dead rollout worker is replaced (see
        ``recreate_failed_workers``); what it gets from here, such as its replay
        buffer or replay actors, carries over to the new plan instead of starting empty.

        Examples:
            >>> buffer = workers.keep("replay", lambda: ReplayBuffer(50_000))  # doctest: +SKIP
        """
        if name not in self._kept:
            self._kept[name] = make()
        return self._kept[name]

    def _make_remote(self, index: int, **options: Any) -> Any:
        cls = self._remote_cls.options(**options) if options else self._remote_cls
        env_creator = registered_creator(self.config.env)
        return cls.remote(**self._remote_args, worker_index=index, env_creator=env_creator)

    def make_evaluation_worker(self) -> Any:
        """A remote worker for evaluation episodes only (index ``num_workers + 1``), up.
        It works in short bursts, so it reserves no CPU: Ray places it even when the
        rollout workers hold every CPU."""
        actor = self._make_remote(self.config.num_workers + 1, num_cpus=0)
        _wait_until_up([actor])
        return actor

    def sync_weights(self, actors: list[Any] | None = None, *, weights_ref: Any = None) -> None:
        """Send the local weights (``weights_payload``: inline, or put in the object store
        once; or ``weights_ref``, such a payload already made) to ``actors`` (all remote
        workers by default) without waiting."""
        targets = self.remote_workers if actors is None else actors
        if actors is None:
            self._weights_deferred = False
        if not targets:
            return
        payload = weights_ref
        if payload is None:
            payload = weights_payload(self.local_worker.get_weights())
        for actor in targets:
            ray_call(actor, "set_weights", payload)

    def set_env_steps_sampled(
        self, steps: int, actors: list[Any] | None = None, *, plan: PlanContext | None = None
    ) -> None:
        """Tell ``actors`` (all remote workers by default) the run's env steps, where a policy
        follows them (``follows_env_steps``), without waiting: their next request comes
        after: over ``plan``'s channels where it has them (a socket write, in order with
        the requests), else as Ray calls."""
        if self._follow_env_steps:
            for actor in self.remote_workers if actors is None else actors:
                tell(plan, actor, "set_env_steps_sampled", steps)

    def defer_weight_sync(self) -> None:
        """The local weights changed: send them to every remote worker, once, with the
        workers' next sample requests (``take_deferred_weights``). Updates that follow each
        other with no sampling in between (DQN's SGD steps in one round) cost one send.

        Examples:
            >>> workers.local_worker.learn_on_batch(batch)  # doctest: +SKIP
            >>> workers.defer_weight_sync()  # doctest: +SKIP
        """
        self._weights_deferred = bool(self.remote_workers)

    def take_deferred_weights(self) -> Any:
        """The weights deferred by ``defer_weight_sync``, as requests carry them
        (``weights_payload``; None: none deferred): ParallelRollouts's requests take them
        to the workers. To sample the workers yourself, send them first:
        ``sync_weights(weights_ref=payload)``."""
        if not self._weights_deferred:
            return None
        self._weights_deferred = False
        return weights_payload(self.local_worker.get_weights())

    def collect_metrics(
        self, timeout_s: float = 0.05, *, plan: PlanContext | None = None
    ) -> tuple[list[Episode], dict[int, dict[str, float]]]:
        """Episodes finished on all workers since the last call, and each sampling
        worker's policy metrics by worker index (``WorkerReports``; asked over ``plan``'s
        channels where open).

        Examples:
            >>> episodes, by_worker = workers.collect_metrics()  # doctest: +SKIP
        """
        episodes, local_metrics, _ = self.local_worker.get_metrics()  # its own statistics
        if not self.remote_workers:  # the local worker samples
            return episodes, {0: local_metrics} if local_metrics else {}
        remote, by_worker = self.reports.collect(self.remote_workers, timeout_s, plan)
        return episodes + remote, by_worker

    def recreate_failed_workers(self, broken: Sequence[int] = ()) -> list[int]:
        """Replace remote workers that no longer answer, and those of the indexes in
        ``broken`` (their env raised: they answer, but their env cannot go on); returns
        the indexes replaced."""
        if not self.remote_workers:
            return []
        import ray

        replaced = []
        for i, actor in enumerate(self.remote_workers):
            if i + 1 in broken:
                ray.kill(actor, no_restart=True)
            elif _answers(actor):
                continue
            logger.warning("rollout worker %d failed; starting a new one", i + 1)
            self.reports.pending.pop(actor, None)
            self.remote_workers[i] = self._make_remote(i + 1)
            replaced.append(i + 1)
        if replaced:
            new = [self.remote_workers[i - 1] for i in replaced]
            _wait_until_up(new)
            self.sync_weights(new)
        return replaced

    def revive_kept(self) -> dict[str, list[int]]:
        """What plans kept and can revive itself (``ReplayShards``)
        replaces its dead actors; returns the indexes replaced, by name."""
        revived = {}
        for name, kept in self._kept.items():
            revive = getattr(kept, "revive", None)
            if revive is not None and (dead := revive()):
                revived[name] = dead
        return revived

    def stop(self) -> None:
        """Close the local env and kill the remote actors; drop what plans kept."""
        _HOLDING.discard(self)
        self.local_worker.close()
        self._kept.clear()
        if self.remote_workers:
            import ray

            with contextlib.suppress(ray.exceptions.RayError):  # what they recorded, whole
                flushed = [ray_call(w, "flush_experiences") for w in self.remote_workers]
                ray.get(flushed, timeout=60)
            for actor in self.remote_workers:
                ray.kill(actor)
            self.remote_workers = []

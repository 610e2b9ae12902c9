"""Sources and transforms of experience: ParallelRollouts, AggregatedRollouts,
AsyncGradients, ReadExperiences, ConcatBatches, StandardizeFields.

Examples:
    >>> from flowrl import Config, Policy
    >>> config = Config(num_workers=0, num_envs_per_worker=2, rollout_fragment_length=8)
    >>> workers = WorkerSet(policy_cls=Policy, config=config)
    >>> rollouts = ParallelRollouts(workers, mode="bulk_sync")
    >>> batches = rollouts.combine(ConcatBatches(min_batch_size=40))
    >>> len(next(batches)) >= 40
    True
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from flowrl.core.config import ArgumentTypeError, ConfigError
from flowrl.core.context import SAMPLE, STEPS_SAMPLED, SYNC, WEIGHT_BROADCASTS, PlanContext
from flowrl.core.iter import (
    Carry,
    LocalIterator,
    NotReady,
    Operator,
    ParallelIterator,
    ParallelIteratorWorker,
    walk,
)
from flowrl.core.sample_batch import ArrayPool, MultiAgentBatch, SampleBatch
from flowrl.learning.multi import scalar_stats
from flowrl.learning.postprocessing import VALID
from flowrl.rollout.experiences import EPS_ID, check_spaces, read_manifest, stream_experiences
from flowrl.rollout.minari_datasets import read_source
from flowrl.rollout.worker import (
    StoredWeights,
    WithReport,
    WorkerSet,
    fragments_per_call,
    weights_carry,
    weights_payload,
)

#: ``(gradients by policy id, flat stats with "batch_count")``
Gradients = tuple[dict[str, list[np.ndarray]], dict[str, Any]]
#: a gradient's info key for the worker reports its batch brought (``WithReport``)
REPORTS = "reports"


def _counted(
    source: Any,
    *,
    name: str,
    size: Callable[[Any], int],
    in_process: bool = False,
    reports_to: WorkerSet | None = None,
    policy_ids: list[str] | None = None,
) -> LocalIterator[Any]:
    """``source`` with the time spent waiting for each item and the env steps it holds
    recorded in the plan's context; a profile counts its time as sampling. An
    ``in_process`` item comes from no actor: ``context.current_actor`` is cleared for it
    (another branch, such as replay from shard actors, may have set it). The reports a
    batch brings (``WithReport``) go to ``reports_to``'s ``WorkerReports``; the context
    learns the workers' ``policy_ids``."""

    def build(ctx: PlanContext, timeout: float | None):
        ctx.policy_ids = ctx.policy_ids if policy_ids is None else policy_ids
        it = source.build(ctx, timeout)
        while True:
            with ctx.timer("sample"):
                try:
                    item = next(it)
                except StopIteration:
                    return
            if item is not NotReady:
                ctx.counters[STEPS_SAMPLED] += size(item)
                if in_process:
                    ctx.current_actor = None
                if reports_to is not None and (reports := _take_reports(item)):
                    reports_to.reports.receive(reports)
            yield item

    for it in walk(source):  # waiting for the actors and joining their fragments is sampling
        if it.role is None:
            it.role = SAMPLE
    return LocalIterator(build, name=name, parents=(source,), role=SAMPLE)


def _take_reports(item: MultiAgentBatch | Gradients) -> tuple:
    """The worker reports ``item`` brings (``WithReport``'s; a gradient's in its info, as
    ``ComputeGradients`` passes them on), taken off it."""
    if isinstance(item, tuple):
        return item[1].pop(REPORTS, ())
    reports, item.reports = item.reports, ()
    return reports


class SendDeferredWeights:
    """Before a round of sample requests: the weights a learner deferred, put once, for
    every worker's next request to carry (counted as a weight broadcast)."""

    def __init__(self, workers: WorkerSet) -> None:
        self._workers = workers

    def __call__(self, ctx: PlanContext) -> Carry | None:
        with ctx.span(SYNC):
            ref = self._workers.take_deferred_weights()
        if ref is None:
            return None
        ctx.counters[WEIGHT_BROADCASTS] += 1
        return weights_carry(ref)


def ParallelRollouts(
    workers: WorkerSet, *, mode: str = "bulk_sync", num_async: int = 2, ahead: bool = False
) -> LocalIterator[MultiAgentBatch] | ParallelIterator[MultiAgentBatch]:
    """Experience from the workers, counted as env steps sampled.

    Each request brings a worker's ``fragments_per_call`` fragments as one batch.
    ``bulk_sync``: one request to every worker per round, concatenated (on-policy); with
    ``ahead``, a worker is asked for its fragment of the next round as soon as its
    fragment of this one is in, so the workers sample while the plan trains, and none
    waits for the slowest of the round, with the weights of the update before (one
    update behind, as Cleanba's PPO samples).
    ``async``: batches as they complete, ``num_async`` requests in flight per worker.
    Two keep a worker busy while its last fragment travels and waits for the consumer
    (about 10% more env steps/s than one on CartPole); a fragment may then be sampled
    with weights one update older, which the off-policy plans that use ``async`` expect.
    ``raw``: the ParallelIterator over the remote workers, to transform on the actors.
    With no remote workers the local worker samples in-process (``num_async`` and
    ``ahead`` then change nothing: nothing runs beside the plan).

    Examples:
        >>> ParallelRollouts(workers, mode="async", num_async=1).take(1)  # doctest: +SKIP
    """
    if mode not in ("bulk_sync", "async", "raw"):
        raise ConfigError(f"ParallelRollouts' mode must be bulk_sync, async or raw, got {mode!r}")
    if ahead and mode != "bulk_sync":
        raise ConfigError(f"ParallelRollouts' ahead is for bulk_sync rounds, not mode {mode!r}")
    if not workers.remote_workers:
        if mode == "raw":
            raise ConfigError("ParallelRollouts(mode='raw') needs remote workers (num_workers > 0)")
        local = LocalIterator.from_generator(
            lambda: iter(workers.local_worker.sample, None), name="local_worker"
        )
        local.hidden = True  # its time is the source's: sampling in this process
        name, ids = f"ParallelRollouts({mode}, local)", workers.policy_ids
        return _counted(local, name=name, size=len, in_process=True, policy_ids=ids)
    shards = ParallelIterator.from_actors(
        workers.remote_workers,
        name="RolloutWorker",
        before_requests=SendDeferredWeights(workers),
        request_timeout_s=workers.config.sample_timeout_s,
        channels=requests_over_channels(workers),
    )
    if mode == "raw":
        return shards
    reporting = shards.for_each(WithReport())
    reporting.hidden = True  # part of the source, as the requests' weights are
    if mode == "bulk_sync":
        source = reporting.batch_across_shards(ahead=ahead).for_each(ConcatRound())
    else:
        source = reporting.gather_async(num_async=num_async)
    name = f"ParallelRollouts({mode}, ahead)" if ahead else f"ParallelRollouts({mode})"
    return _counted(source, name=name, size=len, reports_to=workers, policy_ids=workers.policy_ids)


# a request's reply past this goes through Ray's object store (shared memory), not a socket
CHANNEL_MAX_BYTES = 1 << 20


def requests_over_channels(workers: WorkerSet) -> bool:
    """Whether ``ParallelRollouts`` sends its requests over channels
    (``flowrl.core.channels``): where the config asks (``request_channels``), a request
    brings at most two fragments, and a reply's observations take at most
    ``CHANNEL_MAX_BYTES``. A socket copies what it carries, where Ray's object store
    shares large arrays such as Atari's frames; past two fragments per request (128
    workers and more, by default) Ray tasks measured faster (docs/performance.md)."""
    config = workers.config
    if fragments_per_call(config) > 2:
        return False
    rows = config.rollout_fragment_length * config.num_envs_per_worker
    return replies_fit_channels(workers, rows * fragments_per_call(config))


def replies_fit_channels(workers: WorkerSet, rows: int) -> bool:
    """Whether replies of ``rows`` rows (observations and next observations) go over
    channels: where the config asks (``request_channels``) and they take at most
    ``CHANNEL_MAX_BYTES`` (Ape-X's replay requests, say)."""
    per_row = max(_row_bytes(p.observation_space) for p in workers.local_worker.policies.values())
    return workers.config.request_channels and 2 * rows * per_row <= CHANNEL_MAX_BYTES


def _row_bytes(space: gym.Space) -> int:
    """An observation's bytes as float32 at most (a space of no fixed size: too many)."""
    try:
        return gym.spaces.flatdim(space) * 4
    except (ValueError, NotImplementedError):
        return CHANNEL_MAX_BYTES


class Aggregator(ParallelIteratorWorker):
    """A Ray actor that takes fragments in for the plan (``AggregatedRollouts``).

    With many rollout workers, the plan's process spends its time on each fragment: a
    request, a ``ray.wait`` and a ``ray.get``, its rows copied into a train batch, and a
    weight push to its worker. An aggregator does this for a share of the workers: it
    keeps ``num_async`` requests in flight on each, concatenates their fragments into
    batches of at least ``min_batch_size`` rows (its items), and forwards each version of
    the weights it is sent to its workers, put once. The plan then handles one item and
    one weight push per train batch instead of one per fragment.
    """

    def __init__(
        self,
        workers: Sequence[Any],
        *,
        min_batch_size: int,
        num_async: int = 2,
        request_timeout_s: float = 0.0,
    ) -> None:
        self._workers = list(workers)
        self._min_batch_size, self._num_async = min_batch_size, num_async
        self._request_timeout_s = request_timeout_s
        self._carry: Carry | None = None  # the newest weights to forward, put once
        super().__init__(self._batches)

    def set_weights(self, weights: Any) -> None:
        """New weights: each worker's next request carries them (inline, or put once; those
        already in the object store go on as they came)."""
        if not isinstance(weights, StoredWeights):
            weights = weights_payload(weights)
        self._carry = weights_carry(weights)

    def _batches(self) -> Iterator[MultiAgentBatch]:
        fragments = ParallelIterator.from_actors(
            self._workers,
            name="RolloutWorker",
            before_requests=lambda ctx: self._carry,
            request_timeout_s=self._request_timeout_s,
        )
        fragments = fragments.for_each(WithReport()).gather_async(num_async=self._num_async)
        return iter(fragments.combine(ConcatBatches(self._min_batch_size)))


def AggregatedRollouts(
    workers: WorkerSet, *, num_aggregators: int, min_batch_size: int, num_async: int = 2
) -> LocalIterator[MultiAgentBatch]:
    """Batches of at least ``min_batch_size`` env steps from ``num_aggregators``
    ``Aggregator`` actors (worker ``i`` goes to aggregator ``i % num_aggregators``),
    as they complete, counted as env steps sampled: what
    ``ParallelRollouts(workers, mode="async").combine(ConcatBatches(min_batch_size))``
    yields, with the fragments taken in off the plan's process. ``BroadcastWeights`` after
    it sends the weights to the aggregator an item came from, which passes them on.
    IMPALA's and APPO's ``num_aggregation_workers`` (``benchmarks/scaling.py``).

    Examples:
        >>> AggregatedRollouts(  # doctest: +SKIP
        ...     workers, num_aggregators=2, min_batch_size=500
        ... ).for_each(BroadcastWeights(learner))
    """
    import ray

    remote = workers.remote_workers
    if not remote:
        raise ConfigError("AggregatedRollouts needs remote workers (num_workers > 0)")
    if num_aggregators < 1:
        raise ConfigError(
            f"AggregatedRollouts' num_aggregators must be >= 1, got {num_aggregators}"
        )
    n = min(num_aggregators, len(remote))
    actor_cls = ray.remote(num_cpus=0)(Aggregator)
    timeout_s = workers.config.sample_timeout_s
    aggregators = [
        actor_cls.remote(remote[i::n], min_batch_size=min_batch_size, num_async=num_async,
                         request_timeout_s=timeout_s)
        for i in range(n)
    ]  # fmt: skip
    shards = ParallelIterator.from_actors(
        aggregators, name="Aggregator", request_timeout_s=timeout_s
    )
    return _counted(
        shards.gather_async(num_async=1),  # new weights reach an aggregator before its next batch
        name=f"AggregatedRollouts({n} aggregator{'s' * (n > 1)}, {len(remote)} workers)",
        size=len,
        reports_to=workers,
    )


class ComputeGradients(Operator):
    """Turns a batch into ``(gradients, info)`` on ``worker`` or, on a remote shard, on the
    rollout worker that runs it; the worker reports the batch brought (``WithReport``)
    go on in ``info[REPORTS]``, for the plan's source to take off (``AsyncGradients``).

    Examples:
        >>> ParallelRollouts(workers, mode="raw").for_each(ComputeGradients())  # doctest: +SKIP
    """

    def __init__(self, worker: Any = None) -> None:
        self._worker = worker

    def __call__(self, batch: MultiAgentBatch) -> Gradients:
        worker = self._worker if self._worker is not None else self.context.worker
        grads, stats = worker.compute_gradients(batch)
        info = {**scalar_stats(stats), "batch_count": len(batch)}
        if batch.reports:  # the worker's report the batch brought goes on with its gradients
            info[REPORTS] = batch.reports
        return grads, info


def _gradient_count(item: Gradients) -> int:
    return item[1]["batch_count"]


def AsyncGradients(workers: WorkerSet) -> LocalIterator[Gradients]:
    """Each remote worker samples and computes a gradient; gradients arrive as they
    complete, with ``context.current_actor`` set to their source (A3C).

    Examples:
        >>> grads = AsyncGradients(workers)  # doctest: +SKIP
        >>> grads.for_each(ApplyGradients(workers, update_all=False))  # doctest: +SKIP
    """
    if not workers.remote_workers:
        local = ParallelRollouts(workers, mode="async")
        return local.for_each(ComputeGradients(workers.local_worker))
    reporting = ParallelIterator.from_actors(
        workers.remote_workers,
        name="RolloutWorker",
        before_requests=SendDeferredWeights(workers),
        request_timeout_s=workers.config.sample_timeout_s,
    ).for_each(WithReport())
    reporting.hidden = True  # part of the source, as in ParallelRollouts
    grads = reporting.for_each(ComputeGradients()).gather_async()
    return _counted(grads, name="AsyncGradients", size=_gradient_count, reports_to=workers)


def ReadExperiences(
    source: str | os.PathLike[str] | Mapping[str, SampleBatch],
    *,
    batch_size: int,
    seed: int = 0,
    spaces: dict[str, tuple[Any, Any]] | None = None,
    prepare: Callable[[SampleBatch], SampleBatch] | None = None,
    stream: bool = False,
    readers: int = 0,
) -> LocalIterator[MultiAgentBatch]:
    """Recorded experiences as a plan's source: ``batch_size`` rows of each policy per
    item, drawn without replacement from a shuffled pass over the rows (each pass in a new
    order, seeded). ``source`` is a recording's directory (``record_experiences``: its
    manifest checked against ``spaces``, an env's by policy id, here and now), a local
    Minari dataset (``minari:<dataset id>``), both read when the plan first pulls, or
    rows by policy id.
    ``prepare`` adds what a loss needs to each policy's rows, once (a return per step).
    With ``readers``, that many Ray actors read the recording instead of this process,
    each its share of whole episodes (those whose id modulo ``readers`` is its index),
    and make the batches (``prepare`` included); the plan takes them as they come.
    With ``stream``, a recording's files stream through Ray Data instead of being read
    whole (``stream_experiences``: larger than memory, or read on several nodes); rows
    are then shuffled within a buffer, and ``prepare``, which needs them all, is refused.

    Examples:
        >>> rows = {"default": SampleBatch(obs=np.arange(5.0), actions=np.arange(5))}
        >>> batch = next(ReadExperiences(rows, batch_size=4))
        >>> batch, sorted(batch["default"]["obs"].tolist()) != [0.0, 1.0, 2.0, 3.0]
        (MultiAgentBatch(4 env steps; default: 4 rows), True)
    """
    if batch_size < 1:
        raise ConfigError(f"ReadExperiences' batch_size must be >= 1, got {batch_size}")
    if readers < 0:
        raise ConfigError(f"ReadExperiences' readers must be >= 0, got {readers}")
    if isinstance(source, str | os.PathLike) and source and not str(source).startswith("minari:"):
        check_spaces(source, read_manifest(source)[1], spaces)  # bad input before a run starts
    read = {"batch_size": batch_size, "seed": seed, "spaces": spaces, "prepare": prepare}

    def build(ctx: PlanContext, timeout: float | None) -> Iterator[MultiAgentBatch]:
        if not source:
            raise ConfigError("no recording to read: name its directory (input, --input DIR)")
        if stream:
            if readers:
                raise ConfigError("a streamed recording is read by Ray Data's tasks: readers=0")
            yield from _streamed(source, **read)
        elif readers:
            yield from _from_readers(source, readers, read, ctx, timeout)
        else:
            yield from _shuffled_batches(source, **read)

    name = f"ReadExperiences(batch_size={batch_size}{f', readers={readers}' if readers else ''})"
    return LocalIterator(build, name=name, role=SAMPLE)


def _from_readers(
    source: Any, readers: int, read: dict[str, Any], ctx: PlanContext, timeout: float | None
) -> Iterator[MultiAgentBatch]:
    """``ReadExperiences``' batches made by ``readers`` actors, each its share."""
    import ray

    # one per node where the cluster has several (reading and batching spread out)
    shard = ray.remote(num_cpus=0, scheduling_strategy="SPREAD")(_ExperienceShard)
    actors = [shard.remote(source, i, readers, **read) for i in range(readers)]
    shards = ParallelIterator.from_actors(actors, name="ExperienceShard")
    for batches in shards.gather_async(num_async=2).build(ctx, timeout):
        if batches is NotReady:
            yield batches
        else:
            yield from batches
    raise ConfigError(f"no rows to read: each of the {readers} readers' shares is empty")


def _shuffled_batches(
    source: Any,
    *,
    batch_size: int,
    seed: int,
    spaces: Any,
    prepare: Any,
    shard: tuple[int, int] = (0, 1),
) -> Iterator[MultiAgentBatch]:
    """``ReadExperiences``' batches of ``source`` read whole in this process; of its
    episodes whose id modulo ``shard[1]`` is ``shard[0]``."""
    read = source
    if isinstance(source, str | os.PathLike):
        read = read_source(source, spaces=spaces)
    index, count = shard
    rows = {}
    for pid, r in read.items():
        r = SampleBatch({k: v for k, v in r.items() if v.dtype != object})
        if count > 1:  # whole episodes (rows without episode ids: every count-th row)
            ids = r[EPS_ID] if EPS_ID in r else np.arange(len(r))
            r = r.take(np.flatnonzero(ids % count == index))
        rows[pid] = prepare(r) if prepare is not None else r
    if not all(len(r) for r in rows.values()):  # a share of no episodes: nothing to serve
        return
    rng = np.random.default_rng(seed + index)
    order = {pid: np.empty(0, np.int64) for pid in rows}
    while True:
        parts = {}
        for pid, r in rows.items():
            n = min(batch_size, len(r))
            if len(order[pid]) < n:  # the pass is spent: the next, in a new order
                order[pid] = rng.permutation(len(r))
            picked, order[pid] = order[pid][:n], order[pid][n:]
            parts[pid] = SampleBatch({k: v[picked] for k, v in r.items()})
        yield MultiAgentBatch(parts, env_steps=batch_size)


class _ExperienceShard(ParallelIteratorWorker):
    """A Ray actor serving ``ReadExperiences``' batches of its share of a recording,
    ``per_call`` at a time (a call costs the driver about as much as a small batch's SGD
    step)."""

    def __init__(self, source: Any, index: int, count: int, per_call: int = 8, **read: Any):
        def chunks() -> Iterator[list[MultiAgentBatch]]:
            batches = _shuffled_batches(source, shard=(index, count), **read)
            while chunk := list(itertools.islice(batches, per_call)):
                yield chunk

        super().__init__(chunks)


def _streamed(
    source: Any, *, batch_size: int, prepare: Any, **read: Any
) -> Iterator[MultiAgentBatch]:
    if prepare is not None:
        raise ConfigError("this loss needs every recorded step in memory: input_stream=false")
    if not isinstance(source, str | os.PathLike) or str(source).startswith("minari:"):
        raise ConfigError(f"only a recording's directory streams, not {str(source)[:60]!r}")
    for parts in stream_experiences(source, batch_size=batch_size, **read):
        yield MultiAgentBatch(parts, env_steps=batch_size)


class ConcatRound(Operator):
    """The fragments of one bulk_sync round as one batch, written into the memory of an
    earlier round's batch once nothing holds that any more (see ``ArrayPool``): the
    workers wait for the next round meanwhile, and fresh memory for a Pong round (112 MB)
    cost 0.2-0.5 s of page faults on this project's VMs.

    Examples:
        >>> shards.batch_across_shards().for_each(ConcatRound())  # doctest: +SKIP
    """

    def __init__(self) -> None:
        self._pool = ArrayPool()

    def __call__(self, fragments: list[MultiAgentBatch]) -> MultiAgentBatch:
        return MultiAgentBatch.concat(fragments, pool=self._pool)


class ConcatBatches(Operator):
    """Buffers fragments; emits one batch once it holds at least ``min_batch_size`` steps.
    Use it with ``combine``.

    Examples:
        >>> rollouts.combine(ConcatBatches(min_batch_size=4000))  # doctest: +SKIP
    """

    def __init__(self, min_batch_size: int) -> None:
        self.min_batch_size = min_batch_size
        self._buffer: list[MultiAgentBatch] = []
        self._count = 0
        self._pool = ArrayPool()  # a batch's memory, reused once nothing holds it

    def __call__(self, batch: MultiAgentBatch) -> list[MultiAgentBatch]:
        if not isinstance(batch, MultiAgentBatch):  # (after TrainOneStep: its (batch, stats))
            raise ConfigError(
                f"ConcatBatches takes sample batches (rollouts, a recording), got a "
                f"{type(batch).__name__}: put it before the training step"
            )
        self._buffer.append(batch)
        self._count += len(batch)  # env steps
        if self._count < self.min_batch_size:
            return []
        out = MultiAgentBatch.concat(self._buffer, pool=self._pool)
        self._buffer, self._count = [], 0
        return [out]


class SelectExperiences(Operator):
    """Keeps the named policies' rows of each multi-agent batch (from the same env steps):
    a branch of a plan that trains some policies takes only theirs. An id the workers
    have no policy of (``ParallelRollouts`` tells the plan theirs) is a ConfigError.

    Examples:
        >>> rows = {"ppo": SampleBatch(x=np.ones(3)), "dqn": SampleBatch(x=np.ones(2))}
        >>> SelectExperiences(["ppo"])(MultiAgentBatch(rows, env_steps=3))
        MultiAgentBatch(3 env steps; ppo: 3 rows)
    """

    def __init__(self, policy_ids: Sequence[str]) -> None:
        if isinstance(policy_ids, str):
            raise ArgumentTypeError(
                f"SelectExperiences takes a list of policy ids, got {policy_ids!r}"
            )
        self.policy_ids = list(policy_ids)

    def __call__(self, batch: MultiAgentBatch) -> MultiAgentBatch:
        known = getattr(self, "context", None) and self.context.policy_ids
        if known and (unknown := [pid for pid in self.policy_ids if pid not in known]):
            raise ConfigError(  # (a misspelt id selected nothing, and nothing trained)
                f"SelectExperiences names {', '.join(unknown)}, which the workers have no "
                f"policy of; theirs: {', '.join(known)}"
            )
        return batch.select(self.policy_ids)

    def __repr__(self) -> str:
        return f"SelectExperiences({self.policy_ids})"


class StandardizeFields(Operator):
    """Zero mean, unit variance on the named columns of each policy's rows (a policy
    whose rows lack them is left as it is; a batch where no policy's rows hold them is a
    ConfigError naming the columns they do hold: a misspelt field).

    Examples:
        >>> batches.for_each(StandardizeFields(["advantages"]))  # doctest: +SKIP
    """

    def __init__(self, fields: Sequence[str]) -> None:
        self.fields = list(fields)

    def __call__(self, batch: MultiAgentBatch) -> MultiAgentBatch:
        rows_of = batch.policy_batches.values()
        held = [rows for rows in rows_of if all(field in rows for field in self.fields)]
        if not held and batch.policy_batches:
            columns = sorted({c for rows in rows_of for c, _ in rows.items()})
            raise ConfigError(
                f"StandardizeFields({self.fields}): no policy's rows hold "
                f"{' and '.join(self.fields)}; their columns: {', '.join(columns)}"
            )
        for rows in held:
            self._standardize(rows)
        return batch

    def _standardize(self, rows: SampleBatch) -> None:
        # the statistics of the rows to learn from (sequences hold reset steps and padding)
        valid = rows[VALID] if VALID in rows else slice(None)
        for field in self.fields:
            x = rows[field]
            rows[field] = (x - x[valid].mean()) / max(float(x[valid].std()), 1e-8)

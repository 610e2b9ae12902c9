"""The shared state of one execution plan: counters, timers, learner info, source actor.

Every iterator in a plan refers to one ``PlanContext``. Operators that join a plan
(subclasses of ``flowrl.core.iter.Operator``) get it as ``self.context`` when the plan is
built, so there are no module-level globals and two plans in one process never mix.

Examples:
    >>> ctx = PlanContext()
    >>> ctx.counters[STEPS_SAMPLED] += 200
    >>> with ctx.timer("sample"):
    ...     pass
    >>> ctx.counters[STEPS_SAMPLED], ctx.timers["sample"].count
    (200, 1)
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flowrl.core.config import name_hint

# counters (``context.counters``); the first three are also result keys
STEPS_SAMPLED = "env_steps_sampled"
STEPS_TRAINED = "env_steps_trained"
ITERATION = "iteration"
EPISODES_TOTAL = "episodes_total"
WEIGHT_BROADCASTS = "num_weight_broadcasts"
NUM_TARGET_UPDATES = "num_target_updates"
WORKER_RESTARTS = "num_worker_restarts"  # dead or hung workers (and shards) replaced
# ``context.info[LEARNER_INFO]``: the last learner statistics, reported as ``learner/*``
LEARNER_INFO = "learner"
# result keys of the results contract beyond the counters
TIME_TOTAL_S = "time_total_s"
EPISODE_RETURN_MEAN = "episode_return_mean"
EPISODE_LEN_MEAN = "episode_len_mean"
ENV_STEPS_PER_S = "env_steps_per_s"
# what remote workers report (cumulative seconds) when profiling, as worker metrics
WORKER_SAMPLE_S, WORKER_WEIGHTS_S = "busy/sample_s", "busy/set_weights_s"
# what a plan's work counts as in a profile's bottleneck line (flowrl.diagnostics.profiler)
SAMPLE, LEARN, SYNC = "sample", "learn", "weight sync"
IDLE = "idle (no branch had an item)"  # an async union's naps, as a profile shows them

#: result keys of RLlib (old and new API stacks) and Stable-Baselines3's logger, and flowrl's
OTHER_RESULT_NAMES = {
    "episode_reward_mean": (EPISODE_RETURN_MEAN,),
    "episode_reward_max": ("episode_return_max",),
    "episode_reward_min": ("episode_return_min",),
    "env_runners/episode_return_mean": (EPISODE_RETURN_MEAN,),
    "env_runners/episode_reward_mean": (EPISODE_RETURN_MEAN,),
    "env_runners/episode_len_mean": (EPISODE_LEN_MEAN,),
    "rollout/ep_rew_mean": (EPISODE_RETURN_MEAN,),
    "rollout/ep_len_mean": (EPISODE_LEN_MEAN,),
    "timesteps_total": (STEPS_SAMPLED,),
    "num_env_steps_sampled": (STEPS_SAMPLED,),
    "num_env_steps_sampled_lifetime": (STEPS_SAMPLED,),
    "time/total_timesteps": (STEPS_SAMPLED,),
    "num_env_steps_trained": (STEPS_TRAINED,),
    "training_iteration": (ITERATION,),
}


class Result(dict):
    """One result of ``Algorithm.train()``: a dict whose missing key is a ``KeyError`` that
    names the key flowrl has for it (another library's name, a near spelling).

    Examples:
        >>> Result({"episode_return_mean": 21.0})["episode_reward_mean"]
        Traceback (most recent call last):
        KeyError: "no result 'episode_reward_mean' (flowrl's name for it: 'episode_return_mean')"
    """

    def __missing__(self, key: Any) -> Any:
        if str(key).startswith("evaluation/"):
            hint = " (none this iteration: evaluation runs every evaluation_interval iterations)"
        elif f"{key}_mean" in self:  # (difflib's nearest: its _min)
            hint = f" (did you mean '{key}_mean'?)"
        else:
            hint = name_hint(str(key), [str(k) for k in self], OTHER_RESULT_NAMES)
        raise KeyError(f"no result {key!r}{hint}")


class TimerStat:
    """Wall-clock timer over a sliding window of the last ``window`` measurements.

    Examples:
        >>> t = TimerStat()
        >>> with t:
        ...     pass
        >>> t.count
        1
    """

    def __init__(self, window: int = 20) -> None:
        self._samples: collections.deque[float] = collections.deque(maxlen=window)
        self._start = 0.0
        self.count = 0
        self.total_s = 0.0

    def __enter__(self) -> TimerStat:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.push(time.perf_counter() - self._start)

    def push(self, seconds: float) -> None:
        self._samples.append(seconds)
        self.count += 1
        self.total_s += seconds

    @property
    def mean_ms(self) -> float:
        """Mean of the window in milliseconds (0 before the first measurement)."""
        return 1000.0 * sum(self._samples) / len(self._samples) if self._samples else 0.0


@dataclass
class PlanContext:
    """Counters, timers and learner info shared by the operators of one plan.

    ``current_actor`` is the Ray actor the item being processed came from (set by
    ``gather_async`` and ``gather_sync``); ``worker`` is the local rollout worker when the
    context lives inside a worker actor (remote-side operators use it). ``checkpointables``
    are plan-owned objects (a replay buffer, say) with ``get_state``/``set_state`` that
    checkpoints keep (see ``register_checkpointable``). ``profiler`` records where the
    plan's time goes (``flowrl.diagnostics.profiler``).
    """

    counters: collections.Counter[str] = field(default_factory=collections.Counter)
    timers: dict[str, TimerStat] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    current_actor: Any = None
    worker: Any = None
    checkpointables: dict[str, Any] = field(default_factory=dict)
    pending_state: dict[str, Any] = field(default_factory=dict)
    closers: list[Callable[[], Any]] = field(default_factory=list)
    profiler: Any = None  # a flowrl.diagnostics.profiler.Profiler when the plan is profiled
    #: per name, the objects registered under it since the plan was built, in order
    registered: dict[str, list[Any]] = field(default_factory=dict)
    #: per actor, the call its next request carries (``send_with_next_request``)
    carries: dict[Any, Any] = field(default_factory=dict)
    #: actor -> its ``flowrl.core.channels.Channel`` (None: it has none), once opened
    channels: dict[Any, Any] = field(default_factory=dict)
    #: the run's env-step budget (``flowrl.run.runner.run`` sets it while it trains):
    #: an iteration ends there, so a run stops at its budget, not up to an iteration past
    step_budget: int | None = None
    #: the policy ids of the workers whose experience the plan's source brings, once it is
    #: built (None: no such source; ``SelectExperiences`` checks the ids it names)
    policy_ids: list[str] | None = None

    def span(self, label: str, role: str | None = None) -> contextlib.AbstractContextManager:
        """Times a piece of work inside an operator as its own row of the profile (the
        weight transfers, say: ``span(SYNC)``); its role is its label unless given. Does
        nothing when the plan is not profiled.

        Examples:
            >>> with PlanContext().span("weight sync"):
            ...     pass
        """
        if self.profiler is None:
            return contextlib.nullcontext()
        return self.profiler.span(label, role)

    def send_with_next_request(self, actor: Any, carry: Any) -> None:
        """Have ``actor`` (``current_actor``, say) make the call ``carry`` holds (a
        ``flowrl.core.iter.Carry``) before its next item: the gather that asks it sends
        it with that request instead of in a Ray call of its own."""
        self.carries[actor] = carry

    def on_close(self, fn: Callable[[], Any]) -> None:
        """Call ``fn`` when the plan closes, whether or not the operator that started
        something (a learner thread, say) was ever pulled again.

        Examples:
            >>> ctx = PlanContext(); ctx.on_close(lambda: print("stopped")); ctx.close()
            stopped
        """
        self.closers.append(fn)

    def close(self) -> None:
        """Run and forget the ``on_close`` functions (a rebuilt plan keeps the context,
        its operators registering their state anew)."""
        closers, self.closers = self.closers, []
        self.registered.clear()
        self.carries.clear()
        for fn in closers:
            fn()

    def register_checkpointable(self, name: str, obj: Any) -> None:
        """Have checkpoints keep ``obj``'s state (its ``get_state``/``set_state``) under a
        key of its place in the plan: ``name`` for the first object registered under it as
        the plan is built, ``name_2`` for the second (two ``UpdateTargets`` keep two
        states), the same key again for an object registered twice.

        A restored state that arrived before the plan was built (plans build on their
        first pull) is applied now; an operator of a rebuilt plan (after a dead worker was
        replaced) takes over from the one it replaces under the same name: with its
        ``take_over(previous)`` where it has one (state that only means something in this
        process, such as a clock), else with ``set_state(previous.get_state())``.

        Examples:
            >>> class Tally:
            ...     n = 0
            ...     def get_state(self): return {"n": self.n}
            ...     def set_state(self, state): self.n = state["n"]
            >>> ctx = PlanContext()
            >>> old = Tally(); old.n = 3
            >>> ctx.register_checkpointable("tally", old)
            >>> ctx.register_checkpointable("tally", Tally())  # a second one in the plan
            >>> sorted(ctx.checkpointables)
            ['tally', 'tally_2']
            >>> ctx.close()  # the plan is rebuilt: its first tally takes over
            >>> ctx.register_checkpointable("tally", Tally())
            >>> ctx.checkpointables["tally"].n
            3
        """
        taken = self.registered.setdefault(name, [])
        if not any(o is obj for o in taken):
            taken.append(obj)
        place = next(i for i, o in enumerate(taken) if o is obj)
        name = name if place == 0 else f"{name}_{place + 1}"
        previous = self.checkpointables.get(name)
        self.checkpointables[name] = obj
        if name in self.pending_state:
            obj.set_state(self.pending_state.pop(name))
        elif previous is not None and previous is not obj:
            take_over = getattr(obj, "take_over", None)
            if take_over is not None:
                take_over(previous)
            else:
                obj.set_state(previous.get_state())

    def get_state(self) -> dict[str, Any]:
        """Counters and the state of every registered checkpointable."""
        return {
            "counters": dict(self.counters),
            "plan_state": {k: v.get_state() for k, v in self.checkpointables.items()},
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore ``get_state``'s output; the state of an operator that has not
        registered yet waits for it."""
        self.counters.clear()
        self.counters.update(state["counters"])
        for name, plan_state in state["plan_state"].items():
            if name in self.checkpointables:
                self.checkpointables[name].set_state(plan_state)
            else:
                self.pending_state[name] = plan_state

    def timer(self, name: str) -> TimerStat:
        """The timer called ``name``, created on first use."""
        if name not in self.timers:
            self.timers[name] = TimerStat()
        return self.timers[name]

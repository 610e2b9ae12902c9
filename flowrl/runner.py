"""The training loop shared by the CLI and the Python API: stop criteria, logging,
checkpoints, a progress bar, clean Ctrl-C, recovery from dead workers.

Example:
    >>> import tempfile
    >>> from flowrl import Algorithm
    >>> algo = Algorithm("ppo", env="CartPole-v1", num_workers=0)
    >>> summary = run(algo, stop=StopCriteria(iters=2), output_dir=Path(tempfile.mkdtemp()))
    >>> summary["stopped_by"], summary["iterations"]
    ('iterations', 2)
    >>> algo.stop()
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from flowrl.config import Config
from flowrl.context import (
    ENV_STEPS_PER_S,
    EPISODE_RETURN_MEAN,
    ITERATION,
    STEPS_SAMPLED,
    TIME_TOTAL_S,
)
from flowrl.envs import reward_threshold
from flowrl.logger import RunLogger
from flowrl.spec import AlgorithmSpec

logger = logging.getLogger(__name__)

MAX_WORKER_FAILURES = 3


class Trainable(Protocol):
    """What the loop drives: :class:`flowrl.Algorithm` (named here only by its shape, so
    this module, which ``Algorithm.run`` calls, does not import it back)."""

    spec: AlgorithmSpec
    config: Config
    last_result: dict[str, Any] | None

    @property
    def iteration(self) -> int: ...

    def train(self) -> dict[str, Any]: ...

    def rebuild_after_failure(self) -> list[str]: ...

    def save(self, path: Path) -> Path: ...


@dataclass
class StopCriteria:
    """Stop when any criterion is met: mean return, env steps, seconds, iterations."""

    reward: float | None = None
    timesteps: int | None = None
    time_s: float | None = None
    iters: int | None = None

    @classmethod
    def default_for(cls, algo: Trainable) -> StopCriteria:
        """The env's registered reward threshold and the algorithm's default step budget."""
        return cls(
            reward=reward_threshold(algo.config.env),
            timesteps=algo.config.default_stop_timesteps,
        )

    def is_empty(self) -> bool:
        return all(v is None for v in (self.reward, self.timesteps, self.time_s, self.iters))

    def reason(self, result: dict[str, Any]) -> str | None:
        """The name of the first criterion ``result`` meets, or None."""
        ret = result.get(EPISODE_RETURN_MEAN, math.nan)
        if self.reward is not None and math.isfinite(ret) and ret >= self.reward:
            return "reward"
        if self.timesteps is not None and result[STEPS_SAMPLED] >= self.timesteps:
            return "timesteps"
        if self.time_s is not None and result[TIME_TOTAL_S] >= self.time_s:
            return "time"
        if self.iters is not None and result[ITERATION] >= self.iters:
            return "iterations"
        return None


def _progress_bar(stop: StopCriteria, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(
        total=stop.timesteps,
        unit=" steps",
        unit_scale=True,
        disable=not enabled,
        dynamic_ncols=True,
        mininterval=0.5,
    )


def checkpoint_dir(output_dir: Path, iteration: int) -> Path:
    return output_dir / "checkpoints" / f"checkpoint_{iteration:06d}"


def latest_checkpoint(output_dir: Path) -> Path | None:
    found = sorted((output_dir / "checkpoints").glob("checkpoint_*"))
    return found[-1] if found else None


def _train_with_recovery(algo: Trainable, failures: list[int]) -> dict[str, Any]:
    """One ``train()``; a dead rollout worker or replay shard is replaced and the plan
    rebuilt."""
    import ray

    while True:
        try:
            return algo.train()
        except ray.exceptions.RayActorError:
            failures.append(1)
            if len(failures) > MAX_WORKER_FAILURES:
                raise
            replaced = algo.rebuild_after_failure()
            logger.warning("replaced %s; training goes on", ", ".join(replaced) or "nothing")


def run(
    algo: Trainable,
    *,
    stop: StopCriteria | None = None,
    output_dir: Path | None = None,
    checkpoint_every: int = 0,
    progress: bool = False,
) -> dict[str, Any]:
    """Train until a stop criterion holds (default: :meth:`StopCriteria.default_for`).

    With ``output_dir``, writes the run's files and checkpoints (every
    ``checkpoint_every`` iterations, and at the end). Ctrl-C stops cleanly and an error
    re-raises, but both still write the final checkpoint and summary. Returns the summary.
    """
    stop = StopCriteria.default_for(algo) if stop is None or stop.is_empty() else stop
    log = RunLogger(output_dir) if output_dir is not None else None
    bar = _progress_bar(stop, progress)
    best, result, stopped_by = -math.inf, algo.last_result, None
    failures: list[int] = []
    error: Exception | None = None
    try:
        while stopped_by is None:
            result = _train_with_recovery(algo, failures)
            ret = result[EPISODE_RETURN_MEAN]
            best = max(best, ret) if math.isfinite(ret) else best
            if log is not None:
                log.log(result)
                if checkpoint_every and result[ITERATION] % checkpoint_every == 0:
                    algo.save(checkpoint_dir(output_dir, result[ITERATION]))
            bar.update(result[STEPS_SAMPLED] - bar.n)
            bar.set_postfix(ret=f"{ret:.1f}", steps_s=f"{result[ENV_STEPS_PER_S]:.0f}")
            stopped_by = stop.reason(result)
    except KeyboardInterrupt:
        stopped_by = "interrupted"
    except Exception as e:  # keep what was learned, then let the caller see the error
        stopped_by, error = "error", e
    finally:
        bar.close()
    summary = {
        "algo": algo.spec.name,
        "env": algo.config.env,
        "iterations": algo.iteration,
        STEPS_SAMPLED: result[STEPS_SAMPLED] if result else 0,
        TIME_TOTAL_S: result[TIME_TOTAL_S] if result else 0.0,
        EPISODE_RETURN_MEAN: result[EPISODE_RETURN_MEAN] if result else math.nan,
        "best_episode_return_mean": best if math.isfinite(best) else math.nan,
        "stopped_by": stopped_by,
    }
    if log is not None:
        summary["checkpoint"] = str(algo.save(checkpoint_dir(output_dir, algo.iteration)))
        log.write_json("summary.json", summary)
        log.close()
    if error is not None:
        raise error
    return summary

"""Experiences on disk: what a run's workers sample, written as Parquet files, and read back
as the rows of a plan's source.

A recording is a directory: ``manifest.json`` (format version, flowrl version, algorithm,
env, each policy's spaces and column types), ``spaces.pkl`` (the spaces themselves) and,
per policy id, Parquet files of one row per env step an agent acted in: ``obs`` (as the env
gave it: a Dict observation is a struct column, its action mask among its fields),
``next_obs``, ``actions``, ``rewards``, ``terminateds``, ``truncateds``, ``action_logp``
where the policy has a distribution, ``eps_id`` (unique in the recording) and
``agent_id``. Each worker writes its own files, whole: a file is written under a temporary
name and renamed, so an interrupted recording leaves only whole files.

Examples:
    >>> import tempfile
    >>> from flowrl import Algorithm
    >>> out = tempfile.mkdtemp()
    >>> algo = Algorithm("ppo", env="CartPole-v1", num_workers=0, record_experiences=out)
    >>> _ = algo.train(); algo.stop()
    >>> rows = read_experiences(out)["default"]
    >>> sorted(rows.keys())[:4], len(rows) > 0
    (['action_logp', 'actions', 'agent_id', 'eps_id'], True)
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from flowrl.core.config import ConfigError
from flowrl.core.sample_batch import (
    ACTIONS,
    LOGP,
    OBS,
    RAW_OBS,
    REWARDS,
    TERMINATEDS,
    TRUNCATEDS,
    SampleBatch,
)

MANIFEST, SPACES = "manifest.json", "spaces.pkl"
FORMAT, VERSION = "flowrl-experiences", 1
NEXT_OBS, EPS_ID, AGENT_ID = "next_obs", "eps_id", "agent_id"
#: the columns a recording holds for every policy (``action_logp`` where there is one)
COLUMNS = (OBS, NEXT_OBS, ACTIONS, REWARDS, TERMINATEDS, TRUNCATEDS, EPS_ID, AGENT_ID)


def _arrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        message = "recorded experiences need pyarrow: pip install 'flowrl-ray[offline]'"
        raise ConfigError(message) from None
    return pyarrow


def to_arrow(column: np.ndarray) -> Any:
    """A numpy column as an Arrow array: records as structs, ``[n, ...]`` arrays as fixed
    shape tensors, strings and scalars as they are."""
    pa = _arrow()
    if column.dtype.names:
        fields = [to_arrow(np.ascontiguousarray(column[n])) for n in column.dtype.names]
        return pa.StructArray.from_arrays(fields, names=list(column.dtype.names))
    if column.ndim == 1:
        return pa.array(column.tolist() if column.dtype.kind in "OU" else column)
    return pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(column))


def from_arrow(array: Any, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """``to_arrow``'s column back as numpy, given its dtype and the shape of one row."""
    if hasattr(array, "combine_chunks"):
        array = array.combine_chunks()
    if dtype.names:
        out = np.empty((len(array), *shape), dtype)
        for name in dtype.names:
            field = dtype.fields[name][0]
            out[name] = from_arrow(array.field(name), field.base, field.shape)
        return out
    if shape:
        return array.to_numpy_ndarray().astype(dtype, copy=False)
    if dtype.kind in "OU":
        return np.array(array.to_pylist(), dtype)
    return array.to_numpy(zero_copy_only=False).astype(dtype, copy=False)


def _column_types(rows: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    return {
        k: {"dtype": np.lib.format.dtype_to_descr(v.dtype), "shape": list(v.shape[1:])}
        for k, v in rows.items()
    }


def _flowrl_version() -> str:
    try:
        return importlib.metadata.version("flowrl-ray")
    except importlib.metadata.PackageNotFoundError:  # a checkout that is not installed
        return "unknown"


def _replace_atomically(path: Path, write: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


class ExperienceWriter:
    """One worker's recording: ``record`` takes a policy's sampled steps (time-major, with
    ``valid``), keeps the valid ones with their episode ids, and writes a file per policy
    once ``rows_per_file`` rows are held (``close`` writes the rest).

    Examples:
        >>> writer = ExperienceWriter(out, worker_index=1, spaces=spaces, meta={})  # doctest: +SKIP
        >>> writer.record("default", columns, valid, last_obs, logp)  # doctest: +SKIP
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        worker_index: int,
        spaces: dict[str, tuple[Any, Any]],
        meta: dict[str, Any],
        rows_per_file: int = 20_000,
    ) -> None:
        self.directory, self.worker_index = Path(directory), worker_index
        self.spaces, self.meta, self.rows_per_file = spaces, meta, rows_per_file
        self._held: dict[str, list[dict[str, np.ndarray]]] = {}
        self._episode: dict[str, np.ndarray] = {}  # each lane's running episode serial
        # a recording goes on after this worker's files already there (a resumed run's)
        self._files, self._serials = _continued(self.directory, worker_index)
        self._types: dict[str, dict[str, Any]] = {}

    def _episode_ids(self, pid: str, done: np.ndarray) -> np.ndarray:
        """Each step's episode id: a lane's steps after an episode's end start a new one."""
        lanes = done.shape[1]
        if pid not in self._episode:
            self._episode[pid] = self._serials + np.arange(lanes)
            self._serials += lanes
        ends = done.sum(axis=0)
        first_new = self._serials + np.cumsum(ends) - ends  # lane i's new serials start here
        self._serials += int(ends.sum())
        before = np.cumsum(done, axis=0) - done  # ends before each step, per lane
        serial = np.where(before == 0, self._episode[pid], first_new + before - 1)
        self._episode[pid] = np.where(ends > 0, first_new + ends - 1, self._episode[pid])
        return (self.worker_index << 40) + serial

    def record(
        self,
        pid: str,
        columns: dict[str, np.ndarray],
        valid: np.ndarray,
        last_obs: np.ndarray,
        logp: np.ndarray | None,
        agents: list[str],
    ) -> None:
        """A policy's ``[T, lanes]`` steps (``columns`` as sampled: raw observations in
        ``raw_obs`` when the policy normalises; actions in the env's units, the policy's
        ``action_array``), of which the ``valid`` ones are kept."""
        obs = columns.get(RAW_OBS, columns[OBS])
        done = (columns[TERMINATEDS] | columns[TRUNCATEDS]) & valid
        steps = {
            OBS: obs,
            NEXT_OBS: np.concatenate([obs[1:], np.asarray(last_obs)[None]]),
            **{k: columns[k] for k in (ACTIONS, REWARDS, TERMINATEDS, TRUNCATEDS)},
            EPS_ID: self._episode_ids(pid, done),
            AGENT_ID: np.broadcast_to(np.array(agents, dtype=object), valid.shape),
        }
        if logp is not None:
            steps[LOGP] = logp
        lane_major = valid.T  # a lane's steps together, in time order
        rows = {k: np.swapaxes(v, 0, 1)[lane_major] for k, v in steps.items()}
        self._held.setdefault(pid, []).append(rows)
        if sum(len(r[OBS]) for r in self._held[pid]) >= self.rows_per_file:
            self._write(pid)

    def _write(self, pid: str) -> None:
        pa = _arrow()
        parts = self._held.pop(pid, [])
        if not parts:
            return
        rows = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        self._types.setdefault(pid, _column_types(rows))
        table = pa.table({k: to_arrow(v) for k, v in rows.items()})
        folder = self.directory / pid
        folder.mkdir(parents=True, exist_ok=True)
        name = f"worker-{self.worker_index:03d}-{self._files:05d}.parquet"
        _replace_atomically(folder / name, lambda p: pa.parquet.write_table(table, p))
        self._files += 1
        self._write_manifest()

    def _write_manifest(self) -> None:
        policies = {
            pid: {
                "observation_space": repr(obs),
                "action_space": repr(act),
                "columns": self._types.get(pid, {}),
            }
            for pid, (obs, act) in self.spaces.items()
        }
        manifest = {"format": FORMAT, "version": VERSION, "flowrl": _flowrl_version(),
                    **self.meta, "policies": policies}  # fmt: skip
        self.directory.mkdir(parents=True, exist_ok=True)
        _replace_atomically(self.directory / SPACES,
                            lambda p: p.write_bytes(pickle.dumps(self.spaces)))  # fmt: skip
        path = self.directory / MANIFEST
        if path.exists():  # another worker's: keep the column types it knows
            known = json.loads(path.read_text())["policies"]
            for pid, entry in policies.items():
                entry["columns"] = entry["columns"] or known.get(pid, {}).get("columns", {})
        _replace_atomically(path, lambda p: p.write_text(json.dumps(manifest, indent=1)))

    def close(self) -> None:
        """Write the rows still held."""
        for pid in list(self._held):
            self._write(pid)


def _continued(directory: Path, worker_index: int) -> tuple[int, int]:
    """The next file index and episode serial of worker ``worker_index``'s recording in
    ``directory``: after those of its files already there (a resumed run's first part,
    which the files of the second were written over), else 0 and 0."""
    files = list(directory.glob(f"*/worker-{worker_index:03d}-*.parquet"))
    if not files:
        return 0, 0
    pq = _arrow().parquet
    last = max(int(np.max(pq.read_table(f, columns=[EPS_ID])[EPS_ID].to_numpy())) for f in files)
    next_file = 1 + max(int(f.stem.rsplit("-", 1)[1]) for f in files)
    return next_file, last - (worker_index << 40) + 1


def spaces_of(lanes: Any) -> dict[str, tuple[Any, Any]]:
    """Lanes' (observation, action) spaces by policy id: what a recording holds and what
    reading one checks against."""
    return {pid: (lanes.observation_spaces[pid], lanes.action_spaces[pid])
            for pid in lanes.policy_ids}  # fmt: skip


def experience_writer(config: Any, lanes: Any, worker_index: int) -> ExperienceWriter | None:
    """Where a worker records what it samples (``config.record_experiences``), if anywhere:
    the local worker of a run with remote workers samples nothing, so records nothing. A
    recording goes on only with its own env and spaces (the local worker checks, first)."""
    if not config.record_experiences:
        return None
    spaces, directory = spaces_of(lanes), Path(config.record_experiences)
    if worker_index == 0 and (directory / MANIFEST).exists():
        manifest, recorded = read_manifest(directory)
        if manifest.get("env") != config.env:
            raise ConfigError(f"recording {directory} holds env {manifest.get('env')}'s "
                              f"experiences, not {config.env}'s: record elsewhere")  # fmt: skip
        check_spaces(directory, recorded, spaces)
    if worker_index == 0 and config.num_workers > 0:
        return None
    meta = {"algorithm": config.algo_name, "env": config.env}
    return ExperienceWriter(config.record_experiences, worker_index=worker_index,
                            spaces=spaces, meta=meta)  # fmt: skip


def read_manifest(directory: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A recording's manifest and spaces (by policy id), or a ConfigError naming what is
    missing or wrong."""
    path = Path(directory)
    if not (path / MANIFEST).is_file():
        raise ConfigError(f"{path} is not a recording of experiences (no {MANIFEST})")
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        spaces = pickle.loads((path / SPACES).read_bytes())
    except (OSError, ValueError, pickle.UnpicklingError, EOFError) as e:
        raise ConfigError(f"damaged recording {path}: {type(e).__name__}: {e}") from None
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise ConfigError(f"{path}: not a recording this flowrl reads (format {FORMAT} v{VERSION})")
    return manifest, spaces


def check_spaces(directory: Any, recorded: dict, spaces: dict | None) -> None:
    """A ConfigError when a recording's spaces (by policy id) differ from ``spaces``."""
    for pid, expected in (spaces or {}).items():
        if pid in recorded and tuple(recorded[pid]) != tuple(expected):
            raise ConfigError(
                f"recording {directory} has policy {pid}'s spaces {recorded[pid]}, "
                f"the env {tuple(expected)}"
            )


def _check_finite(directory: Any, pid: str, rows: SampleBatch) -> None:
    """A ConfigError naming the first column of ``rows`` that holds NaN or infinity."""
    for name, column in rows.items():
        leaves = [column[f] for f in column.dtype.names] if column.dtype.names else [column]
        for leaf in leaves:
            if leaf.dtype.kind == "f" and not np.isfinite(leaf).all():
                bad = int((~np.isfinite(leaf)).reshape(len(leaf), -1).any(axis=1).sum())
                raise ConfigError(
                    f"recording {directory}: policy {pid}'s {name} is not finite in {bad} rows"
                )


def _column(table: Any, name: str, kind: dict[str, Any]) -> np.ndarray:
    dtype = np.lib.format.descr_to_dtype(kind["dtype"])
    return from_arrow(table.column(name), dtype, tuple(kind["shape"]))


def read_experiences(
    directory: str | os.PathLike[str], *, spaces: dict[str, tuple[Any, Any]] | None = None
) -> dict[str, SampleBatch]:
    """Every row of a recording, by policy id, as numpy columns; a ConfigError for a
    missing, damaged or empty recording, or one whose spaces differ from ``spaces`` (by
    policy id: observation and action space, an env's)."""
    pa = _arrow()
    manifest, recorded = read_manifest(directory)
    check_spaces(directory, recorded, spaces)
    out = {}
    for pid, entry in manifest["policies"].items():
        files = sorted((Path(directory) / pid).glob("*.parquet"))
        if not files or not entry["columns"]:
            continue
        try:
            table = pa.concat_tables([pa.parquet.read_table(f) for f in files])
        except (OSError, pa.ArrowException) as e:
            raise ConfigError(f"damaged recording {directory}: {e}") from None
        out[pid] = SampleBatch({k: _column(table, k, t) for k, t in entry["columns"].items()})
        _check_finite(directory, pid, out[pid])
    if not out:
        raise ConfigError(f"recording {directory} holds no experiences")
    return out


def stream_experiences(
    directory: str | os.PathLike[str],
    *,
    batch_size: int,
    seed: int = 0,
    spaces: dict[str, tuple[Any, Any]] | None = None,
    shuffle_rows: int = 50_000,
) -> Iterator[dict[str, SampleBatch]]:
    """``batch_size`` rows of each policy at a time, streamed from a recording through Ray
    Data without holding it in memory: Ray tasks read the files (on any node of the
    cluster; Ray starts here if it is not running), in a new order each pass, and rows are
    shuffled within a buffer of ``shuffle_rows``. A pass ends with the policy that has the
    fewest rows. Checks the spaces first and each batch's finiteness as it comes."""
    import ray.data

    manifest, recorded = read_manifest(directory)
    check_spaces(directory, recorded, spaces)
    kinds = {pid: {k: t for k, t in entry["columns"].items() if t["dtype"] != "|O"}
             for pid, entry in manifest["policies"].items() if entry["columns"]}  # fmt: skip
    files = {
        pid: sorted(str(f) for f in (Path(directory) / pid).glob("*.parquet")) for pid in kinds
    }
    if not kinds or not all(files.values()):
        raise ConfigError(f"recording {directory} holds no experiences")
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)  # a line per pass otherwise
    rng = np.random.default_rng(seed)
    while True:  # one pass over the recording per round
        passes = []
        for pid, names in files.items():
            order = [names[i] for i in rng.permutation(len(names))]
            data = ray.data.read_parquet(order, columns=list(kinds[pid]))
            passes.append(data.iter_batches(batch_size=batch_size, batch_format="pyarrow",
                                            local_shuffle_buffer_size=shuffle_rows,
                                            local_shuffle_seed=int(rng.integers(2**31)),
                                            drop_last=True))  # fmt: skip
        for tables in zip(*passes, strict=False):
            batch = {}
            for (pid, kind), table in zip(kinds.items(), tables, strict=True):
                batch[pid] = SampleBatch({k: _column(table, k, t) for k, t in kind.items()})
                _check_finite(directory, pid, batch[pid])
            yield batch

"""Checkpoints on disk: whole or absent, and safe to load from someone else.

A checkpoint is a directory holding ``checkpoint.json`` (algorithm, config, iteration and
counters, as JSON) and ``algorithm_state.pt`` (weights, optimiser state, replay rows: only
tensors and plain containers, read with ``torch.load(weights_only=True)``, so loading runs
no code from the file; numpy arrays travel as tensors). ``write`` fills a hidden
temporary directory and renames it into place, so a kill at any moment leaves the old
checkpoints and either all of the new one or none of it. ``latest`` takes the newest
checkpoint of a run that loads, and says which newer ones it skipped and why. Torch is
imported where a checkpoint is written or read, not with this module: the command's
``--help`` and usage errors, which import it, answer without loading torch.

Examples:
    >>> import tempfile
    >>> run_dir = Path(tempfile.mkdtemp())
    >>> meta = {"algo": "ppo", "config": {}, "iteration": 3}
    >>> path = write(checkpoint_dir(run_dir, 3), {"w": np.ones(2)}, meta)
    >>> ckpt = latest(run_dir)
    >>> ckpt.meta["iteration"], ckpt.state["w"].tolist(), ckpt.skipped
    (3, [1.0, 1.0], [])
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flowrl.core.config import ConfigError
from flowrl.core.sample_batch import SINGLE

#: The layout of what a checkpoint holds; a checkpoint of another version does not load.
#: 2: the policy's weights and the learner's state apart (optimisers, targets, critics).
FORMAT_VERSION = 2
STATE_FILE = "algorithm_state.pt"
META_FILE = "checkpoint.json"
_ARRAY = "__ndarray__"  # marks a numpy array stored as a tensor


class CheckpointError(ConfigError):
    """A checkpoint that is missing, damaged or does not fit the algorithm."""


class CheckpointWriteError(OSError):
    """A checkpoint that could not be written (a full disk): nothing of it is left."""


@dataclass
class Checkpoint:
    """A loaded checkpoint: where it is, its JSON metadata and its state; ``skipped``
    names newer checkpoints of the run that did not load, with the reason."""

    path: Path
    meta: dict[str, Any]
    state: dict[str, Any]
    skipped: list[str] = field(default_factory=list)


#: A run's checkpoint of its best evaluation, beside the ``checkpoint_NNNNNN`` ones.
BEST = "best"


def checkpoint_dir(run_dir: Path, iteration: int) -> Path:
    """Where a run keeps the checkpoint of ``iteration``."""
    return Path(run_dir) / "checkpoints" / f"checkpoint_{iteration:06d}"


def _encode(value: Any) -> Any:
    """Plain containers, numbers, strings and tensors only: arrays become tagged tensors,
    numpy scalars Python numbers."""
    if isinstance(value, np.ndarray):
        import torch

        # ascontiguousarray makes 0-d arrays 1-d: keep the shape
        return {_ARRAY: torch.from_numpy(np.ascontiguousarray(value).reshape(value.shape))}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):  # a named tuple as a plain one
        kind = tuple if hasattr(value, "_fields") else type(value)
        return kind(_encode(v) for v in value)
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {_ARRAY}:
            return value[_ARRAY].numpy()
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_decode(v) for v in value)
    return value


def error_reason(error: BaseException) -> str:
    """An error's message cut to its first sentence (torch's run on for lines; a heading
    that ends in ":" keeps the line after it), or its type when it has none.

    Examples:
        >>> error_reason(RuntimeError("Error(s) in loading:\\n\\tsize mismatch for w. More"))
        'Error(s) in loading: size mismatch for w'
    """
    text = str(error).strip()
    if not text:
        return type(error).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = " ".join(lines[:2]) if lines[0].endswith(":") and len(lines) > 1 else lines[0]
    return first.split(". ")[0][:200]


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def write(path: str | os.PathLike[str], state: dict[str, Any], meta: dict[str, Any]) -> Path:
    """Write a checkpoint directory atomically (a previous one at ``path`` is replaced);
    returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(path.parent)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    import torch

    try:
        tmp.mkdir()
        torch.save(_encode(state), tmp / STATE_FILE)
        meta = {**meta, "format_version": FORMAT_VERSION}
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        for name in (STATE_FILE, META_FILE):
            _fsync_file(tmp / name)
    except (OSError, RuntimeError) as e:  # torch.save's file errors are RuntimeErrors
        shutil.rmtree(tmp, ignore_errors=True)  # a full disk keeps nothing of it
        free = shutil.disk_usage(path.parent).free / 2**20
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointWriteError(
            f"checkpoint {path} not written ({free:,.0f} MB free there): {reason}"
        ) from e
    if path.exists():
        old = path.parent / f".{path.name}.old-{os.getpid()}"
        path.rename(old)
        tmp.rename(path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(path)
    return path


def remove_leftovers(directory: Path) -> list[Path]:
    """Remove the half-written checkpoints in ``directory`` (``.NAME.tmp-PID``, and
    ``.NAME.old-PID`` where ``NAME`` was written) whose writing process is gone: a kill or
    a full disk mid-write left them. Returns what it removed."""
    removed = []
    for left in [*directory.glob(".*.tmp-*"), *directory.glob(".*.old-*")]:
        name, pid = left.name[1:].rsplit(".", 1)[0], left.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        if ".old-" in left.name and not (directory / name).exists():
            left.rename(directory / name)  # killed between the two renames: it is the one
        else:
            shutil.rmtree(left, ignore_errors=True)
            removed.append(left)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this process writes one checkpoint at a time: what it left is done
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A checkpoint's JSON metadata, or a CheckpointError that names what is wrong."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint not found: {path}")
    meta_path, state_path = path / META_FILE, path / STATE_FILE
    if not meta_path.is_file() or not state_path.is_file():
        raise CheckpointError(f"not a flowrl checkpoint (no {META_FILE} / {STATE_FILE}): {path}")
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"damaged checkpoint {path}: {META_FILE}: {e}") from None
    if not isinstance(meta, dict) or not {"algo", "config"} <= set(meta):
        raise CheckpointError(f"damaged checkpoint {path}: {META_FILE} lacks algo and config")
    version = meta.get("format_version", 1)  # version 1 did not say
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {path} has format version {version}, but this flowrl reads version "
            f"{FORMAT_VERSION}: load it with the flowrl release that wrote it, or train anew"
        )
    return meta


def load(path: str | os.PathLike[str]) -> Checkpoint:
    """Read one checkpoint directory; a CheckpointError names what is missing or damaged."""
    path = Path(path)
    meta = read_meta(path)
    import torch

    try:
        state = torch.load(path / STATE_FILE, weights_only=True, map_location="cpu")
    except Exception as e:  # torch reports damage as several exception types
        reason = error_reason(e)
        raise CheckpointError(f"damaged checkpoint {path}: {STATE_FILE}: {reason}") from None
    return Checkpoint(path, meta, _by_policy(_decode(state)))


def _by_policy(state: dict[str, Any]) -> dict[str, Any]:
    """The policy and learner state by policy id: a single-agent checkpoint written before
    every run kept them so holds them flat, as the one policy's."""
    for part, marker in (("policy", "weights"), ("learner", "optimizers")):
        if marker in state.get(part, {}):
            state[part] = {SINGLE: state[part]}
    return state


def latest(run_dir: str | os.PathLike[str]) -> Checkpoint:
    """The newest checkpoint of a run that loads (``skipped`` lists the newer ones that
    did not, with the reason); a CheckpointError when none does. A trial of ``flowrl
    tune`` is a run too: its directory (or its run files', ``TRIAL/flowrl``) holds Tune's
    ``checkpoint_NNNNNN``, each with the flowrl checkpoint in ``flowrl``."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise CheckpointError(f"run directory not found: {run_dir}")
    if not run_dir.is_dir():
        raise CheckpointError(f"{run_dir} is a file, not a run directory")
    found = sorted((run_dir / "checkpoints").glob("checkpoint_*"), reverse=True)
    if not found:
        trial = run_dir.parent if run_dir.name == "flowrl" else run_dir
        found = sorted(trial.glob("checkpoint_*/flowrl"), reverse=True)
    skipped = []
    for path in found:
        try:
            ckpt = load(path)
        except CheckpointError as e:
            skipped.append(str(e))
            continue
        ckpt.skipped = skipped
        return ckpt
    if not skipped:
        raise CheckpointError(f"no checkpoint in {run_dir / 'checkpoints'}")
    raise CheckpointError(f"no checkpoint of {run_dir} loads; the newest: {skipped[0]}")


def resolve(path: str | os.PathLike[str]) -> Checkpoint:
    """A checkpoint directory, or the newest loadable checkpoint of a run directory."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint not found: {path}")
    if not path.is_dir():
        raise CheckpointError(f"{path} is a file, not a checkpoint or run directory")
    if (path / META_FILE).exists() or (path / STATE_FILE).exists():
        return load(path)
    return latest(path)

"""Composite spaces in the data path: the samples of a Dict or Tuple space as one numpy
record array.

A Dict or Tuple observation (or action) is one column of a fragment, a batch or a replay
buffer like any other: a numpy record array with one field per leaf, nested as the space
is (a Tuple's fields are named ``"0"``, ``"1"``, ...). Everything that moves rows (slicing,
concatenation, replay, sequences, Ray's object store, checkpoints) carries it as it is.
Torch has no record type, so a batch of records goes to torch as its bytes
(``[..., itemsize]`` uint8) and ``RecordLayout.unpack_tensor`` reads each leaf out as
a view of them; the fields are aligned, so no leaf is copied. Torch is imported by those
conversions only: a rollout worker that acts in numpy never loads it.

Examples:
    >>> space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,)), "n": gym.spaces.Discrete(3)})
    >>> layout = RecordLayout(space)
    >>> records = layout.pack({"pos": np.ones((4, 2), np.float32), "n": np.arange(4) % 3})
    >>> records.shape, layout.unpack(records)["n"].tolist()
    ((4,), [0, 1, 2, 0])
    >>> nest = layout.unpack_tensor(records_tensor(records))
    >>> nest["pos"].shape, nest["n"].dtype
    (torch.Size([4, 2]), torch.int64)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from flowrl.core.config import ConfigError

if TYPE_CHECKING:
    import torch

Path = tuple[str, ...]

#: the observation entry that masks invalid actions (PettingZoo's and SB3-contrib's name)
ACTION_MASK = "action_mask"


def is_composite(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Dict | gym.spaces.Tuple)


def children(space: gym.Space) -> list[tuple[str, gym.Space]]:
    """A Dict's or Tuple's entries as (field name, space)."""
    if isinstance(space, gym.spaces.Dict):
        return list(space.spaces.items())
    return [(str(i), s) for i, s in enumerate(space.spaces)]


def leaf_spaces(space: gym.Space, path: Path = ()) -> list[tuple[Path, gym.Space]]:
    """The leaves of a composite space, in order, with their paths."""
    out = []
    for name, child in children(space):
        if is_composite(child):
            out.extend(leaf_spaces(child, (*path, name)))
        else:
            out.append(((*path, name), child))
    return out


def space_parts(space: gym.Space) -> list[tuple[Path, gym.Space]]:
    """A space's parts as (path in its records, space): a Tuple's or Dict's leaves
    (``leaf_spaces``), or the space itself at ``()``."""
    return leaf_spaces(space) if is_composite(space) else [((), space)]


def record_dtype(space: gym.Space) -> np.dtype:
    """The aligned numpy record type of one sample of ``space``."""
    fields = []
    for name, child in children(space):
        if is_composite(child):
            fields.append((name, record_dtype(child)))
        else:
            fields.append((name, child.dtype, child.shape))
    return np.dtype(fields, align=True)


@dataclass(frozen=True)
class Leaf:
    """One leaf of a composite space: where it lies in a record, and what it holds."""

    path: Path
    space: gym.Space
    offset: int
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def name(self) -> str:
        return ".".join(self.path)

    @property
    def nbytes(self) -> int:
        return int(self.dtype.itemsize * np.prod(self.shape, dtype=np.int64))


def _leaves(space: gym.Space, dtype: np.dtype) -> list[Leaf]:
    """The leaves of ``space`` with their offsets in a record of ``dtype``."""
    leaves = []
    for path, child in leaf_spaces(space):
        offset, record = 0, dtype
        for name in path:
            record, at = record.fields[name][:2]
            offset += at
        leaves.append(Leaf(path, child, offset, np.dtype(child.dtype), tuple(child.shape)))
    return leaves


def records_tensor(records: np.ndarray) -> torch.Tensor:
    """A record array ``[...]`` as torch bytes ``[..., itemsize]`` (no copy)."""
    import torch

    flat = np.ascontiguousarray(records).reshape(-1).view(np.uint8)
    return torch.from_numpy(flat).view(*records.shape, records.dtype.itemsize)


def to_tensor(array: np.ndarray) -> torch.Tensor:
    """A data-path column as a tensor without a copy: records as their bytes."""
    import torch

    return records_tensor(array) if array.dtype.names else torch.from_numpy(array)


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    import torch

    return torch.from_numpy(np.empty(0, dtype)).dtype


def _check_whole(values: Any, stored: np.ndarray, path: tuple) -> None:
    """A ValueError when float ``values`` lost their fractions on the way into the integer
    field ``stored`` (an env's 0.5 in an int8 action mask would read as 0)."""
    if not np.array_equal(np.asarray(values), stored):
        bad = np.asarray(values)[np.asarray(values) != stored].flat[0].item()
        name = "/".join(map(str, path))
        raise ValueError(
            f"the observation's {name} holds {bad!r}, which its space's {stored.dtype} cannot hold"
        )


def _put(target: np.ndarray, values: Any, leaf: Leaf) -> None:
    """``values`` into a leaf's field; a ValueError names the leaf when their shape is not
    the one its space declares (an action mask one entry short, say)."""
    try:
        target[...] = values
    except (ValueError, TypeError):
        shape = np.shape(values)[len(np.shape(values)) - len(leaf.shape) :]
        if shape == leaf.shape:
            raise
        raise ValueError(
            f"the observation's {leaf.name} has shape {np.shape(values)}, where its space "
            f"declares {leaf.shape} per step"
        ) from None


class RecordLayout:
    """How the samples of a composite ``space`` lie in a record array, with the conversions
    between the two: nests of arrays (what gymnasium's vector envs return) to records and
    back, and records' bytes to nests of tensors."""

    def __init__(self, space: gym.Space) -> None:
        if not is_composite(space):
            raise TypeError(f"a record layout is for Dict and Tuple spaces, got {space}")
        self.space = space
        self.dtype = record_dtype(space)
        self.leaves = _leaves(space, self.dtype)

    @cached_property
    def _torch_dtypes(self) -> list[torch.dtype]:
        return [_torch_dtype(leaf.dtype) for leaf in self.leaves]

    def empty(self, shape: tuple[int, ...]) -> np.ndarray:
        return np.zeros(shape, self.dtype)

    def pack(self, nest: Any, out: np.ndarray | None = None) -> np.ndarray:
        """A batched nest (dicts and tuples of arrays ``[B, ...]``) as records ``[B]``."""
        if out is None:
            out = self.empty((len(get(nest, self.leaves[0].path)),))
        for leaf in self.leaves:
            values, target = get(nest, leaf.path), field(out, leaf.path)
            _put(target, values, leaf)
            if np.asarray(values).dtype.kind == "f" and target.dtype.kind in "iub":
                _check_whole(values, target, leaf.path)
        return out

    def pack_one(self, sample: Any) -> np.ndarray:
        """One sample of the space (its nest, no batch axis) as records ``[1]``."""
        out = self.empty((1,))
        for leaf in self.leaves:
            _put(field(out, leaf.path)[0], get(sample, leaf.path), leaf)
        return out

    def stack(self, samples: list[Any]) -> Any:
        """Samples of the space as one batched nest."""
        return self.build([np.stack([get(s, leaf.path) for s in samples]) for leaf in self.leaves])

    def unpack(self, records: np.ndarray) -> Any:
        """Records ``[...]`` as the space's nest of arrays (views of the records' fields)."""
        return self.build([field(records, leaf.path) for leaf in self.leaves])

    def unpack_tensor(self, data: torch.Tensor) -> Any:
        """Records' bytes ``[..., itemsize]`` as the space's nest of tensors (views)."""
        return self.build(self.leaf_tensors(data))

    def leaf_tensors(self, data: torch.Tensor) -> list[torch.Tensor]:
        """Records' bytes ``[..., itemsize]`` as one tensor per leaf (views), in order."""
        values = []
        for leaf, dtype in zip(self.leaves, self._torch_dtypes, strict=True):
            value = data[..., leaf.offset : leaf.offset + leaf.nbytes].view(dtype)
            values.append(value.unflatten(-1, leaf.shape) if leaf.shape else value.squeeze(-1))
        return values

    def pack_tensor(self, values: list[torch.Tensor]) -> torch.Tensor:
        """One tensor per leaf (``[B, ...]``, in order) as records' bytes ``[B, itemsize]``."""
        import torch

        batch = values[0].shape[0]
        out = torch.zeros(batch, self.dtype.itemsize, dtype=torch.uint8, device=values[0].device)
        for leaf, dtype, value in zip(self.leaves, self._torch_dtypes, values, strict=True):
            part = out[:, leaf.offset : leaf.offset + leaf.nbytes].view(dtype)
            part.copy_(value.reshape(batch, -1))
        return out

    def as_records(self, data: np.ndarray) -> np.ndarray:
        """Records' bytes ``[B, itemsize]`` (numpy) as records ``[B]`` (no copy)."""
        return np.ascontiguousarray(data).view(self.dtype).reshape(len(data))

    def build(self, values: list[Any]) -> Any:
        """The space's nest with ``values`` at its leaves, in ``leaves`` order."""
        it = iter(values)
        return _build(self.space, it)


def _build(space: gym.Space, values: Iterator[Any]) -> Any:
    out = {}
    for name, child in children(space):
        out[name] = _build(child, values) if is_composite(child) else next(values)
    return tuple(out.values()) if isinstance(space, gym.spaces.Tuple) else out


def float_columns(array: np.ndarray) -> list[np.ndarray]:
    """The floating-point parts of a column: itself, or a record array's float leaves."""
    if not array.dtype.names:
        return [array] if np.issubdtype(array.dtype, np.floating) else []
    return [part for name in array.dtype.names for part in float_columns(array[name])]


def get(nest: Any, path: Path) -> Any:
    """The value at ``path`` of a nest of dicts and tuples."""
    for name in path:
        nest = nest[int(name)] if isinstance(nest, tuple | list) else nest[name]
    return nest


def field(records: np.ndarray, path: Path) -> np.ndarray:
    for name in path:
        records = records[name]
    return records


OBS_SPACES = "Box, Discrete, MultiDiscrete, MultiBinary, and Dict or Tuple of them"


def check_obs_space(space: gym.Space) -> None:
    """A ConfigError naming ``space`` unless flowrl's networks take it (every leaf of a
    Dict or Tuple, nested as deep as it likes)."""
    bad = unsupported_obs_leaf(space)
    if bad is not None:
        where = "" if bad[1] is space else f" (in {space})"
        raise ConfigError(
            f"unsupported observation space {bad[1]}{where}: flowrl's networks take "
            f"{OBS_SPACES} observations"
        )


def unsupported_obs_leaf(space: gym.Space) -> tuple[Path, gym.Space] | None:
    """The first leaf of ``space`` (its path, empty for ``space`` itself) that flowrl's
    networks cannot take, or None.

    Examples:
        >>> unsupported_obs_leaf(gym.spaces.Dict({"a": gym.spaces.Discrete(2),
        ...                                       "b": gym.spaces.Text(8)}))
        (('b',), Text(1, 8, charset=...))
    """
    for path, leaf in space_parts(space):
        flat = isinstance(leaf, gym.spaces.MultiDiscrete | gym.spaces.MultiBinary)
        if not (
            isinstance(leaf, gym.spaces.Box | gym.spaces.Discrete)
            or (flat and len(leaf.shape) == 1)
        ):
            return path, leaf
    return None


ACTION_SPACES = "Discrete, MultiDiscrete, MultiBinary, 1-D Box, and Tuple or Dict of them"


def action_kind(space: gym.Space) -> str:
    """The kind of distribution a non-composite action space takes (``categorical``,
    ``multi_categorical``, ``bernoulli`` or ``gaussian``), or a ConfigError naming it.

    Examples:
        >>> action_kind(gym.spaces.Box(-1, 1, (2,)))
        'gaussian'
    """
    if isinstance(space, gym.spaces.Discrete):
        return "categorical"
    if isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1:
        return "multi_categorical"
    if isinstance(space, gym.spaces.MultiBinary) and np.ndim(space.n) == 0:
        return "bernoulli"
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
        return "gaussian"
    raise ConfigError(f"unsupported action space {space}: flowrl takes {ACTION_SPACES} actions")


def check_action_space(space: gym.Space) -> None:
    """A ConfigError naming ``space`` unless flowrl's distributions take it (every leaf of
    a Dict or Tuple)."""
    for _, leaf in space_parts(space):
        action_kind(leaf)

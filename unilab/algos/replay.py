"""Ring replay buffer that lives on the learner's device.

Writes are driven by host-side Python ints (the chunk size of every write is known on the host), so
`extend` never waits on the GPU. Sampling reads the fill level (and the write position) from device
scalars, so a CUDA graph that samples keeps seeing the current ones on every replay.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

Spec = Mapping[str, tuple[tuple[int, ...], torch.dtype]]

# Indices are drawn as uniform 62-bit integers modulo the fill level: always in range, with a bias
# below size / 2**62, and no host value involved.
_INDEX_RANGE = 2**62


class ReplayBuffer:
    def __init__(self, capacity: int, spec: Spec, device: torch.device | str):
        if capacity <= 0:
            raise ValueError(f"replay capacity must be positive, got {capacity}")
        self.capacity = int(capacity)
        self.device = torch.device(device)
        self.spec = {key: _check_field_spec(key, shape, dtype) for key, (shape, dtype) in spec.items()}
        self.storage = {
            key: torch.zeros((self.capacity, *shape), dtype=dtype, device=self.device)
            for key, (shape, dtype) in self.spec.items()
        }
        self.ptr = 0
        self.size = 0
        self.size_tensor = torch.zeros((), dtype=torch.int64, device=self.device)
        self.ptr_tensor = torch.zeros((), dtype=torch.int64, device=self.device)  # the next row written

    def __len__(self) -> int:
        return self.size

    def extend(self, batch: Mapping[str, Tensor]) -> None:
        n = self._check(batch)
        if n == 0:
            return
        if n > self.capacity:  # only the newest `capacity` rows can survive anyway
            batch = {key: value[n - self.capacity :] for key, value in batch.items()}
            n = self.capacity
        first = min(n, self.capacity - self.ptr)
        rest = n - first
        for key, value in batch.items():
            dst = self.storage[key]
            dst[self.ptr : self.ptr + first].copy_(value[:first])
            if rest:
                dst[:rest].copy_(value[first:])
        self.ptr = (self.ptr + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        self.size_tensor.fill_(self.size)
        self.ptr_tensor.fill_(self.ptr)

    def clear(self) -> None:
        """Empty, as new: every row zero, nothing stored."""
        for buf in self.storage.values():
            buf.zero_()
        self.ptr = self.size = 0
        self.size_tensor.zero_()
        self.ptr_tensor.zero_()

    def sample_indices(self, batch_size: int) -> Tensor:
        draws = torch.randint(0, _INDEX_RANGE, (batch_size,), device=self.device)
        return torch.remainder(draws, self.size_tensor)

    def sample(self, batch_size: int) -> dict[str, Tensor]:
        """Uniform sample over the filled rows; safe inside CUDA graph capture (no host values)."""
        return gather_rows(self.storage, self.sample_indices(batch_size))

    def sample_into(self, out: Mapping[str, Tensor], batch_size: int) -> None:
        idx = self.sample_indices(batch_size)
        for key, buf in self.storage.items():
            torch.index_select(buf, 0, idx, out=out[key])

    def _check(self, batch: Mapping[str, Tensor]) -> int:
        missing = self.spec.keys() - batch.keys()
        extra = batch.keys() - self.spec.keys()
        if missing or extra:
            raise ValueError(f"replay batch keys mismatch: missing {sorted(missing)}, unexpected {sorted(extra)}")
        n = None
        for key, (shape, dtype) in self.spec.items():
            value = batch[key]
            if tuple(value.shape[1:]) != shape or value.dim() != len(shape) + 1:
                expected = "(n" + "".join(f", {d}" for d in shape) + ")"
                raise ValueError(f"replay field {key!r}: expected shape {expected}, got {tuple(value.shape)}")
            if value.dtype != dtype:
                raise TypeError(f"replay field {key!r}: expected dtype {dtype}, got {value.dtype}")
            if n is None:
                n = value.shape[0]
            elif value.shape[0] != n:
                raise ValueError(f"replay field {key!r} has {value.shape[0]} rows, other fields have {n}")
        return int(n or 0)


def gather_rows(storage: Mapping[str, Tensor], idx: Tensor, keys: tuple[str, ...] | None = None) -> dict[str, Tensor]:
    """Rows `idx` of the fields `keys` (default: all). Learners call it inside their compiled losses:
    inductor then reads each field by index in the kernels that consume it, so a sampled batch costs no
    gather kernels of its own (seven per gradient step otherwise)."""
    return {key: torch.index_select(storage[key], 0, idx) for key in (keys or storage)}


def _check_field_spec(key: str, shape, dtype) -> tuple[tuple[int, ...], torch.dtype]:
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if not all(isinstance(d, int) and d > 0 for d in shape):
        raise ValueError(f"replay spec {key!r}: shape must be a tuple of positive ints, got {shape}")
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"replay spec {key!r}: dtype must be a torch.dtype, got {dtype!r}")
    return shape, dtype

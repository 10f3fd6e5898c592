"""Device replay buffer and running observation normaliser (CPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from unilab.algos.normalizer import RunningNormalizer
from unilab.algos.replay import ReplayBuffer

SPEC = {"x": ((2,), torch.float32), "r": ((), torch.float32), "done": ((), torch.bool)}


def rows(start: int, n: int) -> dict[str, torch.Tensor]:
    v = torch.arange(start, start + n, dtype=torch.float32)
    return {"x": torch.stack([v, -v], dim=1), "r": v, "done": v.long() % 2 == 0}


def stored_values(buf: ReplayBuffer) -> list[int]:
    return sorted(int(v) for v in buf.storage["r"][: buf.size])


def test_wraparound_keeps_newest_rows():
    buf = ReplayBuffer(5, SPEC, "cpu")
    buf.extend(rows(0, 3))
    assert (buf.size, buf.ptr) == (3, 3)
    buf.extend(rows(3, 4))  # rows 3,4 land at the end, 5,6 wrap to the front
    assert (buf.size, buf.ptr) == (5, 2)
    assert buf.storage["r"].tolist() == [5, 6, 2, 3, 4]
    assert torch.equal(buf.storage["x"][:, 1], -buf.storage["r"])
    assert buf.storage["done"].tolist() == [False, True, True, False, True]
    assert int(buf.size_tensor) == 5


def test_chunk_larger_than_capacity_keeps_its_tail():
    buf = ReplayBuffer(5, SPEC, "cpu")
    buf.extend(rows(0, 2))
    buf.extend(rows(100, 12))
    assert buf.size == len(buf) == 5
    assert stored_values(buf) == [107, 108, 109, 110, 111]
    buf.extend(rows(200, 1))  # the ring continues after the newest row
    assert stored_values(buf) == [108, 109, 110, 111, 200]


def test_size_is_capped_and_mirrored_on_device():
    buf = ReplayBuffer(7, SPEC, "cpu")
    for i in range(10):
        buf.extend(rows(10 * i, 3))
        assert buf.size == min(3 * (i + 1), 7) and buf.ptr == 3 * (i + 1) % 7
        assert buf.size_tensor.dtype == torch.int64 and int(buf.size_tensor) == buf.size
        assert buf.ptr_tensor.dtype == torch.int64 and int(buf.ptr_tensor) == buf.ptr  # the write position too


def test_samples_come_only_from_filled_rows():
    torch.manual_seed(0)
    buf = ReplayBuffer(1000, SPEC, "cpu")
    buf.extend(rows(1, 10))
    batch = buf.sample(5000)
    assert batch["x"].shape == (5000, 2) and batch["r"].shape == (5000,) and batch["done"].dtype == torch.bool
    assert set(batch["r"].long().tolist()) == set(range(1, 11))  # all filled rows, nothing else
    assert torch.equal(batch["x"][:, 0], batch["r"])  # fields of one row stay together
    out = {k: torch.empty((64, *shape), dtype=dtype) for k, (shape, dtype) in SPEC.items()}
    buf.sample_into(out, 64)
    assert out["r"].min() >= 1 and out["r"].max() <= 10


def test_batch_errors_are_clear():
    buf = ReplayBuffer(8, SPEC, "cpu")
    bad_shape = rows(0, 4) | {"x": torch.zeros(4, 3)}
    with pytest.raises(ValueError, match=r"'x'.*\(n, 2\).*\(4, 3\)"):
        buf.extend(bad_shape)
    with pytest.raises(ValueError, match=r"'r'.*\(n\)"):
        buf.extend(rows(0, 4) | {"r": torch.zeros(4, 1)})
    with pytest.raises(TypeError, match=r"'done'.*torch.bool.*torch.float32"):
        buf.extend(rows(0, 4) | {"done": torch.zeros(4)})
    with pytest.raises(ValueError, match=r"missing \['done'\].*unexpected \['extra'\]"):
        buf.extend({"x": torch.zeros(4, 2), "r": torch.zeros(4), "extra": torch.zeros(4)})
    with pytest.raises(ValueError, match="rows"):
        buf.extend(rows(0, 4) | {"r": torch.zeros(3)})
    assert buf.size == 0  # nothing was written by a rejected batch


def test_spec_errors_are_clear():
    with pytest.raises(ValueError, match="positive ints"):
        ReplayBuffer(4, {"x": ((0,), torch.float32)}, "cpu")
    with pytest.raises(TypeError, match="torch.dtype"):
        ReplayBuffer(4, {"x": ((2,), np.float32)}, "cpu")
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(0, SPEC, "cpu")


def test_normalizer_matches_numpy_over_batches():
    rng = np.random.default_rng(0)
    batches = [rng.normal(loc=[1.0, -3.0, 50.0], scale=[0.5, 2.0, 10.0], size=(n, 3)) for n in (1, 7, 64, 300)]
    norm = RunningNormalizer(3, clip=10.0)
    for b in batches:
        norm.update(torch.as_tensor(b, dtype=torch.float32))
    data = np.concatenate(batches).astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(norm.mean.numpy(), data.mean(0), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(norm.var.numpy(), data.var(0), rtol=1e-10)
    assert float(norm.count) == len(data)

    x = torch.as_tensor(data[:5], dtype=torch.float32)
    expected = (data[:5] - data.mean(0)) / np.sqrt(data.var(0) + 1e-8)
    np.testing.assert_allclose(norm.normalize(x).numpy(), expected, rtol=1e-4, atol=1e-5)
    assert norm.normalize(torch.full((1, 3), 1e6)).max() == 10.0  # clipped


def test_normalizer_state_dict_and_disabled():
    norm = RunningNormalizer(2)
    norm.update(torch.randn(50, 2) * 3 + 1)
    copy = RunningNormalizer(2)
    copy.load_state_dict(norm.state_dict())
    x = torch.randn(4, 2)
    assert torch.equal(copy.normalize(x), norm.normalize(x))

    off = RunningNormalizer(2, enabled=False)
    off.update(torch.randn(50, 2) * 3 + 1)
    assert torch.equal(off.normalize(x), x) and float(off.count) == 0

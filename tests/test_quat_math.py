"""The table-driven quaternion products against MuJoCo's own (CPU)."""

from __future__ import annotations

import mujoco
import numpy as np
import torch

from unilab.tasks.common import math as qm


def _random_quats(n: int, seed: int) -> torch.Tensor:
    return qm.normalize(torch.randn(n, 4, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))


def test_quat_mul_matches_mujoco_and_broadcasts():
    a, b = _random_quats(32, 0), _random_quats(32, 1)
    ours = qm.quat_mul(a, b)
    for i in range(32):
        ref = np.zeros(4)
        mujoco.mju_mulQuat(ref, a[i].numpy(), b[i].numpy())
        np.testing.assert_allclose(ours[i].numpy(), ref, atol=1e-12)
    grid = qm.quat_mul(a[:4, None], b[None, :3])  # (4, 1, 4) x (1, 3, 4)
    assert grid.shape == (4, 3, 4)
    torch.testing.assert_close(grid[2, 1], torch.as_tensor(qm.quat_mul(a[2], b[1]), dtype=ours.dtype))


def test_rotation_matrix_and_its_first_columns_match_mujoco():
    q = _random_quats(16, 2).float()
    mats = qm.quat_to_matrix(q)
    six = qm.matrix_first_two_columns(q)
    for i in range(16):
        ref = np.zeros(9)
        mujoco.mju_quat2Mat(ref, q[i].double().numpy())
        ref = ref.reshape(3, 3)
        np.testing.assert_allclose(mats[i].numpy(), ref, atol=1e-6)
        np.testing.assert_allclose(six[i].numpy(), ref[:, :2].reshape(6), atol=1e-6)

"""Batched torch quaternion helpers.

Quaternions use MuJoCo's (w, x, y, z) order and are assumed unit length unless
stated otherwise. Every function broadcasts over leading dimensions.
"""

from __future__ import annotations

import math

import torch


def normalize(x: torch.Tensor, eps: float = 1e-9) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp_min(eps)


def quat_conjugate(q: torch.Tensor) -> torch.Tensor:
    return torch.cat((q[..., :1], -q[..., 1:]), dim=-1)


def quat_inverse(q: torch.Tensor) -> torch.Tensor:
    """Inverse of a (not necessarily unit) quaternion."""
    return quat_conjugate(q) / (q * q).sum(dim=-1, keepdim=True).clamp_min(1e-12)


# Products as contractions of the outer product a_i b_j with constant tables, so that each is
# three elementwise/reduction kernels instead of one per scalar term (the task step is captured
# as a CUDA graph, whose cost is mostly the number of small kernels).
def _hamilton_table() -> torch.Tensor:
    """H[i, j, k]: coefficient of a_i * b_j in component k of the Hamilton product a * b."""
    h = torch.zeros(4, 4, 4)
    terms = {  # k: [(i, j, sign)] from w = aw bw - ax bx - ..., x = aw bx + ax bw + ay bz - az by, ...
        0: [(0, 0, 1), (1, 1, -1), (2, 2, -1), (3, 3, -1)],
        1: [(0, 1, 1), (1, 0, 1), (2, 3, 1), (3, 2, -1)],
        2: [(0, 2, 1), (1, 3, -1), (2, 0, 1), (3, 1, 1)],
        3: [(0, 3, 1), (1, 2, 1), (2, 1, -1), (3, 0, 1)],
    }
    for k, entries in terms.items():
        for i, j, sign in entries:
            h[i, j, k] = sign
    return h


def _rotation_table() -> tuple[torch.Tensor, torch.Tensor]:
    """R = C . (q q^T) + I for unit q: C[i, j, r, c] and the identity, row-major rotation matrix."""
    c = torch.zeros(4, 4, 3, 3)
    w, x, y, z = range(4)
    entries = {  # (r, c): [(i, j, coefficient)] of q_i q_j, on top of the identity
        (0, 0): [(y, y, -2), (z, z, -2)], (0, 1): [(x, y, 2), (w, z, -2)], (0, 2): [(x, z, 2), (w, y, 2)],
        (1, 0): [(x, y, 2), (w, z, 2)], (1, 1): [(x, x, -2), (z, z, -2)], (1, 2): [(y, z, 2), (w, x, -2)],
        (2, 0): [(x, z, 2), (w, y, -2)], (2, 1): [(y, z, 2), (w, x, 2)], (2, 2): [(x, x, -2), (y, y, -2)],
    }
    for (r, col), terms in entries.items():
        for i, j, coef in terms:
            c[i, j, r, col] += coef
    return c, torch.eye(3)


_HAMILTON = _hamilton_table()
_ROTATION, _IDENTITY = _rotation_table()
_TABLES: dict[tuple, tuple[torch.Tensor, ...]] = {}


def _tables(device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """The constant tables on a device, made once (never inside a graph capture: the first
    eager steps of a captured task already made them)."""
    key = (device, dtype)
    if key not in _TABLES:
        _TABLES[key] = tuple(t.to(device, dtype) for t in (_HAMILTON, _ROTATION, _IDENTITY))
    return _TABLES[key]


def quat_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Hamilton product a * b (apply b first, then a)."""
    h = _tables(a.device, a.dtype)[0]
    outer = a.unsqueeze(-1) * b.unsqueeze(-2)  # (..., 4, 4)
    return (outer.unsqueeze(-1) * h).sum(dim=(-3, -2))


def quat_apply(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate vectors v (..., 3) by unit quaternions q (..., 4)."""
    w = q[..., :1]
    u = q[..., 1:]
    t = 2.0 * torch.cross(u, v, dim=-1)
    return v + w * t + torch.cross(u, t, dim=-1)


def quat_apply_inverse(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate world vectors v into the frame described by q."""
    return quat_apply(quat_conjugate(q), v)


def projected_gravity(q: torch.Tensor) -> torch.Tensor:
    """Unit gravity direction expressed in the body frame; (0, 0, -1) when upright."""
    g = torch.zeros(q.shape[:-1] + (3,), dtype=q.dtype, device=q.device)
    g[..., 2] = -1.0
    return quat_apply_inverse(q, g)


def yaw_from_quat(q: torch.Tensor) -> torch.Tensor:
    w, x, y, z = q.unbind(-1)
    return torch.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def quat_from_axis_angle(axis: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """axis (..., 3) unit, angle (...) radians."""
    half = 0.5 * angle.unsqueeze(-1)
    return torch.cat((torch.cos(half), axis * torch.sin(half)), dim=-1)


def quat_from_yaw(yaw: torch.Tensor) -> torch.Tensor:
    half = 0.5 * yaw
    zeros = torch.zeros_like(yaw)
    return torch.stack((torch.cos(half), zeros, zeros, torch.sin(half)), dim=-1)


def yaw_quat(q: torch.Tensor) -> torch.Tensor:
    """Heading-only part of q (rotation about world z)."""
    return quat_from_yaw(yaw_from_quat(q))


def wrap_to_pi(angle: torch.Tensor) -> torch.Tensor:
    return torch.remainder(angle + math.pi, 2.0 * math.pi) - math.pi


def axis_angle_from_quat(q: torch.Tensor) -> torch.Tensor:
    """Rotation vector (axis * angle, angle in [0, pi]) of unit quaternions."""
    # Flip to the w >= 0 hemisphere so the angle is the short way round.
    q = torch.where(q[..., :1] < 0.0, -q, q)
    v = q[..., 1:]
    sin_half = v.norm(dim=-1, keepdim=True)
    angle = 2.0 * torch.atan2(sin_half, q[..., :1])
    # angle / sin(angle/2) -> 2 as angle -> 0.
    scale = torch.where(sin_half > 1e-6, angle / sin_half.clamp_min(1e-6), torch.full_like(angle, 2.0))
    return v * scale


def quat_error(q_target: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Rotation vector taking q to q_target, expressed in the world frame."""
    return axis_angle_from_quat(quat_mul(q_target, quat_conjugate(q)))


def quat_error_magnitude(q1: torch.Tensor, q2: torch.Tensor) -> torch.Tensor:
    """Smallest angle (radians) between two orientations."""
    # atan2 stays accurate near zero, where acos of the dot product loses float32 precision.
    rel = quat_mul(q1, quat_conjugate(q2))
    return 2.0 * torch.atan2(rel[..., 1:].norm(dim=-1), rel[..., 0].abs())


def quat_to_matrix(q: torch.Tensor) -> torch.Tensor:
    """Rotation matrix (..., 3, 3) of unit quaternions."""
    _, c, eye = _tables(q.device, q.dtype)
    outer = q.unsqueeze(-1) * q.unsqueeze(-2)  # (..., 4, 4)
    return (outer[..., None, None] * c).sum(dim=(-4, -3)) + eye


def matrix_first_two_columns(q: torch.Tensor) -> torch.Tensor:
    """6D rotation representation (first two columns of the rotation matrix, flattened)."""
    return first_two_columns(quat_to_matrix(q))


def first_two_columns(rot: torch.Tensor) -> torch.Tensor:
    """6D rotation representation of (..., 3, 3) rotation matrices: the first two columns, row by row."""
    return rot[..., :, :2].reshape(rot.shape[:-2] + (6,))

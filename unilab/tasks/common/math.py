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


def quat_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Hamilton product a * b (apply b first, then a)."""
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack(
        (
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ),
        dim=-1,
    )


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
    w, x, y, z = q.unbind(-1)
    row0 = torch.stack((1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)), dim=-1)
    row1 = torch.stack((2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)), dim=-1)
    row2 = torch.stack((2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)), dim=-1)
    return torch.stack((row0, row1, row2), dim=-2)


def matrix_first_two_columns(q: torch.Tensor) -> torch.Tensor:
    """6D rotation representation (first two columns of the rotation matrix, flattened)."""
    m = quat_to_matrix(q)
    return m[..., :, :2].reshape(q.shape[:-1] + (6,))

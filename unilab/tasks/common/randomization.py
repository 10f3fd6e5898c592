"""Domain randomisation shared by the G1 tasks: root pushes, per-world friction and centre-of-mass
offsets, uniform observation noise.

Every helper draws from the env's own generator (a seed fixes the rollout) and writes with device
masks only, so it runs inside a captured CUDA graph without a host sync. Per-world model fields are
expanded once at construction (``backend.expand_model_field``), before the first physics step: a
captured graph holds the array's address.
"""

from __future__ import annotations

from typing import Sequence

import torch


def push_root(env, due: torch.Tensor, half_widths: torch.Tensor) -> None:
    """Add a uniform velocity kick in [-w, w] to the first ``len(half_widths)`` root dofs (free joint:
    linear world-frame, then angular body-frame) of the envs where ``due`` is set."""
    k = int(half_widths.shape[0])
    u = torch.rand((env.num_envs, k), device=env.device, generator=env.generator)
    kick = (-half_widths + (2.0 * half_widths) * u) * due[:, None]
    env.qvel[:, env.root_dof_adr:env.root_dof_adr + k] += kick


def push_intervals(env, interval_s: Sequence[float]) -> torch.Tensor:
    """(N,) seconds until each env's next push, uniform in ``interval_s``."""
    low, high = interval_s
    return env._rand(env.num_envs, low=low, high=high)


def tick_pushes(env, time_left: torch.Tensor, interval_s: Sequence[float], half_widths: torch.Tensor) -> None:
    """Count ``time_left`` down by one control step; push the envs whose time ran out and draw their
    next interval."""
    time_left -= env.dt
    due = time_left <= 0.0
    push_root(env, due, half_widths)
    time_left.copy_(torch.where(due, push_intervals(env, interval_s), time_left))


def per_world_friction(env) -> torch.Tensor:
    """(N, ngeom, 3) friction table, one row block per world."""
    return env.backend.expand_model_field("geom_friction")


def resample_friction(env, table: torch.Tensor, mask: torch.Tensor, friction_range: Sequence[float]) -> None:
    """Draw one sliding friction per env and write it into every geom of the masked worlds: a contact
    uses the larger friction of its two geoms, so the floor and the robot must agree."""
    mu = env._rand(env.num_envs, low=friction_range[0], high=friction_range[1])
    table[..., 0] = torch.where(mask[:, None], mu[:, None], table[..., 0])


class ComOffsets:
    """Per-world offsets of some bodies' centres of mass (``body_ipos``, body frame), redrawn per reset.

    Only the inertial frame's position moves: mass and inertia stay, and MJWarp derives the world CoM
    (``xipos``, ``subtree_com``) from ``body_ipos`` in every kinematics pass."""

    def __init__(self, env, body_ids: Sequence[int], half_widths: Sequence[float]):
        self.env = env
        self.ipos = env.backend.expand_model_field("body_ipos")  # (N, nbody, 3)
        self.body_ids = torch.as_tensor(list(body_ids), dtype=torch.long, device=env.device)
        self.nominal = self.ipos[:, self.body_ids].clone()  # (N, k, 3)
        self.half_widths = torch.as_tensor(half_widths, dtype=torch.float32, device=env.device)

    def resample(self, mask: torch.Tensor) -> None:
        env, k = self.env, int(self.body_ids.shape[0])
        u = torch.rand((env.num_envs, k, 3), device=env.device, generator=env.generator)
        new = self.nominal + (2.0 * u - 1.0) * self.half_widths
        cur = self.ipos[:, self.body_ids]
        self.ipos[:, self.body_ids] = torch.where(mask[:, None, None], new, cur)

    @property
    def offsets(self) -> torch.Tensor:
        """(N, k, 3) current offsets from the nominal CoM positions."""
        return self.ipos[:, self.body_ids] - self.nominal


def noisy_concat(env, terms: list[torch.Tensor], half_widths: Sequence[float], scale: float) -> torch.Tensor:
    """``torch.cat(terms, -1)`` plus uniform noise of half-width ``w * scale`` on the columns of the first
    ``len(half_widths)`` terms (terms of width 0 and the rest stay exactly as they are). One draw covers
    every column: the step is a graph of small kernels, and a draw per term would be several more.
    ``scale`` 0 returns the clean concatenation."""
    obs = torch.cat(terms, dim=-1)
    if scale <= 0.0 or not any(w > 0.0 for w in half_widths):
        return obs
    sizes = tuple(int(t.shape[-1]) for t in terms)
    key = (sizes, tuple(float(w) for w in half_widths), float(scale))
    spans = env._noise_spans
    if key not in spans:  # made in the eager steps, before any capture
        full = [2.0 * w * scale for w in half_widths] + [0.0] * (len(terms) - len(half_widths))
        spans[key] = torch.repeat_interleave(torch.tensor(full, dtype=obs.dtype), torch.tensor(sizes)).to(obs.device)
    u = torch.rand(obs.shape, device=obs.device, generator=env.generator)
    return torch.addcmul(obs, u - 0.5, spans[key])  # (u - 0.5) * 2w: uniform in [-w, w]

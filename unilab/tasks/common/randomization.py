"""Domain randomisation shared by the G1 tasks: root pushes, per-world friction, centre-of-mass
offsets, added body mass and motor strength, uniform observation noise.

Every helper draws from the env's own generator (a seed fixes the rollout) and writes with device
masks only, so it runs inside a captured CUDA graph without a host sync. Per-world model fields are
expanded once at construction (``backend.expand_model_field``), before the first physics step: a
captured graph holds the array's address.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def push_root(env, due: torch.Tensor, half_widths: torch.Tensor) -> None:
    """Add a uniform velocity kick in [-w, w] to the first ``len(half_widths)`` root dofs (free joint:
    linear world-frame, then angular body-frame) of the envs where ``due`` is set."""
    k = int(half_widths.shape[0])
    u = torch.rand((env.num_envs, k), device=env.device, generator=env.generator)
    kick = (-half_widths + (2.0 * half_widths) * u) * due[:, None]
    env.qvel[:, env.root_dof_adr:env.root_dof_adr + k] += kick


def push_planar(env, due: torch.Tensor, min_speed: torch.Tensor, max_speed: torch.Tensor) -> None:
    """Add a planar velocity kick to the root of the envs where ``due`` is set: a uniform direction, a
    size uniform in [min_speed, max_speed] (device scalars, so that a captured step reads their current
    values: a curriculum writes them in place)."""
    u = torch.rand((env.num_envs, 2), device=env.device, generator=env.generator)
    angle = (2.0 * torch.pi) * u[:, 0]
    speed = (min_speed + (max_speed - min_speed) * u[:, 1]) * due
    kick = torch.stack((torch.cos(angle), torch.sin(angle)), dim=1) * speed[:, None]
    env.qvel[:, env.root_dof_adr:env.root_dof_adr + 2] += kick


def ramp(step: torch.Tensor, steps: int, start: float) -> torch.Tensor:
    """A device scalar that grows linearly from ``start`` at step 0 to 1 at ``steps`` (and stays there);
    1 when ``steps`` is 0. No host read: it runs inside a captured step."""
    if steps <= 0:
        return torch.ones((), device=step.device)
    return (start + (1.0 - start) * step.float() / float(steps)).clamp(max=1.0)


def push_intervals(env, interval_s: Sequence[float]) -> torch.Tensor:
    """(N,) seconds until each env's next push, uniform in ``interval_s``."""
    low, high = interval_s
    return env._rand(env.num_envs, low=low, high=high)


def tick_pushes(env, time_left: torch.Tensor, interval_s: Sequence[float], half_widths: torch.Tensor | None = None,
                push: Callable[[torch.Tensor], None] | None = None) -> None:
    """Count ``time_left`` down by one control step; push the envs whose time ran out (``push(due)``, or a
    uniform kick of ``half_widths``) and draw their next interval."""
    time_left -= env.dt
    due = time_left <= 0.0
    if push is None:
        push_root(env, due, half_widths)
    else:
        push(due)
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


class AddedMass:
    """Per-world mass added to some bodies (``body_mass``), redrawn per reset: a payload at each body's
    centre of mass, so its inertia about that point stays. ``body_subtreemass`` of the body and of every
    ancestor grows by the same amount (MJWarp reads it for the subtree centres of mass)."""

    def __init__(self, env, body_ids: Sequence[int], mass_range: Sequence[float]):
        self.env = env
        m = env.mj_model
        self.mass = env.backend.expand_model_field("body_mass")  # (N, nbody)
        self.subtree = env.backend.expand_model_field("body_subtreemass")
        self.body_ids = torch.as_tensor(list(body_ids), dtype=torch.long, device=env.device)
        self.nominal_mass = self.mass.clone()
        self.nominal_subtree = self.subtree.clone()
        # carry[i, j] = 1 where body j is body_ids[i] or one of its ancestors (the world included).
        carry = torch.zeros(len(body_ids), m.nbody, dtype=torch.float32)
        for i, b in enumerate(body_ids):
            while True:
                carry[i, b] = 1.0
                if b == 0:
                    break
                b = int(m.body_parentid[b])
        self.carry = carry.to(env.device)
        self.low, self.high = float(mass_range[0]), float(mass_range[1])

    def resample(self, mask: torch.Tensor) -> None:
        env, keep = self.env, mask[:, None]
        added = env._rand(env.num_envs, int(self.body_ids.shape[0]), low=self.low, high=self.high)
        mass = self.nominal_mass.clone()
        mass[:, self.body_ids] += added
        self.mass.copy_(torch.where(keep, mass, self.mass))
        self.subtree.copy_(torch.where(keep, self.nominal_subtree + added @ self.carry, self.subtree))

    @property
    def added(self) -> torch.Tensor:
        """(N, k) mass currently added to each body."""
        return self.mass[:, self.body_ids] - self.nominal_mass[:, self.body_ids]


class MotorStrength:
    """Per-world, per-actuator factors on the PD gains of position actuators (force = kp (target - q) -
    kd qdot: ``gainprm[0]`` = kp, ``biasprm[1]`` = -kp, ``biasprm[2]`` = -kd), redrawn per reset.
    A range of None leaves that gain at its nominal value."""

    def __init__(self, env, kp_range: Sequence[float] | None, kd_range: Sequence[float] | None):
        self.env = env
        self.gain = env.backend.expand_model_field("actuator_gainprm")  # (N, nu, 10)
        self.bias = env.backend.expand_model_field("actuator_biasprm")
        self.kp0 = self.gain[:, :, 0].clone()
        self.kd0 = -self.bias[:, :, 2].clone()
        self.kp_range, self.kd_range = kp_range, kd_range

    def _draw(self, rng: Sequence[float] | None) -> torch.Tensor:
        env = self.env
        if rng is None:
            return torch.ones(env.num_envs, self.kp0.shape[1], device=env.device)
        return env._rand(env.num_envs, self.kp0.shape[1], low=float(rng[0]), high=float(rng[1]))

    def resample(self, mask: torch.Tensor) -> None:
        m = mask[:, None]
        kp = torch.where(m, self.kp0 * self._draw(self.kp_range), self.gain[:, :, 0])
        kd = torch.where(m, self.kd0 * self._draw(self.kd_range), -self.bias[:, :, 2])
        self.gain[:, :, 0] = kp
        self.bias[:, :, 1] = -kp
        self.bias[:, :, 2] = -kd

    @property
    def scales(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, nu) current kp and kd factors."""
        return self.gain[:, :, 0] / self.kp0, -self.bias[:, :, 2] / self.kd0


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

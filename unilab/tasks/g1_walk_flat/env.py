"""`g1_walk_flat`: Unitree G1 tracks planar velocity commands on flat ground.

Rewards follow legged_gym / mjlab velocity tasks: exp-kernel tracking of the
commanded base-frame xy velocity and yaw rate, regularisers, and a gait clock
whose stance/swing pattern the feet are rewarded for matching.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from unilab.assets import g1
from unilab.tasks.common import math as qm
from unilab.tasks.common import randomization as dr
from unilab.tasks.common import rewards as rk
from unilab.tasks.common.base import TaskEnv
from unilab.tasks.g1_walk_flat.config import G1WalkFlatConfig

_HIP_DEVIATION_JOINTS = ("hip_roll", "hip_yaw")
_ADDED_MASS_BODIES = ("pelvis", "torso_link")  # where a payload sits: the battery, a backpack, a sensor head
_UPPER_BODY_PREFIXES = ("waist_", "left_shoulder", "right_shoulder", "left_elbow", "right_elbow",
                        "left_wrist", "right_wrist")


class G1WalkFlatEnv(TaskEnv):
    def __init__(self, cfg: G1WalkFlatConfig, sim_cfg, device: str = "cpu", seed: int = 0):
        model = cfg.build_model()  # the model the compose checks sized (unilab.config.sizes)
        super().__init__(cfg, sim_cfg, model, device, seed)
        self.reward_weights = dataclasses.asdict(cfg.rewards.weights)
        dev, n = self.device, self.num_envs

        self.default_joint_pos = torch.as_tensor(g1.G1_DEFAULT_QPOS_JOINTS, dtype=torch.float32, device=dev)
        self.default_qpos = torch.as_tensor(g1.default_qpos(model), dtype=torch.float32, device=dev)
        target = cfg.rewards.base_height_target
        self.base_height_target = g1.G1_DEFAULT_BASE_HEIGHT if target is None else float(target)
        self.soft_lower, self.soft_upper = rk.soft_limits(
            self.joint_range[:, 0], self.joint_range[:, 1], cfg.rewards.soft_joint_limit_factor
        )
        names = g1.G1_JOINT_NAMES
        self._hip_idx = _index([i for i, j in enumerate(names) if any(k in j for k in _HIP_DEVIATION_JOINTS)], dev)
        self._upper_idx = _index([i for i, j in enumerate(names) if j.startswith(_UPPER_BODY_PREFIXES)], dev)
        self._foot_site_ids = _index([model.site(s).id for s in g1.G1_FOOT_SITES], dev)
        self._torso_id = model.body("torso_link").id
        self._contact_adr = _index([int(model.sensor_adr[model.sensor(s).id]) for s in g1.G1_FOOT_CONTACT_SENSORS], dev)

        f32 = torch.float32
        self._leg_phase_offset = torch.tensor([0.0, 0.5], device=dev)
        self.commands = torch.zeros(n, 3, device=dev, dtype=f32)
        self.command_time_left = torch.zeros(n, device=dev, dtype=f32)
        self.foot_contact = torch.ones(n, 2, device=dev, dtype=torch.bool)
        self.foot_vel = torch.zeros(n, 2, 3, device=dev, dtype=f32)
        self._last_foot_pos = torch.zeros(n, 2, 3, device=dev, dtype=f32)
        self._last_joint_vel = torch.zeros(n, self.action_dim, device=dev, dtype=f32)
        self.joint_acc = torch.zeros(n, self.action_dim, device=dev, dtype=f32)

        self._action_low, self._action_high = self._action_spans(cfg)
        # Commands the env holds instead of sampling them (evaluation); set before the first step.
        self._held_commands: torch.Tensor | None = None

        rnd = cfg.randomization
        self.push_time_left = torch.full((n,), math.inf, device=dev, dtype=f32)
        # Full push sizes; the curriculum scales them by a ramp of the step counter inside the step.
        self._push_speeds = torch.tensor([rnd.push_min_vel_xy, rnd.push_max_vel_xy], device=dev, dtype=f32)
        self._geom_friction = dr.per_world_friction(self) if rnd.friction_range is not None else None
        self._added_mass = (dr.AddedMass(self, [model.body(b).id for b in _ADDED_MASS_BODIES], rnd.added_mass_kg)
                            if rnd.added_mass_kg is not None else None)
        self._motors = (dr.MotorStrength(self, rnd.kp_scale, rnd.kd_scale)
                        if rnd.kp_scale is not None or rnd.kd_scale is not None else None)
        self._finish_init()
        if rnd.stagger_first_episode:
            self.episode_length.copy_(torch.randint(0, self.max_episode_length, (n,), device=dev,
                                                    generator=self.generator))

    def _action_spans(self, cfg: G1WalkFlatConfig) -> tuple[torch.Tensor, torch.Tensor]:
        """(nu,) radians that actions of -1 and +1 move each joint target from the default pose."""
        if cfg.action_bounds == "uniform":
            span = torch.full_like(self.default_joint_pos, float(cfg.action_scale))
            return span, span
        if cfg.action_bounds == "joint_limits":
            return ((self.default_joint_pos - self.soft_lower).clamp(min=0.0),
                    (self.soft_upper - self.default_joint_pos).clamp(min=0.0))
        raise ValueError(f"task.action_bounds={cfg.action_bounds!r}: choose joint_limits or uniform")

    def action_spans(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._action_low, self._action_high

    def _apply_actions(self) -> None:
        a = self.actions
        self.backend.ctrl.copy_(self.default_joint_pos + torch.where(a < 0.0, a * self._action_low, a * self._action_high))

    def hold_commands(self, commands: torch.Tensor) -> None:
        """Hold these (N, 3) commands (vx, vy, wz) for good: no resampling, no standing draws.
        Call before the first step (a captured step reads the tensor it saw then)."""
        self._held_commands = commands.to(self.device, torch.float32).clone()
        self.commands.copy_(self._held_commands)

    # --------------------------------------------------------------- state
    @property
    def foot_pos(self) -> torch.Tensor:
        """(N, 2, 3) sole points of the left/right foot."""
        return self.backend.site_xpos[:, self._foot_site_ids]

    @property
    def base_lin_vel_b(self) -> torch.Tensor:
        return qm.quat_apply_inverse(self.base_quat, self.base_lin_vel_w)

    @property
    def projected_gravity(self) -> torch.Tensor:
        return qm.projected_gravity(self.base_quat)

    @property
    def gait_phase(self) -> torch.Tensor:
        """(N,) gait clock in [0, 1); the right leg runs half a cycle behind the left."""
        t = self.episode_length.float() * self.dt
        return torch.remainder(t / self.cfg.rewards.gait_period_s, 1.0)

    @property
    def standing(self) -> torch.Tensor:
        return (self.commands == 0.0).all(dim=1)

    def _expected_stance(self) -> torch.Tensor:
        """(N, 2) feet that the gait clock wants on the ground; both while standing."""
        phase = self.gait_phase[:, None] + self._leg_phase_offset
        stance = torch.remainder(phase, 1.0) < self.cfg.rewards.stance_fraction
        return stance | self.standing[:, None]

    # ------------------------------------------------------------ dynamics
    def _post_physics_step(self) -> None:
        self.foot_contact.copy_(self.backend.sensordata[:, self._contact_adr] > 0.0)
        foot_pos = self.foot_pos
        self.foot_vel.copy_((foot_pos - self._last_foot_pos) / self.dt)
        self._last_foot_pos.copy_(foot_pos)
        joint_vel = self.joint_vel
        self.joint_acc.copy_((joint_vel - self._last_joint_vel) / self.dt)
        self._last_joint_vel.copy_(joint_vel)

        self.command_time_left -= self.dt
        self._resample_commands(self.command_time_left <= 0.0)
        rnd = self.cfg.randomization
        if rnd.push_interval_s is not None:
            dr.tick_pushes(self, self.push_time_left, rnd.push_interval_s, push=self._push)

    def _resample_commands(self, mask: torch.Tensor) -> None:
        c = self.cfg.commands
        n = self.num_envs
        new = torch.stack(
            (
                self._rand(n, low=c.lin_vel_x[0], high=c.lin_vel_x[1]),
                self._rand(n, low=c.lin_vel_y[0], high=c.lin_vel_y[1]),
                self._rand(n, low=c.ang_vel_z[0], high=c.ang_vel_z[1]),
            ),
            dim=1,
        )
        # Single-axis resamples keep one axis, each with a third of the chance (drawn even when the
        # share is 0: the same random stream whatever the setting).
        single = self._rand(n) < c.single_axis_fraction
        axis = torch.floor(self._rand(n, 1) * 3.0)  # 0, 1 or 2 (1.0 itself is never drawn)
        keep = (axis == torch.arange(3, device=self.device)) | ~single[:, None]
        new = torch.where(keep, new, 0.0)
        # Small commands become exact zeros so "standing" is a well-defined mode.
        slow = new[:, :2].norm(dim=1, keepdim=True) < c.min_lin_speed
        new[:, :2] = torch.where(slow, 0.0, new[:, :2])
        new[:, 2:] = torch.where(new[:, 2:].abs() < c.min_ang_speed, 0.0, new[:, 2:])
        stand = self._rand(n) < c.standing_fraction
        new = torch.where(stand[:, None], 0.0, new)
        if self._held_commands is not None:
            new = self._held_commands
        duration = self._rand(n, low=c.resampling_time_s[0], high=c.resampling_time_s[1])
        self.commands.copy_(torch.where(mask[:, None], new, self.commands))
        self.command_time_left.copy_(torch.where(mask, duration, self.command_time_left))

    def _push(self, due: torch.Tensor) -> None:
        """Kick the bases of the envs where ``due`` is set (a device mask: no host branch), at the size
        the push curriculum has reached."""
        speeds = self._push_speeds * self.push_scale
        dr.push_planar(self, due, speeds[0], speeds[1])

    @property
    def push_scale(self) -> torch.Tensor:
        """Device scalar: the share of the full push size the curriculum has reached."""
        rnd = self.cfg.randomization
        return dr.ramp(self.common_step_counter, rnd.push_curriculum_steps, rnd.push_curriculum_start)

    # --------------------------------------------------------------- reset
    def _reset_state(self, mask: torch.Tensor) -> None:
        rnd = self.cfg.randomization
        n, dev = self.num_envs, self.device
        qpos = self.default_qpos.repeat(n, 1)
        joint_pos = self.default_joint_pos + self._rand(n, self.action_dim, low=-1.0, high=1.0) * rnd.reset_joint_pos_noise
        qpos[:, self._jq] = joint_pos.clamp(self.joint_range[:, 0], self.joint_range[:, 1])
        yaw = self._rand(n, low=-rnd.reset_base_yaw, high=rnd.reset_base_yaw)
        qpos[:, self.root_qpos_adr + 3:self.root_qpos_adr + 7] = qm.quat_from_yaw(yaw)
        qvel = torch.zeros(n, self.mj_model.nv, device=dev)
        qvel[:, self.root_dof_adr:self.root_dof_adr + 6] = self._rand(n, 6, low=-1.0, high=1.0) * rnd.reset_base_vel_noise
        self._write_state(mask, qpos, qvel)

        if self._geom_friction is not None:
            dr.resample_friction(self, self._geom_friction, mask, rnd.friction_range)
        if self._added_mass is not None:
            self._added_mass.resample(mask)
        if self._motors is not None:
            self._motors.resample(mask)

        self._resample_commands(mask)
        if rnd.push_interval_s is not None:
            next_push = dr.push_intervals(self, rnd.push_interval_s)
            self.push_time_left.copy_(torch.where(mask, next_push, self.push_time_left))
        m1, m2 = mask[:, None], mask[:, None, None]
        self.foot_contact.copy_(torch.where(m1, True, self.foot_contact))
        self.foot_vel.masked_fill_(m2, 0.0)
        self._last_foot_pos.copy_(torch.where(m2, self.foot_pos, self._last_foot_pos))
        self._last_joint_vel.copy_(torch.where(m1, self.joint_vel, self._last_joint_vel))
        self.joint_acc.masked_fill_(m1, 0.0)

    def _extend_info(self, info) -> None:
        """Tracking errors of the envs under a non-zero command (m/s, rad/s): the learning curve of
        what the task is for. Instantaneous, so they include the gait's own sway."""
        moving = self.commands[:, :2].norm(dim=1) > 0.0
        turning = self.commands[:, 2] != 0.0
        lin_err = (self.commands[:, :2] - self.base_lin_vel_b[:, :2]).norm(dim=1)
        yaw_err = (self.commands[:, 2] - self.base_ang_vel_b[:, 2]).abs()
        info["metrics/lin_vel_error"] = (lin_err * moving).sum() / moving.sum().clamp(min=1)
        info["metrics/yaw_rate_error"] = (yaw_err * turning).sum() / turning.sum().clamp(min=1)

    def _check_terminated(self) -> torch.Tensor:
        t = self.cfg.terminations
        too_low = self.base_pos[:, 2] < t.min_base_height
        # Projected gravity z is -cos(tilt).
        tilted = self.projected_gravity[:, 2] > -math.cos(t.max_tilt_rad)
        diverged = ~torch.isfinite(self.qpos).all(dim=1)
        return too_low | tilted | diverged

    # -------------------------------------------------------- observations
    def _policy_terms(self) -> list[torch.Tensor]:
        o = self.cfg.observations
        phase = 2.0 * math.pi * self.gait_phase[:, None]
        return [
            self.base_ang_vel_b * o.ang_vel_scale,
            self.projected_gravity,
            self.joint_pos - self.default_joint_pos,
            self.joint_vel * o.joint_vel_scale,
            self.actions,
            self.commands,
            torch.cat((torch.sin(phase), torch.cos(phase)), dim=1),
        ]

    def policy_obs_layout(self) -> list[tuple[str, int, float]]:
        o = self.cfg.observations
        names = ("base_ang_vel", "projected_gravity", "joint_pos_rel", "joint_vel", "last_action", "command",
                 "gait_phase_sin_cos")
        scales = (o.ang_vel_scale, 1.0, 1.0, o.joint_vel_scale, 1.0, 1.0, 1.0)
        return [(n, int(t.shape[-1]), float(s)) for n, t, s in zip(names, self._policy_terms(), scales, strict=True)]

    def deploy_description(self) -> dict:
        from unilab.tasks.g1_walk_flat.metadata import deploy_description

        r, t = self.cfg.rewards, self.cfg.terminations
        return deploy_description(gait_period_s=r.gait_period_s, stance_fraction=r.stance_fraction,
                                  base_height=g1.G1_DEFAULT_BASE_HEIGHT, min_base_height=t.min_base_height,
                                  max_tilt_rad=t.max_tilt_rad)

    def _compute_obs(self) -> torch.Tensor:
        o = self.cfg.observations
        widths = (o.ang_vel_noise, o.gravity_noise, o.joint_pos_noise, o.joint_vel_noise)
        return _sanitize(dr.noisy_concat(self, self._policy_terms(), widths, o.noise_scale), o.clip)

    def _privileged_terms(self) -> list[torch.Tensor]:
        """What the critic sees beyond the policy's terms (critic_obs_layout names them)."""
        return [
            self.base_lin_vel_b * self.cfg.observations.lin_vel_scale,
            self.foot_contact.float(),
            self.foot_pos[..., 2],
            self.base_pos[:, 2:3],
        ]

    def critic_obs_layout(self) -> list[tuple[str, int]]:
        names = ("base_lin_vel", "foot_contact", "foot_height", "base_height")
        policy = [(n, w) for n, w, _ in self.policy_obs_layout()]
        return policy + [(n, int(t.shape[-1])) for n, t in zip(names, self._privileged_terms(), strict=True)]

    def mirror(self):
        """The left-right mirror of the observations and actions (unilab.tasks.g1_walk_flat.symmetry)."""
        from unilab.tasks.common.mirror import joint_mirror
        from unilab.tasks.g1_walk_flat.symmetry import walk_mirror

        joints = joint_mirror(self.mj_model, g1.G1_JOINT_NAMES)
        policy = [(n, w) for n, w, _ in self.policy_obs_layout()]
        return walk_mirror(policy, self.critic_obs_layout(), joints)

    def _compute_critic_obs(self) -> torch.Tensor:
        terms = self._policy_terms() + self._privileged_terms()
        return _sanitize(torch.cat(terms, dim=1), self.cfg.observations.clip)

    # ------------------------------------------------------------- rewards
    def _reward_track_lin_vel_xy(self) -> torch.Tensor:
        return rk.exp_tracking(self.commands[:, :2], self.base_lin_vel_b[:, :2], self.cfg.rewards.tracking_std)

    def _reward_track_ang_vel_z(self) -> torch.Tensor:
        err = (self.commands[:, 2] - self.base_ang_vel_b[:, 2]).square()
        return rk.exp_kernel(err, self.cfg.rewards.tracking_std)

    def _reward_lin_vel_z(self) -> torch.Tensor:
        return self.base_lin_vel_b[:, 2].square()

    def _reward_ang_vel_xy(self) -> torch.Tensor:
        return rk.squared_norm(self.base_ang_vel_b[:, :2])

    def _reward_orientation(self) -> torch.Tensor:
        return rk.squared_norm(self.projected_gravity[:, :2])

    def _reward_base_height(self) -> torch.Tensor:
        return (self.base_pos[:, 2] - self.base_height_target).square()

    def _reward_action_rate(self) -> torch.Tensor:
        return rk.squared_norm(self.actions - self.last_actions)

    def _reward_joint_vel(self) -> torch.Tensor:
        return rk.squared_norm(self.joint_vel)

    def _reward_joint_acc(self) -> torch.Tensor:
        return rk.squared_norm(self.joint_acc)

    def _reward_joint_pos_limits(self) -> torch.Tensor:
        return rk.out_of_limits(self.joint_pos, self.soft_lower, self.soft_upper)

    def _reward_joint_deviation_hip(self) -> torch.Tensor:
        dev = self.joint_pos - self.default_joint_pos
        return rk.squared_norm(dev[:, self._hip_idx])

    def _reward_joint_deviation_upper(self) -> torch.Tensor:
        dev = self.joint_pos - self.default_joint_pos
        return rk.squared_norm(dev[:, self._upper_idx])

    def _reward_stand_still(self) -> torch.Tensor:
        dev = (self.joint_pos - self.default_joint_pos).abs().sum(dim=1)
        return dev * self.standing

    def _reward_stand_still_motion(self) -> torch.Tensor:
        return rk.squared_norm(self.joint_vel) * self.standing

    def _reward_torso_orientation(self) -> torch.Tensor:
        # Gravity in the torso frame is -(third row of the world-from-torso rotation): its x, y parts.
        return rk.squared_norm(self.backend.xmat[:, self._torso_id, 2, :2])

    def _reward_feet_contact(self) -> torch.Tensor:
        """Number of feet whose contact state matches the gait clock (0-2)."""
        return (self.foot_contact == self._expected_stance()).float().sum(dim=1)

    def _reward_feet_swing_height(self) -> torch.Tensor:
        err = (self.foot_pos[..., 2] - self.cfg.rewards.swing_height).square()
        return (err * ~self.foot_contact).sum(dim=1)

    def _reward_feet_distance(self) -> torch.Tensor:
        feet = self.foot_pos[..., :2]
        gap = (feet[:, 0] - feet[:, 1]).norm(dim=1)
        return (self.cfg.rewards.min_feet_distance - gap).clamp(min=0.0)

    def _reward_feet_slip(self) -> torch.Tensor:
        return (rk.squared_norm(self.foot_vel[..., :2]) * self.foot_contact).sum(dim=1)


def _sanitize(obs: torch.Tensor, clip: float) -> torch.Tensor:
    # A diverged world terminates; its final obs must still be finite for the learner.
    return torch.nan_to_num(obs, nan=0.0, posinf=clip, neginf=-clip).clamp(-clip, clip)


def _index(values: list[int], device: torch.device) -> torch.Tensor:
    return torch.as_tensor(values, dtype=torch.long, device=device)

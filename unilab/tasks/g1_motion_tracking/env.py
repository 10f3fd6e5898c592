"""`g1_motion_tracking`: the G1 follows a reference motion clip (BeyondMimic-style).

The motion is one clip or a library of clips (a directory of clip files, concatenated). Each env
plays one clip from its own start frame, one clip frame per control step (clip time advances by the
control dt); the (clip, start frame) pairs are drawn by `sampling.StartSampler` (uniform, or weighted
towards the bins where episodes fail). At reset the robot is put on the reference frame, within the
configured reset noise. Rewards are exp kernels on the anchor (torso) pose error and on the errors of the
tracked bodies, whose reference is re-expressed around the robot's anchor (its xy position
and heading, the reference height), so drift in xy/yaw is not punished twice.

Episodes end `terminated` when the anchor height, the anchor tilt or an end-effector height
leaves the reference by more than the thresholds, and `truncated` at `episode_length_s` or
when the env's clip's last frame is reached (no looping: an arbitrary clip does not loop seamlessly).

Robustness (see docs/en/tracking-reference.md): pushes, per-world friction and CoM, noise on the policy's
observations only, a self-collision penalty and per-joint action spans.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np
import torch

from unilab.assets import g1
from unilab.motion import MotionClip, default_clip_path
from unilab.motion.library import MotionLibrary, load_motion_library
from unilab.sim.headless import mujoco
from unilab.tasks.common import math as qm
from unilab.tasks.common import randomization as dr
from unilab.tasks.common import rewards as rk
from unilab.tasks.common.base import TaskEnv
from unilab.tasks.g1_motion_tracking.config import G1MotionTrackingConfig
from unilab.tasks.g1_motion_tracking.sampling import StartSampler


def _unique(names) -> list[str]:
    return list(dict.fromkeys(names))


class G1MotionTrackingEnv(TaskEnv):
    def __init__(self, cfg: G1MotionTrackingConfig, sim_cfg, device: str = "cpu", seed: int = 0):
        model = cfg.build_model()  # the model the compose checks sized (unilab.config.sizes)
        # Bodies: the tracked ones first, then anchor / root / end effectors if not among them.
        free = np.flatnonzero(model.jnt_type == mujoco.mjtJoint.mjJNT_FREE)
        root = model.body(model.jnt_bodyid[free[0]]).name
        self.tracking_bodies = list(g1.G1_TRACKING_BODIES)
        self.body_names = _unique([*self.tracking_bodies, g1.G1_ANCHOR_BODY, root, *g1.G1_END_EFFECTORS])
        self.part_names = {"body_pos": tuple(self.tracking_bodies), "joint_pos": tuple(g1.G1_JOINT_NAMES)}
        # The clips are read before the backend compiles its kernels, so a bad file fails fast.
        path = cfg.motion_file if cfg.motion_file is not None else default_clip_path()
        self.motion = load_motion_library(path, body_names=self.body_names, num_joints=model.nu,
                                          joint_names=g1.G1_JOINT_NAMES)

        super().__init__(cfg, sim_cfg, model, device, seed)
        self.reward_weights = dataclasses.asdict(cfg.rewards.weights)
        if not cfg.self_collisions:
            self.reward_weights["self_collision"] = 0.0  # no self contacts, no sensor to read
        dev = self.device
        actuated = tuple(model.joint(j).name for j in model.actuator_trnid[:, 0])
        if actuated != tuple(g1.G1_JOINT_NAMES):
            raise ValueError("actuator order differs from G1_JOINT_NAMES, the joint order of motion clips")

        self.default_joint_pos = torch.as_tensor(g1.G1_DEFAULT_QPOS_JOINTS, dtype=torch.float32, device=dev)
        self.soft_lower, self.soft_upper = rk.soft_limits(
            self.joint_range[:, 0], self.joint_range[:, 1], cfg.rewards.soft_joint_limit_factor
        )

        self.num_tracked = len(self.tracking_bodies)
        self._anchor = self.body_names.index(g1.G1_ANCHOR_BODY)
        self._root = self.body_names.index(root)
        self._ee = torch.as_tensor([self.body_names.index(b) for b in g1.G1_END_EFFECTORS], device=dev)
        ids = np.array([model.body(b).id for b in self.body_names])
        self._body_ids = torch.as_tensor(ids, device=dev)
        nb = len(ids)
        self.body_pos = torch.zeros(self.num_envs, nb, 3, device=dev)
        self.body_quat = torch.zeros(self.num_envs, nb, 4, device=dev)
        self.body_rot = torch.zeros(self.num_envs, nb, 3, 3, device=dev)
        # cvel is expressed about the subtree CoM of each body's root (the pelvis for the G1).
        self._body_root_ids = torch.as_tensor(model.body_rootid[ids], device=dev)
        self._load_motion_tensors(self.motion)

        n = self.num_envs
        self.motion_clip = torch.zeros(n, dtype=torch.long, device=dev)
        self.motion_start = torch.zeros(n, dtype=torch.long, device=dev)
        self.motion_end = torch.zeros(n, dtype=torch.long, device=dev)  # last frame of the env's clip
        self.motion_frame = torch.zeros(n, dtype=torch.long, device=dev)
        self.sampler = StartSampler(self.motion.lengths, self.motion.offsets, self.motion.fps, cfg.sampling,
                                    self.device, self.generator)
        self._record_episode_ends = False  # True only inside step(): explicit resets are no episode ends
        self._timeout_steps = self.max_episode_length
        self.episode_limit = torch.full((n,), self._timeout_steps, dtype=torch.long, device=dev)
        self._forced_start: Optional[tuple[torch.Tensor, torch.Tensor]] = None
        self._metrics: dict[str, torch.Tensor] = {}
        self._residuals: Optional[dict[str, torch.Tensor]] = None
        self._action_span = self._per_joint_spans(cfg)
        rnd = cfg.randomization
        widths = [rnd.reset_root_pos] * 2 + [rnd.reset_root_yaw] + [rnd.reset_joint_pos] * model.nu
        widths = torch.tensor(widths + [rnd.reset_vel] * (6 + model.nu), device=dev)
        self._reset_noise_low_span = (-widths, 2.0 * widths)  # u in [0, 1) -> low + u * span
        self.action_offset = self.default_joint_pos.repeat(n, 1)  # (N, nu) the targets of action 0
        self._init_randomization(model)
        self._finish_init()

    # ------------------------------------------------------ robustness setup
    def _per_joint_spans(self, cfg: G1MotionTrackingConfig) -> torch.Tensor:
        """(nu,) rad an action of +-1 moves each joint target from the stand pose."""
        if cfg.action_scale == "per_joint":
            return cfg.per_joint_gain * self.per_joint_scale()
        return torch.full_like(self.default_joint_pos, float(cfg.action_scale))

    def per_joint_scale(self) -> torch.Tensor:
        """(nu,) the anchor tracker's action scale 0.25 * effort_limit / kp, from the model's actuators."""
        m = self.mj_model
        effort = m.actuator_forcerange[:, 1]
        return torch.as_tensor(0.25 * effort / m.actuator_gainprm[:, 0], dtype=torch.float32, device=self.device)

    def _init_randomization(self, model: mujoco.MjModel) -> None:
        """Per-world model fields and push schedule; before the first step (graphs hold field addresses)."""
        rnd, dev = self.cfg.randomization, self.device
        self.push_time_left = torch.full((self.num_envs,), math.inf, device=dev)
        self._push_half_widths = torch.as_tensor(rnd.push_max_vel, dtype=torch.float32, device=dev)
        self._geom_friction = dr.per_world_friction(self) if rnd.friction_range is not None else None
        self.com_offsets: Optional[dr.ComOffsets] = None
        if rnd.com_offset is not None:
            self.com_offsets = dr.ComOffsets(self, [model.body(b).id for b in rnd.com_bodies], rnd.com_offset)
        self._self_collision_adr = None
        if self.cfg.self_collisions:
            self._self_collision_adr = int(model.sensor_adr[model.sensor(g1.G1_SELF_COLLISION_SENSOR).id])

    def _reset_randomization(self, mask: torch.Tensor) -> None:
        rnd = self.cfg.randomization
        if self._geom_friction is not None:
            dr.resample_friction(self, self._geom_friction, mask, rnd.friction_range)
        if self.com_offsets is not None:
            self.com_offsets.resample(mask)
        if rnd.push_interval_s is not None:
            next_push = dr.push_intervals(self, rnd.push_interval_s)
            self.push_time_left.copy_(torch.where(mask, next_push, self.push_time_left))

    def action_spans(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._action_span, self._action_span

    @property
    def action_to_target(self) -> str:
        if self.cfg.action_offset == "reference":
            return ("ref_joint_pos of the clip's next frame (one control step after the observed ref_joint_pos)"
                    " + action * (action_span_high if action >= 0 else action_span_low)")
        return super().action_to_target

    def _apply_actions(self) -> None:
        self.backend.ctrl.copy_(self.action_offset + self._action_span * self.actions)

    _REF_FIELDS = ("joint_pos", "joint_vel", "body_pos_w", "body_quat_w", "body_lin_vel_w", "body_ang_vel_w")

    def _load_motion_tensors(self, motion: MotionLibrary) -> None:
        """Every clip's frames concatenated into one (frames, D) table, one row per frame holding all of
        its fields, so that a step reads a frame with one gather; the `ref_*_all` tensors are views of
        its columns. The clips lie apart by offset/length."""
        fields = [np.asarray(motion.concatenated(f), dtype=np.float32) for f in self._REF_FIELDS]
        frames = fields[0].shape[0]
        table = torch.as_tensor(np.concatenate([a.reshape(frames, -1) for a in fields], axis=1), device=self.device)
        self._ref_field_shapes = [a.shape[1:] for a in fields]

        self.num_frames = motion.num_frames
        self.frames_per_step = motion.fps * self.dt
        self.clip_names: list[str] = list(motion.names)
        self.clip_num_frames: list[int] = [int(x) for x in motion.lengths]
        self.clip_offset = torch.as_tensor(motion.offsets, dtype=torch.long, device=self.device)
        self.clip_length = torch.as_tensor(motion.lengths, dtype=torch.long, device=self.device)
        self._ref_table = table
        (self.ref_joint_pos_all, self.ref_joint_vel_all, self.ref_body_pos_all, self.ref_body_quat_all,
         self.ref_body_lin_vel_all, self.ref_body_ang_vel_all) = self._ref_columns(table)
        # The current frame of every env, written in place each step; ref_joint_pos etc. are its views.
        self._ref_rows = torch.zeros(self.num_envs, table.shape[1], device=self.device)
        (self.ref_joint_pos, self.ref_joint_vel, self.ref_body_pos, self.ref_body_quat,
         self.ref_body_lin_vel, self.ref_body_ang_vel) = self._ref_columns(self._ref_rows)

    def _ref_columns(self, rows: torch.Tensor) -> list[torch.Tensor]:
        """Views of each reference field in rows of the reference table, shaped as the field is per frame."""
        out, start = [], 0
        for shape in self._ref_field_shapes:
            width = int(np.prod(shape))
            out.append(rows[:, start:start + width].view(rows.shape[0], *shape))
            start += width
        return out

    @property
    def num_clips(self) -> int:
        return len(self.clip_names)

    @property
    def clip(self) -> MotionClip:
        """The motion's clip, when it has only one."""
        if self.num_clips != 1:
            raise AttributeError(f"the motion has {self.num_clips} clips; use env.motion.clips")
        return self.motion.clips[0]

    # ------------------------------------------------------------ contract
    def step(self, actions: torch.Tensor):
        # The base truncates at `episode_length >= max_episode_length`; for the duration of a
        # step that limit is per env: the time-out or the steps left to the clip's last frame.
        self.max_episode_length = self.episode_limit
        self._record_episode_ends = True
        try:
            obs, critic_obs, reward, terminated, truncated, info = super().step(actions)
        finally:
            self.max_episode_length = self._timeout_steps
            self._record_episode_ends = False
        return obs, critic_obs, reward, terminated, truncated, info

    def _extend_info(self, info) -> None:
        info.update(self._metrics)
        info.update(self.sampler.metrics(self.clip_names))

    def reset_to_clips(self, clip_ids: torch.Tensor, frames: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Reset env i onto clip `clip_ids[i]` at its frame `frames[i]` (default 0, clamped to the clip's
        start frames); the reset noise is the config's. Returns obs."""
        clip_ids = torch.as_tensor(clip_ids, device=self.device).long().expand(self.num_envs)
        if bool(((clip_ids < 0) | (clip_ids >= self.num_clips)).any()):
            raise ValueError(f"clip ids must be in [0, {self.num_clips})")
        local = torch.zeros_like(clip_ids) if frames is None else torch.as_tensor(frames, device=self.device).long()
        local = torch.minimum(local.expand(self.num_envs).clamp_min(0), self.clip_length[clip_ids] - 2)
        self._forced_start = (clip_ids, self.clip_offset[clip_ids] + local)
        return self.reset()

    def reset_to_frames(self, frames: torch.Tensor) -> torch.Tensor:
        """Reset every env onto the given frames of the first clip (the only one of a one-clip motion)."""
        return self.reset_to_clips(torch.zeros(self.num_envs, dtype=torch.long, device=self.device), frames)

    # ------------------------------------------------------------ dynamics
    def _frame_index(self, ahead: int = 0) -> torch.Tensor:
        steps = (self.episode_length + ahead).float() * self.frames_per_step
        return torch.minimum(self.motion_start + torch.round(steps).long(), self.motion_end)

    def _post_physics_step(self) -> None:
        rnd = self.cfg.randomization
        if rnd.push_interval_s is not None:  # before forward(): body velocities then include the kick
            dr.tick_pushes(self, self.push_time_left, rnd.push_interval_s, self._push_half_widths)
        self.backend.forward()  # body poses/velocities of the state after the step, not of its last substep
        self.motion_frame = self._frame_index()
        self._update_tracking()

    def _update_tracking(self) -> None:
        """Reference frame and robot body states, and the reference re-expressed around the robot anchor."""
        # In-place gathers into fixed buffers: no copy back into the state at the end of a captured step.
        torch.index_select(self._ref_table, 0, self.motion_frame, out=self._ref_rows)  # ref_joint_pos etc.
        if self.cfg.action_offset == "reference":  # the next step's PD targets are taken around these
            self.action_offset.copy_(self.ref_joint_pos_all[self._frame_index(ahead=1)])

        b = self.backend
        torch.index_select(b.xpos, 1, self._body_ids, out=self.body_pos)  # (N, B, 3)
        torch.index_select(b.xquat, 1, self._body_ids, out=self.body_quat)
        torch.index_select(b.xmat, 1, self._body_ids, out=self.body_rot)  # frame changes as one matmul each
        cvel = b.cvel[:, self._body_ids]
        self.body_ang_vel = cvel[..., :3]
        self.body_lin_vel = cvel[..., 3:] + torch.cross(
            self.body_ang_vel, self.body_pos - b.subtree_com[:, self._body_root_ids], dim=-1
        )

        a = self._anchor
        ref_anchor_pos, ref_anchor_quat = self.ref_body_pos[:, a], self.ref_body_quat[:, a]
        delta_yaw = qm.yaw_quat(qm.quat_mul(self.body_quat[:, a], qm.quat_conjugate(ref_anchor_quat)))
        origin = torch.cat((self.body_pos[:, a, :2], ref_anchor_pos[:, 2:]), dim=-1)
        delta_yaw_b = delta_yaw[:, None].expand_as(self.ref_body_quat)
        self.ref_body_pos_rel = origin[:, None] + qm.quat_apply(delta_yaw_b, self.ref_body_pos - ref_anchor_pos[:, None])
        self.ref_body_quat_rel = qm.quat_mul(delta_yaw_b, self.ref_body_quat)
        self._residuals = None  # the previous state's: the next _check_terminated computes them anew

    # --------------------------------------------------------------- reset
    def _reset_state(self, mask: torch.Tensor) -> None:
        self._sample_starts(mask)
        # In float64, as the metadata's rule reads: float32 makes 60 frames at 1.2 a step 49.999996 steps, not 50.
        frames_left = (self.motion_end - self.motion_start).double()
        steps_left = torch.floor(frames_left / self.frames_per_step + 1e-6).long()
        limit = steps_left.clamp(1, self._timeout_steps)
        self.episode_limit = torch.where(mask, limit, self.episode_limit)
        self.motion_frame = self._frame_index()

        self._reset_randomization(mask)  # the CoM offsets first: the reset's forward() then uses them
        qpos, qvel = self._reference_state(self.motion_frame)
        self._write_state(mask, qpos, qvel)
        self._update_tracking()

    def _sample_starts(self, mask: torch.Tensor) -> None:
        """(clip, start frame) of the masked envs: forced by reset_to_clips, else drawn by the sampler after
        it has counted the episodes that end here (in a step: their last frame is still motion_frame)."""
        if self._record_episode_ends:
            self.sampler.record(self.motion_clip, self.motion_frame, ended=mask, failed=mask & self.terminated)
        if self._forced_start is not None:
            (clip, start), self._forced_start = self._forced_start, None
        else:
            clip, start = self.sampler.sample(self.num_envs)
        self.motion_clip = torch.where(mask, clip, self.motion_clip)
        self.motion_start = torch.where(mask, start, self.motion_start)
        self.motion_end = self.clip_offset[self.motion_clip] + self.clip_length[self.motion_clip] - 1

    def _reference_state(self, frame: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, nq), (N, nv) of the clip frames, plus the configured reset noise."""
        r, nu = self._root, self.action_dim
        joint_pos, joint_vel, body_pos, body_quat, lin_vel, ang_vel = self._ref_columns(self._ref_table[frame])
        # One draw for every noise term: root xy, yaw, joint positions, then root and joint velocities.
        low, span = self._reset_noise_low_span
        u = torch.rand((self.num_envs, span.shape[0]), device=self.device, generator=self.generator)
        noise = torch.addcmul(low, u, span)  # uniform in [-w, w]
        d_xy, d_yaw, d_joint_pos, d_vel = noise.split((2, 1, nu, 6 + nu), dim=1)

        quat = qm.quat_mul(qm.quat_from_yaw(d_yaw[:, 0]), body_quat[:, r])
        qpos, qvel = self.qpos.clone(), self.qvel.clone()
        q, d = self.root_qpos_adr, self.root_dof_adr
        qpos[:, q:q + 2] = body_pos[:, r, :2] + d_xy
        qpos[:, q + 2] = body_pos[:, r, 2]
        qpos[:, q + 3:q + 7] = quat
        qpos[:, self._jq] = (joint_pos + d_joint_pos).clamp(self.joint_range[:, 0], self.joint_range[:, 1])
        # Free joint velocity: linear in the world frame, angular in the body frame.
        qvel[:, d:d + 3] = lin_vel[:, r] + d_vel[:, :3]
        qvel[:, d + 3:d + 6] = qm.quat_apply_inverse(quat, ang_vel[:, r] + d_vel[:, 3:6])
        qvel[:, self._jd] = joint_vel + d_vel[:, 6:]
        return qpos, qvel

    # ---------------------------------------------------------- terminations
    def _check_terminated(self) -> torch.Tensor:
        t, a = self.cfg.terminations, self._anchor
        anchor_height = (self.ref_body_pos[:, a, 2] - self.body_pos[:, a, 2]).abs() > t.anchor_height
        # The z component of gravity in the anchor frame is -R[2, 2], 2 (x^2 + y^2) - 1 for a unit quaternion.
        ref_xy = self.ref_body_quat[:, a, 1:3]
        gz_ref = 2.0 * (ref_xy * ref_xy).sum(dim=-1) - 1.0
        anchor_tilt = (gz_ref + self.body_rot[:, a, 2, 2]).abs() > t.anchor_gravity_z
        ee_z_error = (self.ref_body_pos_rel[:, self._ee, 2] - self.body_pos[:, self._ee, 2]).abs()
        ee_height = (ee_z_error > t.end_effector_height).any(dim=1)

        self._residuals = self._compute_residuals()  # kept for this step's rewards
        errors = self.tracking_errors(self._residuals)
        # One reduction for the errors and one for the terminations: the step is a graph of small kernels.
        error_means = torch.stack(list(errors.values())).mean(dim=1)
        self._metrics = {f"metrics/{k}_error": error_means[i] for i, k in enumerate(errors)}
        causes = {"term/anchor_height": anchor_height, "term/anchor_tilt": anchor_tilt,
                  "term/end_effector_height": ee_height}
        cause_means = torch.stack(list(causes.values())).float().mean(dim=1)
        self._metrics.update({k: cause_means[i] for i, k in enumerate(causes)})
        return anchor_height | anchor_tilt | ee_height

    def _tracking_residuals(self) -> dict[str, torch.Tensor]:
        """The residuals the terminations of this step computed (the rewards come after them), or, outside
        a step, those of the current state."""
        return self._residuals if self._residuals is not None else self._compute_residuals()

    def _compute_residuals(self) -> dict[str, torch.Tensor]:
        """Per-body residuals of the current state: (N, k) squared position errors and orientation errors
        (rad) of the tracked bodies against the anchor-relative reference, (N,) the anchor's squared
        position error and orientation error (rad)."""
        k, a = self.num_tracked, self._anchor
        # The anchor's orientation error rides along with the tracked bodies': one kernel chain for both.
        ref_quat = torch.cat((self.ref_body_quat_rel[:, :k], self.ref_body_quat[:, a : a + 1]), dim=1)
        quat = torch.cat((self.body_quat[:, :k], self.body_quat[:, a : a + 1]), dim=1)
        ori = qm.quat_error_magnitude(ref_quat, quat)
        return {
            "body_pos_sq": rk.squared_norm(self.ref_body_pos_rel[:, :k] - self.body_pos[:, :k]),
            "body_ori": ori[:, :k],
            "anchor_pos_sq": rk.squared_norm(self.ref_body_pos[:, a] - self.body_pos[:, a]),
            "anchor_ori": ori[:, k],
        }

    def tracking_errors(self, residuals: Optional[dict[str, torch.Tensor]] = None) -> dict[str, torch.Tensor]:
        """(N,) errors of the current state (or of the given residuals): mean tracked-body position error
        (m) and orientation error (rad) against the anchor-relative reference, anchor position (m) /
        orientation (rad) error, mean absolute joint position error (rad)."""
        r = residuals if residuals is not None else self._compute_residuals()
        return {
            "body_pos": r["body_pos_sq"].sqrt().mean(dim=1),
            "body_ori": r["body_ori"].mean(dim=1),
            "anchor_pos": r["anchor_pos_sq"].sqrt(),
            "anchor_ori": r["anchor_ori"],
            "joint_pos": (self.ref_joint_pos - self.joint_pos).abs().mean(dim=1),
        }

    def tracking_errors_and_parts(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """`tracking_errors` of the current state and, for the eval's breakdown, where its means come from:
        (N, tracked bodies) position errors (m) against the anchor-relative reference and (N, joints)
        absolute joint position errors (rad), in the order of `part_names`; one residual computation."""
        r = self._compute_residuals()
        parts = {"body_pos": r["body_pos_sq"].sqrt(), "joint_pos": (self.ref_joint_pos - self.joint_pos).abs()}
        return self.tracking_errors(r), parts

    def protocol_errors(self) -> dict[str, torch.Tensor]:
        """(N,) the published tables' mean position errors (m) of the tracked bodies: `global`, against the clip
        where it stands in the world (no re-anchoring), and `root_relative`, each body's offset from the root
        (the pelvis) against the clip's, so that drift of the whole body is left out."""
        k, r = self.num_tracked, self._root
        ref, pos = self.ref_body_pos[:, :k], self.body_pos[:, :k]
        moved = (ref - self.ref_body_pos[:, r:r + 1]) - (pos - self.body_pos[:, r:r + 1])
        return {"global": (ref - pos).norm(dim=-1).mean(dim=1), "root_relative": moved.norm(dim=-1).mean(dim=1)}

    # -------------------------------------------------------------- rewards
    def _reward_anchor_pos(self) -> torch.Tensor:
        return rk.exp_kernel(self._tracking_residuals()["anchor_pos_sq"], self.cfg.rewards.anchor_pos_std)

    def _reward_anchor_ori(self) -> torch.Tensor:
        err = self._tracking_residuals()["anchor_ori"]
        return rk.exp_kernel(err * err, self.cfg.rewards.anchor_ori_std)

    def _reward_body_pos(self) -> torch.Tensor:
        err = self._tracking_residuals()["body_pos_sq"].mean(dim=1)
        return rk.exp_kernel(err, self.cfg.rewards.body_pos_std)

    def _reward_body_ori(self) -> torch.Tensor:
        err = self._tracking_residuals()["body_ori"]
        return rk.exp_kernel((err * err).mean(dim=1), self.cfg.rewards.body_ori_std)

    def _reward_body_lin_vel(self) -> torch.Tensor:
        k = self.num_tracked
        err = rk.squared_norm(self.ref_body_lin_vel[:, :k] - self.body_lin_vel[:, :k]).mean(dim=1)
        return rk.exp_kernel(err, self.cfg.rewards.body_lin_vel_std)

    def _reward_body_ang_vel(self) -> torch.Tensor:
        k = self.num_tracked
        err = rk.squared_norm(self.ref_body_ang_vel[:, :k] - self.body_ang_vel[:, :k]).mean(dim=1)
        return rk.exp_kernel(err, self.cfg.rewards.body_ang_vel_std)

    def _reward_action_rate(self) -> torch.Tensor:
        return rk.squared_norm(self.actions - self.last_actions)

    def _reward_joint_limit(self) -> torch.Tensor:
        return rk.out_of_limits(self.joint_pos, self.soft_lower, self.soft_upper)

    def _reward_self_collision(self) -> torch.Tensor:
        """Number of contacts between two robot geoms (at the last substep)."""
        return self.backend.sensordata[:, self._self_collision_adr]

    # --------------------------------------------------------- observations
    _POLICY_TERM_NAMES = ("ref_joint_pos", "ref_joint_vel", "anchor_pos_b", "anchor_ori_b", "base_lin_vel_b",
                          "base_ang_vel_b", "joint_pos_rel", "joint_vel", "last_action")

    def _policy_terms(self) -> list[torch.Tensor]:
        a = self._anchor
        anchor_rot = self.body_rot[:, a]  # world from anchor; a row vector times it is R^T v
        anchor_pos_b = (self.ref_body_pos[:, a, None] - self.body_pos[:, a, None]) @ anchor_rot
        anchor_ori_b = qm.first_two_columns(anchor_rot.transpose(-1, -2) @ qm.quat_to_matrix(self.ref_body_quat[:, a]))
        return [
            self.ref_joint_pos,
            self.ref_joint_vel,
            anchor_pos_b.squeeze(1),
            anchor_ori_b,
            (self.base_lin_vel_w[:, None] @ self.body_rot[:, self._root]).squeeze(1),
            self.base_ang_vel_b,
            self.joint_pos - self.default_joint_pos,
            self.joint_vel,
            self.actions,
        ]

    def _compute_obs(self) -> torch.Tensor:
        return self._noisy_obs(self._policy_terms())

    def _noisy_obs(self, terms: list[torch.Tensor]) -> torch.Tensor:
        """The policy's copy of the terms, with uniform noise on the measured ones (not the reference
        terms, not the last action)."""
        o = self.cfg.observations
        widths = (0.0, 0.0, o.anchor_pos_noise, o.anchor_ori_noise, o.lin_vel_noise, o.ang_vel_noise,
                  o.joint_pos_noise, o.joint_vel_noise)
        return dr.noisy_concat(self, terms, widths, o.noise_scale)

    def policy_obs_layout(self) -> list[tuple[str, int, float]]:
        return [(n, int(t.shape[-1]), 1.0) for n, t in zip(self._POLICY_TERM_NAMES, self._policy_terms(), strict=True)]

    def deploy_description(self) -> dict:
        from unilab.tasks.g1_motion_tracking.metadata import deploy_description

        c = self.cfg
        return deploy_description(anchor_body=g1.G1_ANCHOR_BODY, root_body=self.body_names[self._root],
                                  tracked_bodies=self.tracking_bodies, end_effectors=g1.G1_END_EFFECTORS,
                                  action_offset=c.action_offset, terminations=dataclasses.asdict(c.terminations),
                                  self_collisions=c.self_collisions)

    def _compute_critic_obs(self) -> torch.Tensor:
        """Noise-free policy terms plus the tracked bodies' positions and orientations (6D) in the robot
        anchor frame."""
        return torch.cat((*self._policy_terms(), self._privileged_obs()), dim=-1)

    def _compute_observations(self) -> tuple[torch.Tensor, torch.Tensor]:
        terms = self._policy_terms()
        return self._noisy_obs(terms), torch.cat((*terms, self._privileged_obs()), dim=-1)

    def _privileged_obs(self) -> torch.Tensor:
        k, a = self.num_tracked, self._anchor
        anchor_rot = self.body_rot[:, a, None]  # (N, 1, 3, 3)
        pos_b = (self.body_pos[:, :k] - self.body_pos[:, a : a + 1]) @ anchor_rot[:, 0]
        ori_b = qm.first_two_columns(anchor_rot.transpose(-1, -2) @ self.body_rot[:, :k])
        return torch.cat((pos_b.flatten(1), ori_b.flatten(1)), dim=-1)

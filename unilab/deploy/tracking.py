"""A motion tracking policy in plain MuJoCo: one clip played from its first frame as `unilab eval` plays it (the
nominal suite: no noise, no pushes), the observation and the PD targets built from the metadata (`motion`), the
errors and completion of unilab.tasks.g1_motion_tracking.evaluation."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from unilab.sim.headless import mujoco
from unilab.tasks.g1_motion_tracking.evaluation import SUCCESS_MAX_GLOBAL_M

from .model import decimation
from .observe import Robot, action_targets, assemble
from .policy import DeployError


def load_clip(path: str, meta: dict):
    """The clip with the bodies the metadata's `motion` names, in that order; DeployError when it does not fit."""
    from unilab.motion.clip import MotionClipError, load_motion_clip

    motion = meta["motion"]
    if motion is None:
        raise DeployError("the policy's metadata has no `motion` (a schema 1 export): re-export it to play a clip")
    bodies = list(dict.fromkeys([*motion["tracked_bodies"], motion["anchor_body"], motion["root_body"],
                                 *motion["end_effectors"]]))
    try:
        return load_motion_clip(path, body_names=bodies, num_joints=meta["action_dim"],
                                joint_names=meta["joint_names"]), bodies
    except (MotionClipError, OSError) as exc:
        raise DeployError(f"--clip {path}: {exc}") from None


def _quat_conj(q):
    return np.array([q[0], -q[1], -q[2], -q[3]])


def _quat_mul(a, b):
    out = np.zeros(4)
    mujoco.mju_mulQuat(out, np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    return out


def _yaw_quat(q):
    w, x, y, z = q
    yaw = math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
    return np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)])


def _rotate(q, v):
    out = np.zeros(3)
    mujoco.mju_rotVecQuat(out, np.asarray(v, dtype=np.float64), np.asarray(q, dtype=np.float64))
    return out


def _mat(q):
    out = np.zeros(9)
    mujoco.mju_quat2Mat(out, np.asarray(q, dtype=np.float64))
    return out.reshape(3, 3)


def _angle(q1, q2) -> float:
    rel = _quat_mul(q1, _quat_conj(q2))
    return 2.0 * math.atan2(float(np.linalg.norm(rel[1:])), abs(rel[0]))


class ClipPlayer:
    """One env on one clip: the frame rule, the observation terms, the terminations and the errors."""

    def __init__(self, model, meta: dict, clip, bodies: list[str]):
        self.model, self.meta, self.clip = model, meta, clip
        motion = meta["motion"]
        self.robot = Robot(model, meta["joint_names"])
        ids = []
        for name in bodies:
            b = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name)
            if b < 0:
                raise DeployError(f"the model has no body {name!r} that the policy tracks")
            ids.append(b)
        self.ids = np.asarray(ids)
        self.k = len(motion["tracked_bodies"])
        self.anchor = bodies.index(motion["anchor_body"])
        self.root = bodies.index(motion["root_body"])
        self.ee = [bodies.index(b) for b in motion["end_effectors"]]
        self.frames_per_step = clip.fps * meta["control_dt"]
        self.last = clip.num_frames - 1
        self.steps = max(1, int(math.floor(self.last / self.frames_per_step + 1e-6)))
        self.ranges = model.jnt_range[[model.joint(n).id for n in meta["joint_names"]]]

    def frame(self, steps: int) -> int:
        return min(int(round(steps * self.frames_per_step)), self.last)

    def start(self, data) -> None:
        c, r, q, d = self.clip, self.root, self.robot.root_q, self.robot.root_d
        data.qpos[q:q + 3] = c.body_pos_w[0, r]
        data.qpos[q + 3:q + 7] = c.body_quat_w[0, r]
        data.qpos[self.robot.qpos_adr] = np.clip(c.joint_pos[0], self.ranges[:, 0], self.ranges[:, 1])
        data.qvel[d:d + 3] = c.body_lin_vel_w[0, r]
        data.qvel[d + 3:d + 6] = _mat(c.body_quat_w[0, r]).T @ c.body_ang_vel_w[0, r]
        data.qvel[self.robot.dof_adr] = c.joint_vel[0]
        mujoco.mj_forward(self.model, data)

    def observation(self, data, steps: int, last_action: np.ndarray) -> np.ndarray:
        c, f, a, robot = self.clip, self.frame(steps), self.anchor, self.robot
        rot = data.xmat[self.ids[a]].reshape(3, 3)
        root_rot = data.xmat[self.ids[self.root]].reshape(3, 3)
        terms = {
            "ref_joint_pos": lambda: c.joint_pos[f],
            "ref_joint_vel": lambda: c.joint_vel[f],
            "anchor_pos_b": lambda: rot.T @ (c.body_pos_w[f, a] - data.xpos[self.ids[a]]),
            "anchor_ori_b": lambda: (rot.T @ _mat(c.body_quat_w[f, a]))[:, :2].ravel(),
            "base_lin_vel_b": lambda: root_rot.T @ data.qvel[robot.root_d:robot.root_d + 3],
            "base_ang_vel_b": lambda: robot.base_ang_vel_b(data),
            "joint_pos_rel": lambda: robot.joint_pos(data) - np.asarray(self.meta["default_joint_pos"]),
            "joint_vel": lambda: robot.joint_vel(data),
            "last_action": lambda: last_action,
        }
        return assemble(self.meta, terms)

    def offset(self, steps: int) -> np.ndarray | None:
        """The PD targets' offset of the next action: the next frame's joint positions (action_offset reference)."""
        if self.meta["motion"]["action_offset"] == "reference":
            return np.asarray(self.clip.joint_pos[self.frame(steps + 1)], dtype=np.float64)
        return None

    def errors(self, data, steps: int) -> tuple[dict, bool]:
        """(errors of the state, terminated) against the frame of `steps`."""
        c, f, a, ends = self.clip, self.frame(steps), self.anchor, self.meta["terminations"]
        pos, quat = data.xpos[self.ids], data.xquat[self.ids]
        ref_pos, ref_quat = c.body_pos_w[f], c.body_quat_w[f]
        delta = _yaw_quat(_quat_mul(quat[a], _quat_conj(ref_quat[a])))
        origin = np.array([pos[a, 0], pos[a, 1], ref_pos[a, 2]])
        rel = np.stack([origin + _rotate(delta, p - ref_pos[a]) for p in ref_pos])
        body = np.linalg.norm(rel[:self.k] - pos[:self.k], axis=1)
        joints = np.abs(c.joint_pos[f] - self.robot.joint_pos(data))
        x, y = ref_quat[a, 1:3]
        tilt = abs(2.0 * (x * x + y * y) - 1.0 + data.xmat[self.ids[a]][8]) > ends["anchor_gravity_z"]
        low = abs(ref_pos[a, 2] - pos[a, 2]) > ends["anchor_height"]
        ee = bool(np.any(np.abs(rel[self.ee, 2] - pos[self.ee, 2]) > ends["end_effector_height"]))
        moved = (ref_pos[:self.k] - ref_pos[self.root]) - (pos[:self.k] - pos[self.root])
        out = {"body_pos": body, "joint_pos": joints, "anchor_ori": _angle(ref_quat[a], quat[a]),
               "global": float(np.linalg.norm(ref_pos[:self.k] - pos[:self.k], axis=1).mean()),
               "root_relative": float(np.linalg.norm(moved, axis=1).mean())}
        return out, bool(tilt or low or ee or not np.all(np.isfinite(data.qpos)))


def play_clip(model, policy, path: str, *, on_frame: Callable | None = None,
              progress: Callable[[str], None] | None = None) -> list[dict]:
    """Play the clip from its first frame to its last (or a termination); eval's row of it."""
    meta = policy.meta
    if meta["task"] != "g1_motion_tracking":
        raise DeployError(f"playing a clip needs a g1_motion_tracking policy, not {meta['task']}")
    clip, bodies = load_clip(path, meta)
    player = ClipPlayer(model, meta, clip, bodies)
    data = mujoco.MjData(model)
    player.start(data)
    substeps = decimation(meta, model)
    last_action = np.zeros(meta["action_dim"])
    body_sum, joint_sum, ori_sum, measured, tracked, fell = 0.0, 0.0, 0.0, 0, 0, False
    protocol = {"global": 0.0, "root_relative": 0.0, "worst": 0.0}  # eval's protocol metrics
    for step in range(player.steps):
        action = np.clip(policy(player.observation(data, step, last_action)), -1.0, 1.0)
        data.ctrl[player.robot.actuators] = action_targets(meta, action, player.offset(step))
        for _ in range(substeps):
            mujoco.mj_step(model, data)
        mujoco.mj_forward(model, data)  # body poses of the state after the step, as the env reads them
        last_action = action
        if on_frame is not None:
            on_frame(data)
        errors, terminated = player.errors(data, step + 1)
        if terminated:
            fell = True
            break
        tracked += 1
        if step + 1 < player.steps:  # the truncating step ends the episode: eval measures the steps before it
            body_sum = body_sum + errors["body_pos"]
            joint_sum = joint_sum + errors["joint_pos"]
            ori_sum += errors["anchor_ori"]
            protocol["global"] += errors["global"]
            protocol["root_relative"] += errors["root_relative"]
            protocol["worst"] = max(protocol["worst"], errors["global"])
            measured += 1
        if progress is not None and (step + 1) % 250 == 0:
            progress(f"step {step + 1}/{player.steps}")
    return [clip_row(Path(path).stem, clip.num_frames, meta, bodies[:player.k], fell, tracked, measured,
                     body_sum, joint_sum, ori_sum, player.frames_per_step, protocol)]


def clip_row(name, frames, meta, tracked_bodies, fell, tracked, measured, body_sum, joint_sum, ori_sum,
             frames_per_step, protocol: dict) -> dict:
    """eval's row of one clip played by one env."""
    to_track = frames - 1
    completion = min(round(tracked * frames_per_step), to_track) / to_track if fell else 1.0
    if measured:
        body, joints = np.asarray(body_sum) / measured, np.asarray(joint_sum) / measured
        by_body = dict(zip(tracked_bodies, (1000.0 * body).tolist()))
        by_joint = dict(zip(meta["joint_names"], joints.tolist()))
        errs = (1000.0 * float(body.mean()), float(joints.mean()), ori_sum / measured)
    else:
        by_body, by_joint, errs = None, None, (None, None, None)
    def mm(key):  # the protocol's means, as eval's rows have them
        return 1000.0 * protocol[key] / measured if measured else None

    return {"clip": name, "frames": int(frames), "completion": float(completion), "body_pos_error_mm": errs[0],
            "joint_pos_error_rad": errs[1], "anchor_ori_error_rad": errs[2], "fall_fraction": float(fell),
            "body_pos_error_mm_by_body": by_body, "joint_pos_error_rad_by_joint": by_joint,
            "global_body_pos_error_mm": mm("global"), "root_relative_body_pos_error_mm": mm("root_relative"),
            "success": float(not fell and protocol["worst"] <= SUCCESS_MAX_GLOBAL_M)}

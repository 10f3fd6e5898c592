"""The policy's observation built from MjData as its metadata describes it (`observation_names`, `_scales`,
`_clip`; each term's frame and unit in `observation_frames`), and its action turned into PD targets
(`action_span_low` / `_high` around `default_joint_pos`). Joints are found by name, so a model with another joint
order (mjlab's) is read and driven in the policy's actuator order."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from unilab.sim.headless import mujoco

from .policy import DeployError


class Robot:
    """Where the policy's joints and the free root live in a model: qpos/qvel addresses and actuators, in the
    policy's joint order."""

    def __init__(self, model: mujoco.MjModel, joint_names: list[str]):
        free = np.flatnonzero(model.jnt_type == mujoco.mjtJoint.mjJNT_FREE)
        if len(free) != 1:
            raise DeployError(f"the model has {len(free)} free joints; a floating base needs one")
        self.root_q = int(model.jnt_qposadr[free[0]])
        self.root_d = int(model.jnt_dofadr[free[0]])
        joints = []
        for name in joint_names:
            j = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
            if j < 0:
                raise DeployError(f"the model has no joint {name!r} that the policy drives")
            joints.append(j)
        self.qpos_adr = model.jnt_qposadr[joints].astype(np.int64)
        self.dof_adr = model.jnt_dofadr[joints].astype(np.int64)
        by_joint = {int(model.actuator_trnid[a, 0]): a for a in range(model.nu)}
        missing = [n for n, j in zip(joint_names, joints) if j not in by_joint]
        if missing:
            raise DeployError(f"no actuator drives {', '.join(missing)}")
        self.actuators = np.asarray([by_joint[j] for j in joints], dtype=np.int64)

    def base_quat(self, data) -> np.ndarray:
        return data.qpos[self.root_q + 3:self.root_q + 7]

    def base_rot(self, data) -> np.ndarray:
        """World from pelvis, (3, 3)."""
        rot = np.zeros(9)
        mujoco.mju_quat2Mat(rot, self.base_quat(data))
        return rot.reshape(3, 3)

    def base_lin_vel_b(self, data) -> np.ndarray:
        return self.base_rot(data).T @ data.qvel[self.root_d:self.root_d + 3]

    def base_ang_vel_b(self, data) -> np.ndarray:
        return data.qvel[self.root_d + 3:self.root_d + 6].copy()

    def projected_gravity(self, data) -> np.ndarray:
        return self.base_rot(data).T @ np.array([0.0, 0.0, -1.0])

    def joint_pos(self, data) -> np.ndarray:
        return data.qpos[self.qpos_adr]

    def joint_vel(self, data) -> np.ndarray:
        return data.qvel[self.dof_adr]


@dataclass
class WalkInputs:
    """What the walk observation needs besides the state: the command, the steps since the episode's reset and the
    last action."""

    command: np.ndarray
    steps: int = 0
    last_action: np.ndarray = field(default_factory=lambda: np.zeros(0))


def gait_phase(meta: dict, steps: int) -> float:
    """The metadata's phase rule: (steps since reset * control_dt / period) mod 1."""
    if meta["gait"] is None:
        raise DeployError("the policy observes a gait clock but its metadata has no `gait` (schema 1): re-export it")
    return math.fmod(steps * meta["control_dt"] / meta["gait"]["period_s"], 1.0)


def _walk_terms(meta: dict, robot: Robot, data, inputs: WalkInputs) -> dict:
    default = np.asarray(meta["default_joint_pos"])
    phase = 2.0 * math.pi * gait_phase(meta, inputs.steps) if "gait_phase_sin_cos" in meta["observation_names"] else 0
    return {
        "base_ang_vel": lambda: robot.base_ang_vel_b(data),
        "projected_gravity": lambda: robot.projected_gravity(data),
        "joint_pos_rel": lambda: robot.joint_pos(data) - default,
        "joint_vel": lambda: robot.joint_vel(data),
        "last_action": lambda: inputs.last_action,
        "command": lambda: inputs.command,
        "gait_phase_sin_cos": lambda: np.array([math.sin(phase), math.cos(phase)]),
    }


def assemble(meta: dict, terms: dict) -> np.ndarray:
    """The terms in the metadata's order, each times its scale, checked against its size, clipped."""
    parts = []
    for name, size, scale in zip(meta["observation_names"], meta["observation_sizes"], meta["observation_scales"],
                                 strict=True):
        if name not in terms:
            raise DeployError(f"the policy observes {name!r}, which sim2sim does not build for task {meta['task']}")
        value = np.asarray(terms[name](), dtype=np.float64).ravel() * scale
        if value.shape != (size,):
            raise DeployError(f"observation term {name}: built {value.shape[0]} values, the metadata says {size}")
        parts.append(value)
    obs = np.concatenate(parts)
    clip = meta["observation_clip"]
    if clip is not None:
        obs = np.clip(np.nan_to_num(obs, nan=0.0, posinf=clip, neginf=-clip), -clip, clip)
    return obs.astype(np.float32)


def walk_observation(meta: dict, robot: Robot, data, inputs: WalkInputs) -> np.ndarray:
    return assemble(meta, _walk_terms(meta, robot, data, inputs))


def action_targets(meta: dict, action: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
    """PD targets, policy joint order: offset (default_joint_pos) + action * (span_high if action >= 0 else
    span_low), the action first clipped to [-1, 1] as the env does."""
    a = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
    base = np.asarray(meta["default_joint_pos"]) if offset is None else offset
    low, high = np.asarray(meta["action_span_low"]), np.asarray(meta["action_span_high"])
    return base + np.where(a < 0.0, a * low, a * high)

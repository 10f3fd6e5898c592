"""A walk policy in plain MuJoCo: each command held from the metadata's start state for `hold_s`, the pelvis
velocity averaged over the last `window_s` (unilab eval's metrics, unilab.tasks.g1_walk_flat.evaluation), with
optional pushes: every `push_interval_s` the pelvis gets `push_vel` m/s more, in a random horizontal direction."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from unilab.sim.headless import mujoco

from .model import decimation
from .observe import Robot, WalkInputs, action_targets, walk_observation
from .policy import DeployError


@dataclass
class WalkSettings:
    hold_s: float = 10.0
    window_s: float = 6.0
    envs_per_command: int = 1
    push_vel: float = 0.0  # m/s added to the pelvis per push (0: no pushes)
    push_interval_s: float = 3.0
    seed: int = 0


def start_state(meta: dict, model: mujoco.MjModel, robot: Robot, *, on_floor: bool = False) -> np.ndarray:
    """qpos of the metadata's start state (`episode_start`): the default pose at its base height. on_floor: lower
    or raise the robot so that its lowest collision geom touches the floor (a model with other feet)."""
    start = meta["episode_start"] or {"base_pos": [0.0, 0.0, 0.7569], "base_quat": [1.0, 0.0, 0.0, 0.0]}
    qpos = model.qpos0.copy()
    qpos[robot.root_q:robot.root_q + 3] = start["base_pos"]
    qpos[robot.root_q + 3:robot.root_q + 7] = start["base_quat"]
    qpos[robot.qpos_adr] = meta["default_joint_pos"]
    if on_floor:
        data = mujoco.MjData(model)
        data.qpos[:] = qpos
        mujoco.mj_forward(model, data)
        qpos[robot.root_q + 2] -= _lowest_point(model, data) - 1e-3
    return qpos


def _lowest_point(model: mujoco.MjModel, data) -> float:
    """Lowest z of the robot's collision geoms (capsule and sphere ends, box corners; the plane left out)."""
    low = math.inf
    for g in range(model.ngeom):
        kind = model.geom_type[g]
        if not model.geom_conaffinity[g] or kind == mujoco.mjtGeom.mjGEOM_PLANE:
            continue
        pos, rot, size = data.geom_xpos[g], data.geom_xmat[g].reshape(3, 3), model.geom_size[g]
        if kind in (mujoco.mjtGeom.mjGEOM_CAPSULE, mujoco.mjtGeom.mjGEOM_CYLINDER):
            low = min(low, pos[2] - abs(rot[2, 2]) * size[1] - size[0])
        elif kind == mujoco.mjtGeom.mjGEOM_BOX:
            low = min(low, pos[2] - np.abs(rot[2]) @ size)
        else:
            low = min(low, pos[2] - model.geom_rbound[g])
    return low


def fell(meta: dict, robot: Robot, data) -> bool:
    """The walk task's termination: pelvis too low, tilted too far, or a diverged state."""
    ends = meta["terminations"] or {"min_base_height": 0.3, "max_tilt_rad": 1.0}
    if not np.all(np.isfinite(data.qpos)):
        return True
    too_low = data.qpos[robot.root_q + 2] < ends["min_base_height"]
    return bool(too_low or robot.projected_gravity(data)[2] > -math.cos(ends["max_tilt_rad"]))


def torque_share(model: mujoco.MjModel, robot: Robot, data) -> float:
    """Mean over joints of |PD torque| / effort limit (eval's torque_share), from the actuators' own law."""
    act = robot.actuators
    kp, kd = model.actuator_gainprm[act, 0], -model.actuator_biasprm[act, 2]
    limit = model.actuator_forcerange[act, 1]
    tau = kp * (data.ctrl[act] - robot.joint_pos(data)) - kd * robot.joint_vel(data)
    return float(np.mean(np.minimum(np.abs(tau), limit) / limit))


def hold(model: mujoco.MjModel, policy, meta: dict, command, settings: WalkSettings, *, rng: np.random.Generator,
         on_floor: bool = False, on_frame: Optional[Callable] = None) -> dict:
    """One env holding one command: {fell, velocity (vx, vy, wz) mean over the window, torque_share}."""
    robot = Robot(model, meta["joint_names"])
    data = mujoco.MjData(model)
    data.qpos[:] = start_state(meta, model, robot, on_floor=on_floor)
    mujoco.mj_forward(model, data)
    substeps = decimation(meta, model)
    steps = int(round(settings.hold_s / meta["control_dt"]))
    window = min(steps, int(round(settings.window_s / meta["control_dt"])))
    push_every = int(round(settings.push_interval_s / meta["control_dt"])) if settings.push_vel > 0 else 0
    inputs = WalkInputs(np.asarray(command, dtype=np.float64), 0, np.zeros(len(meta["joint_names"])))
    vel, torque = np.zeros(3), 0.0
    for t in range(steps):
        action = np.clip(policy(walk_observation(meta, robot, data, inputs)), -1.0, 1.0)
        data.ctrl[robot.actuators] = action_targets(meta, action)
        for _ in range(substeps):
            mujoco.mj_step(model, data)
        inputs.steps, inputs.last_action = inputs.steps + 1, action
        if push_every and inputs.steps % push_every == 0:  # after the physics, as the env pushes
            angle = rng.uniform(0.0, 2.0 * math.pi)
            data.qvel[robot.root_d:robot.root_d + 2] += settings.push_vel * np.array([math.cos(angle), math.sin(angle)])
        if on_frame is not None:
            on_frame(data)
        if fell(meta, robot, data):
            return {"fell": True, "velocity": None, "torque_share": None}
        if t >= steps - window:
            vel[:2] += robot.base_lin_vel_b(data)[:2]
            vel[2] += robot.base_ang_vel_b(data)[2]
            torque += torque_share(model, robot, data)
    return {"fell": False, "velocity": vel / window, "torque_share": torque / window}


def rollout(model: mujoco.MjModel, policy, commands, settings: WalkSettings | None = None, *,
            on_floor: bool = False, on_frame: Optional[Callable] = None,
            progress: Optional[Callable[[str], None]] = None) -> list[dict]:
    """Hold each command with `settings.envs_per_command` envs; one row per command, eval's keys. `policy`: obs
    (numpy) -> action; `on_frame(data)` after every policy step (video, a viewer)."""
    settings = settings or WalkSettings()
    meta = policy.meta
    if meta["task"] != "g1_walk_flat":
        raise DeployError(f"a walk rollout needs a g1_walk_flat policy, not {meta['task']}")
    rows = []
    for i, command in enumerate(commands):
        runs = [hold(model, policy, meta, command, settings, rng=np.random.default_rng([settings.seed, i, k]),
                     on_floor=on_floor, on_frame=on_frame) for k in range(settings.envs_per_command)]
        rows.append(command_row(command, runs))
        if progress is not None:
            r = rows[-1]
            progress(f"command {i + 1}/{len(commands)} ({', '.join(f'{c:+.1f}' for c in command)}): "
                     f"falls {100 * r['fall_fraction']:.0f}%")
    return rows


def command_row(command, runs: list[dict]) -> dict:
    """eval's row of one command: achieved velocity, errors and torque share over the envs that did not fall."""
    c = np.asarray(command, dtype=np.float64)
    ok = [r for r in runs if not r["fell"]]
    if ok:
        v = np.stack([r["velocity"] for r in ok])
        achieved = [round(float(x), 4) for x in v.mean(axis=0)]
        lin = float(np.mean(np.linalg.norm(v[:, :2] - c[:2], axis=1)))
        yaw = float(np.mean(np.abs(v[:, 2] - c[2])))
        torque = float(np.mean([r["torque_share"] for r in ok]))
    else:
        achieved, lin, yaw, torque = None, None, None, None  # every env fell: nothing measured
    return {"command": [float(x) for x in command], "achieved": achieved, "lin_error": lin, "yaw_error": yaw,
            "fall_fraction": float(sum(r["fell"] for r in runs) / len(runs)), "torque_share": torque}

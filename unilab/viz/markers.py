"""What a frame draws on top of the robot: the task's target (the walk command, the tracking reference)
and a floor grid that shows motion under a tracking camera. Markers are plain host data computed per
frame from the env's state, then added to a renderer's or viewer's scene as extra geoms."""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

COMMAND_RGBA = (0.1, 0.85, 0.2, 0.9)  # commanded velocity
ACTUAL_RGBA = (0.15, 0.35, 1.0, 0.9)  # the root's velocity
REFERENCE_RGBA = (1.0, 0.2, 0.2, 0.6)  # reference body positions
GRID_RGBA = (0.55, 0.55, 0.55, 1.0)
ARROW_HEIGHT = 0.6  # above the root, so the arrows clear the arms
ARROW_WIDTH = 0.025
SPHERE_RADIUS = 0.035
GRID_HALF_CELLS = 6  # grid lines at whole metres up to this far from the camera's target
GRID_LINE = 0.01  # half-width of a grid line (m)


@dataclass(frozen=True)
class Arrow:
    start: tuple[float, float, float]
    end: tuple[float, float, float]
    rgba: tuple[float, float, float, float]
    line: bool = False  # a plain thin line (the floor grid), not an arrow


@dataclass(frozen=True)
class Sphere:
    pos: tuple[float, float, float]
    rgba: tuple[float, float, float, float]


def task_markers(env, worlds: int) -> list[list]:
    """Per world (the first `worlds`), the markers of the env's task: the walk command against the
    root's velocity (arrows from above the root), or the tracking reference (spheres at the reference
    body positions around the robot's anchor). Other tasks draw none."""
    import torch

    with torch.no_grad():
        root = _host(env.base_pos[:worlds])
        ref = getattr(env, "ref_body_pos_rel", None)
        if ref is not None:
            k = int(getattr(env, "num_tracked", ref.shape[1]))
            bodies = _host(ref[:worlds, :k])
            return [[Sphere(tuple(p), REFERENCE_RGBA) for p in bodies[w]] for w in range(worlds)]
        commands = getattr(env, "commands", None)
        if commands is None:
            return [[] for _ in range(worlds)]
        from unilab.tasks.common import math as qm

        cmd = commands[:worlds]
        planar = torch.cat([cmd[:, :2], torch.zeros_like(cmd[:, :1])], dim=1)
        cmd_w = _host(qm.quat_apply(env.base_quat[:worlds], planar))  # body-frame command, in the world
        vel_w = _host(env.base_lin_vel_w[:worlds])
    out = []
    for w in range(worlds):
        start = root[w] + np.array([0.0, 0.0, ARROW_HEIGHT])
        out.append([Arrow(tuple(start), tuple(start + [cmd_w[w, 0], cmd_w[w, 1], 0.0]), COMMAND_RGBA),
                    Arrow(tuple(start), tuple(start + [vel_w[w, 0], vel_w[w, 1], 0.0]), ACTUAL_RGBA)])
    return out


def floor_grid(center) -> list[Arrow]:
    """Thin lines on the floor at whole metres around `center` (x, y): the floor is one flat colour."""
    cx, cy = int(round(float(center[0]))), int(round(float(center[1])))
    n = GRID_HALF_CELLS
    lines = []
    for i in range(-n, n + 1):
        lines.append(Arrow((cx + i, cy - n, 0.001), (cx + i, cy + n, 0.001), GRID_RGBA, line=True))
        lines.append(Arrow((cx - n, cy + i, 0.001), (cx + n, cy + i, 0.001), GRID_RGBA, line=True))
    return lines


def add_to_scene(scene: mujoco.MjvScene, markers) -> int:
    """Append the markers to `scene` as decor geoms, as many as it has room for; returns how many."""
    added = 0
    eye = np.eye(3).flatten()
    for m in markers:
        if scene.ngeom >= scene.maxgeom:
            break
        g = scene.geoms[scene.ngeom]
        rgba = np.asarray(m.rgba, dtype=np.float32)
        if isinstance(m, Sphere):
            mujoco.mjv_initGeom(g, mujoco.mjtGeom.mjGEOM_SPHERE, np.full(3, SPHERE_RADIUS), np.asarray(m.pos),
                                eye, rgba)
        else:
            start, end = np.asarray(m.start, dtype=np.float64), np.asarray(m.end, dtype=np.float64)
            if not m.line and np.linalg.norm(end - start) < 1e-3:
                continue  # a zero velocity: no arrow
            mujoco.mjv_initGeom(g, mujoco.mjtGeom.mjGEOM_BOX, np.zeros(3), np.zeros(3), eye, rgba)
            kind = mujoco.mjtGeom.mjGEOM_CAPSULE if m.line else mujoco.mjtGeom.mjGEOM_ARROW
            mujoco.mjv_connector(g, kind, GRID_LINE if m.line else ARROW_WIDTH, start, end)
        g.category = mujoco.mjtCatBit.mjCAT_DECOR
        scene.ngeom += 1
        added += 1
    return added


def _host(t) -> np.ndarray:
    return t.detach().to("cpu", dtype=t.dtype).double().numpy()

"""Where a G1 clip's body is against the floor (z = 0): the lowest point of each foot's collision geoms, and
of all of them, by forward kinematics on our G1. `unilab motion info` reports feet below the floor and a
body held above it; `unilab motion import --lift-to-floor` lifts the root out of the floor."""

from __future__ import annotations

import numpy as np

# m: a sole lower than this below the floor counts as in it. Retargeted clips dip a few mm at foot strikes;
# a reference that stays in the floor for seconds cannot be tracked by a robot standing on it.
BELOW_FLOOR_M = 0.01
# m: the whole body's lowest point higher than this counts as off the floor. A jog's flight lifts it about
# 5 cm for a fraction of a second; a clip held above this for longer stands on something the world lacks
# (a slope, a box, a step), and a robot on flat ground cannot follow it there.
ABOVE_FLOOR_M = 0.10
# s: feet below the floor this long are a stance in it, not a dip at a foot strike; a body above it this
# long is held up by something, not in a jump's flight. Import warns of either, and info flags the latter.
FLOOR_WARN_S = 0.5


def lowest_point_z(model, data, geoms) -> np.ndarray:
    """(len(geoms),) the lowest world z of each geom, exact for spheres, capsules, cylinders and boxes
    (others by their bounding sphere). `G1Kinematics.foot_lowest_z` bounds it by the geoms' bounding
    boxes, which is what clip synthesis places on the floor; here the exact point is measured."""
    from unilab.sim.headless import mujoco

    z = data.geom_xpos[geoms, 2]
    axis_z = np.abs(data.geom_xmat[geoms].reshape(-1, 3, 3)[:, 2, :])  # |z component| of each local axis
    size, kind, t = model.geom_size[geoms], model.geom_type[geoms], mujoco.mjtGeom
    low = z - model.geom_rbound[geoms]
    sphere, capsule = kind == t.mjGEOM_SPHERE, kind == t.mjGEOM_CAPSULE
    cylinder, box = kind == t.mjGEOM_CYLINDER, kind == t.mjGEOM_BOX
    low[sphere] = z[sphere] - size[sphere, 0]
    low[capsule] = z[capsule] - axis_z[capsule, 2] * size[capsule, 1] - size[capsule, 0]
    radial = np.sqrt(np.clip(1.0 - axis_z[:, 2] ** 2, 0.0, 1.0))  # how far the flat ends tilt
    low[cylinder] = z[cylinder] - axis_z[cylinder, 2] * size[cylinder, 1] - radial[cylinder] * size[cylinder, 0]
    low[box] = z[box] - (axis_z[box] * size[box]).sum(axis=1)
    return low


def lowest_points(kin, qpos: np.ndarray, geom_sets) -> np.ndarray:
    """(frames, sets) the lowest point of each set of geoms for (frames, nq) G1 qpos (root position, root
    quaternion wxyz, joints in the G1's order), by one forward-kinematics pass of `kin` (a
    unilab.motion.synth.G1Kinematics)."""
    out = np.empty((len(qpos), len(geom_sets)))
    for t, q in enumerate(qpos):
        kin.fk(q)
        out[t] = [lowest_point_z(kin.m, kin.d, geoms).min() for geoms in geom_sets]
    return out


def sole_heights(kin, qpos: np.ndarray) -> np.ndarray:
    """(frames, feet) the lowest point of each foot's collision geoms (`kin.foot_geoms`)."""
    return lowest_points(kin, qpos, kin.foot_geoms)


def floor_heights(kin, qpos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`sole_heights` and (frames,) the lowest point of all the robot's collision geoms (`kin.collision_geoms`),
    in one pass."""
    heights = lowest_points(kin, qpos, [*kin.foot_geoms, kin.collision_geoms])
    return heights[:, :-1], heights[:, -1]


def longest_run(flags: np.ndarray) -> tuple[int, int]:
    """(length, first index) of the longest stretch of consecutive True values; (0, 0) when there is none."""
    best, start, run = 0, 0, 0
    for i, f in enumerate(flags):
        run = run + 1 if f else 0
        if run > best:
            best, start = run, i - run + 1
    return best, start


def lift_to_floor(qpos: np.ndarray, soles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """qpos with the root raised, frame by frame, by how far its lower sole (`soles`, its `sole_heights`) is
    below the floor (never lowered), and the lift (frames,) in m. Frames whose feet are on or above the floor
    keep their root."""
    lift = np.maximum(0.0, -soles.min(axis=1))
    lifted = qpos.copy()
    lifted[:, 2] += lift
    return lifted, lift

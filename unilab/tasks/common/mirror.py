"""The left-right mirror of a bilateral robot, read from its model: the reflection through the x-z plane
(y -> -y) of the robot's joints, of its floating base and of the vectors a task observes.

Each joint's partner is the joint of the other side (`left_` <-> `right_`; a joint on the mid-plane is its
own partner), and its sign says whether the partner turns the same way (+1: the axes are mirror images with
the handedness reversed, a pitch joint) or the opposite way (-1: a roll or yaw joint). Both come from the
joint axes and anchors at the model's zero pose, so a model whose sides are not mirror images is refused
instead of being mirrored wrongly.
"""

from __future__ import annotations

import numpy as np

from unilab.sim.headless import mujoco

REFLECT = np.diag([1.0, -1.0, 1.0])  # y -> -y

# The mirror of a 3-vector, as (perm, sign): a polar vector (position, linear velocity, gravity) keeps x and z,
# an axial one (angular velocity) keeps y only.
POLAR = ((0, 1, 2), (1.0, -1.0, 1.0))
AXIAL = ((0, 1, 2), (-1.0, 1.0, -1.0))


def partner(name: str) -> str:
    for a, b in (("left_", "right_"), ("right_", "left_")):
        if name.startswith(a):
            return b + name[len(a):]
    return name


def joint_mirror(model: mujoco.MjModel, joint_names: tuple[str, ...] | list[str],
                 atol: float = 1e-6) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """(perm, sign) over `joint_names`: mirroring a pose puts sign[i] * q[perm[i]] at joint i."""
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    index = {name: i for i, name in enumerate(joint_names)}
    perm, sign = [], []
    for name in joint_names:
        other = partner(name)
        if other not in index:
            raise ValueError(f"joint {name}: its mirror partner {other} is not among the joints")
        a, b = (model.joint(n).id for n in (name, other))
        axis, other_axis = data.xaxis[a], data.xaxis[b]
        if not np.allclose(REFLECT @ data.xanchor[a], data.xanchor[b], atol=atol):
            raise ValueError(f"joints {name} and {other} do not sit at mirror-image places")
        if np.allclose(other_axis, -REFLECT @ axis, atol=atol):
            s = 1.0
        elif np.allclose(other_axis, REFLECT @ axis, atol=atol):
            s = -1.0
        else:
            raise ValueError(f"joints {name} and {other} turn about axes that are not mirror images")
        perm.append(index[other])
        sign.append(s)
    return tuple(perm), tuple(sign)


def mirror_free_qpos(qpos: np.ndarray) -> np.ndarray:
    """Position (x, y, z) and orientation (w, x, y, z) of a free joint, mirrored."""
    x, y, z, qw, qx, qy, qz = qpos
    return np.array([x, -y, z, qw, -qx, qy, -qz])


def mirror_free_qvel(qvel: np.ndarray) -> np.ndarray:
    """Linear velocity (world frame) and angular velocity (body frame) of a free joint, mirrored."""
    v, w = np.asarray(qvel[:3]), np.asarray(qvel[3:])
    return np.concatenate((v * POLAR[1], w * AXIAL[1]))

"""Unitree G1 29-DoF as a ``mujoco.MjSpec``, built from the figures in ``g1_figures``.

Collision uses primitives only (capsules/spheres), three capsules under each sole.
Robot geoms collide with the floor but not with each other unless
``self_collisions=True``. Every joint carries a ``<position>``-style PD actuator
with kp = J w^2, kd = 2 zeta J w (J: reflected rotor inertia = joint armature).
"""

from __future__ import annotations

import math

import numpy as np

from unilab.assets import g1_figures as fig
from unilab.sim.headless import mujoco

_AXES = {"x": (1.0, 0.0, 0.0), "y": (0.0, 1.0, 0.0), "z": (0.0, 0.0, 1.0)}


def _mirror_name(name: str) -> str:
    return "right_" + name[len("left_"):] if name.startswith("left_") else name


def _mirror_vec(v):
    return (v[0], -v[1], v[2])


def _mirror_quat(q):
    # Reflection through the x-z plane: R -> M R M with M = diag(1, -1, 1).
    return None if q is None else (q[0], -q[1], q[2], -q[3])


def _mirror_link(link: fig.Link) -> fig.Link:
    lo, hi = link.range
    return link._replace(
        name=_mirror_name(link.name),
        parent=_mirror_name(link.parent),
        pos=_mirror_vec(link.pos),
        quat=_mirror_quat(link.quat),
        com=_mirror_vec(link.com),
        inertia_quat=_mirror_quat(link.inertia_quat),
        joint=_mirror_name(link.joint),
        range=(lo, hi) if link.axis == "y" else (-hi, -lo),
    )


_RIGHT_LEG = tuple(_mirror_link(l) for l in fig.LEFT_LEG)
_RIGHT_ARM = tuple(_mirror_link(l) for l in fig.LEFT_ARM)
# Model (depth-first) order == standard G1 joint order.
_LINKS: tuple[fig.Link, ...] = (
    fig.PELVIS, *fig.LEFT_LEG, *_RIGHT_LEG, *fig.WAIST, *fig.LEFT_ARM, *_RIGHT_ARM,
)

G1_BODY_NAMES: tuple[str, ...] = tuple(l.name for l in _LINKS)
G1_JOINT_NAMES: tuple[str, ...] = tuple(l.joint for l in _LINKS if l.joint is not None)  # == actuator order
assert len(G1_JOINT_NAMES) == 29

G1_FOOT_BODIES: tuple[str, str] = ("left_ankle_roll_link", "right_ankle_roll_link")
G1_FOOT_SITES: tuple[str, str] = ("left_foot", "right_foot")
G1_HAND_SITES: tuple[str, str] = ("left_palm", "right_palm")
G1_FOOT_CONTACT_SENSORS: tuple[str, str] = ("left_foot_contact", "right_foot_contact")
# With self_collisions: number of contacts between two geoms of the robot (the floor is no part of it).
G1_SELF_COLLISION_SENSOR = "self_collision"
G1_IMU_SITE = "imu_pelvis"
G1_TORSO_IMU_SITE = "imu_torso"
G1_ANCHOR_BODY = "torso_link"
G1_TRACKING_BODIES: tuple[str, ...] = (
    "pelvis",
    "left_hip_roll_link", "left_knee_link", "left_ankle_roll_link",
    "right_hip_roll_link", "right_knee_link", "right_ankle_roll_link",
    "torso_link",
    "left_shoulder_roll_link", "left_elbow_link", "left_wrist_yaw_link",
    "right_shoulder_roll_link", "right_elbow_link", "right_wrist_yaw_link",
)
G1_END_EFFECTORS: tuple[str, ...] = (
    "left_ankle_roll_link", "right_ankle_roll_link", "left_wrist_yaw_link", "right_wrist_yaw_link",
)
G1_PUBLISHED_MASS_KG: float = fig.PUBLISHED_MASS_KG
G1_COLLISION_GROUP = 3  # MuJoCo hides geom groups 3-5 unless a renderer turns them on


def _reflected_inertia(m: fig.Motor) -> float:
    """Rotor + two planetary stages reflected to the output shaft."""
    j1, j2, j3 = m.rotor_inertia
    _, g2, g3 = m.gears
    return j1 * (g2 * g3) ** 2 + j2 * g3**2 + j3


def motor_figures(key: str) -> tuple[float, float]:
    """(armature, effort limit) of a motor key; "5020x2" is the two-motor ankle/waist linkage."""
    if key == "5020x2":  # parallel linkage, nominal 1:1: two 5020 motors add up
        m = fig.MOTORS["5020"]
        return 2.0 * _reflected_inertia(m), 2.0 * m.effort_limit
    m = fig.MOTORS[key]
    return _reflected_inertia(m), m.effort_limit


_JOINT_LINKS = tuple(l for l in _LINKS if l.joint is not None)
_LINK_BY_JOINT = {l.joint: l for l in _JOINT_LINKS}
G1_ARMATURE: np.ndarray = np.array([motor_figures(l.motor)[0] for l in _JOINT_LINKS])
G1_EFFORT_LIMIT: np.ndarray = np.array([motor_figures(l.motor)[1] for l in _JOINT_LINKS])


def pd_gains(natural_freq_hz: float = fig.NATURAL_FREQ_HZ) -> tuple[np.ndarray, np.ndarray]:
    """(kp, kd) per joint: kp = J w^2, kd = 2 zeta J w (mjlab / BeyondMimic rule)."""
    omega = 2.0 * math.pi * natural_freq_hz
    return G1_ARMATURE * omega**2, 2.0 * fig.DAMPING_RATIO * G1_ARMATURE * omega


G1_KP, G1_KD = pd_gains()  # the 10 Hz gains every task uses


def _stand_pose() -> dict[str, float]:
    pose = {j: 0.0 for j in G1_JOINT_NAMES}
    for name, q in fig.STAND_POSE_LEFT.items():
        pose[name] = q
        mirrored = _mirror_name(name)
        pose[mirrored] = q if _LINK_BY_JOINT[name].axis == "y" else -q
    return pose


G1_DEFAULT_JOINT_POS: dict[str, float] = _stand_pose()
G1_DEFAULT_QPOS_JOINTS: np.ndarray = np.array([G1_DEFAULT_JOINT_POS[j] for j in G1_JOINT_NAMES])
# Pelvis height with the soles flat on the floor in the stand pose (computed with
# forward kinematics of this model; checked by tests/test_g1_asset.py).
G1_DEFAULT_BASE_HEIGHT: float = 0.7569

# Our own collision primitives, left side / centre (right side mirrored):
# (type, radius, fromto or pos) in the body frame.
_SOLE_Z = -0.035  # sole plane under the ankle roll frame
_FOOT_R = 0.012
_COLLISION: dict[str, list[tuple[str, float, tuple[float, ...]]]] = {
    "pelvis": [("capsule", 0.065, (0.0, -0.045, -0.07, 0.0, 0.045, -0.07))],
    "left_hip_yaw_link": [("capsule", 0.05, (-0.005, 0.0, -0.04, -0.065, 0.0, -0.16))],
    "left_knee_link": [("capsule", 0.042, (0.005, 0.0, -0.03, 0.005, 0.0, -0.24))],
    "left_ankle_roll_link": [
        ("capsule", _FOOT_R, (-0.045, y, _SOLE_Z + _FOOT_R, 0.125, y, _SOLE_Z + _FOOT_R))
        for y in (-0.024, 0.0, 0.024)
    ],
    "torso_link": [
        ("capsule", 0.085, (0.005, 0.0, 0.07, 0.005, 0.0, 0.22)),
        ("sphere", 0.06, (0.0, 0.0, 0.43)),
    ],
    "left_shoulder_yaw_link": [("capsule", 0.035, (0.0, 0.0, 0.03, 0.0, 0.0, -0.08))],
    "left_elbow_link": [("capsule", 0.03, (0.0, 0.0, -0.01, 0.09, 0.0, -0.01))],
    "left_wrist_yaw_link": [("capsule", 0.03, (0.02, 0.0, 0.0, 0.14, 0.0, 0.0))],
}
# With self-collisions on: neighbours whose geoms overlap at rest across a geom-less link.
_SELF_EXCLUDES = (
    ("pelvis", "left_hip_yaw_link"), ("pelvis", "right_hip_yaw_link"),
    ("torso_link", "left_shoulder_yaw_link"), ("torso_link", "right_shoulder_yaw_link"),
    ("pelvis", "torso_link"),
)


def _collision_for(name: str):
    if name in _COLLISION:
        return _COLLISION[name]
    left = "left_" + name[len("right_"):] if name.startswith("right_") else None
    if left in _COLLISION:
        return [
            (t, r, tuple(v for p in range(0, len(g), 3) for v in _mirror_vec(g[p:p + 3])))
            for t, r, g in _COLLISION[left]
        ]
    return []


def _add_link(spec: mujoco.MjSpec, bodies: dict, link: fig.Link, contype: int, conaffinity: int):
    parent = spec.worldbody if link.parent == "world" else bodies[link.parent]
    body = parent.add_body(
        name=link.name, pos=link.pos, mass=link.mass, ipos=link.com,
        iquat=link.inertia_quat, inertia=link.diaginertia, explicitinertial=True,
    )
    if link.quat is not None:
        body.quat = link.quat
    if link.joint is None:
        body.pos = (0.0, 0.0, G1_DEFAULT_BASE_HEIGHT)
        body.add_freejoint(name="floating_base_joint")
    else:
        body.add_joint(
            name=link.joint, type=mujoco.mjtJoint.mjJNT_HINGE, axis=_AXES[link.axis],
            range=link.range, limited=mujoco.mjtLimited.mjLIMITED_TRUE,
            armature=motor_figures(link.motor)[0],
        )
    for i, (kind, radius, g) in enumerate(_collision_for(link.name)):
        geom = body.add_geom(
            name=f"{link.name}_col{i}", size=(radius, 0.0, 0.0),
            contype=contype, conaffinity=conaffinity, condim=3, group=G1_COLLISION_GROUP,
        )
        if kind == "capsule":
            geom.type = mujoco.mjtGeom.mjGEOM_CAPSULE
            geom.fromto = g
        else:
            geom.type = mujoco.mjtGeom.mjGEOM_SPHERE
            geom.pos = g
    bodies[link.name] = body
    return body


def build_g1_spec(
    *,
    with_floor: bool = True,
    self_collisions: bool = False,
    natural_freq_hz: float = fig.NATURAL_FREQ_HZ,
) -> mujoco.MjSpec:
    """G1 29-DoF spec: free-floating pelvis, 29 PD position actuators, primitive collisions.

    With the default 10 Hz gains the total ankle stiffness (~57 N m/rad) is below the
    gravity stiffness of the body about the ankles (m g h ~ 200 N m/rad): the robot
    needs a policy to balance and topples in ~1.2 s on its own. ``natural_freq_hz=30``
    makes it stand passively (used by the asset test).
    """
    spec = mujoco.MjSpec()
    spec.modelname = "unilab_g1_29dof"
    spec.compiler.degree = False
    spec.option.timestep = 0.005
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    spec.option.iterations = 10
    spec.option.ls_iterations = 20

    # Robot geoms: bit 0 of conaffinity meets the floor's contype; bit 1 is self-collision.
    contype, conaffinity = (2, 3) if self_collisions else (0, 1)
    if with_floor:
        spec.worldbody.add_geom(
            name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=(0.0, 0.0, 0.05),
            contype=1, conaffinity=0, condim=3,
        )
    bodies: dict[str, mujoco.MjsBody] = {}
    for link in _LINKS:
        _add_link(spec, bodies, link, contype, conaffinity)

    bodies["pelvis"].add_site(name=G1_IMU_SITE, pos=fig.IMU_PELVIS_POS, size=(0.01, 0, 0))
    bodies["torso_link"].add_site(name=G1_TORSO_IMU_SITE, pos=fig.IMU_TORSO_POS, size=(0.01, 0, 0))
    for body, site in zip(G1_FOOT_BODIES, G1_FOOT_SITES):
        bodies[body].add_site(name=site, pos=(0.04, 0.0, _SOLE_Z), size=(0.01, 0, 0))
    for body, site in zip(("left_wrist_yaw_link", "right_wrist_yaw_link"), G1_HAND_SITES):
        bodies[body].add_site(name=site, pos=(0.08, 0.0, 0.0), size=(0.01, 0, 0))
    if self_collisions:
        # MuJoCo already skips parent-child pairs; these neighbours touch at rest across a geom-less link.
        for b1, b2 in _SELF_EXCLUDES:
            spec.add_exclude(bodyname1=b1, bodyname2=b2)

    kps, kds = pd_gains(natural_freq_hz)
    for joint, kp, kd, effort in zip(G1_JOINT_NAMES, kps, kds, G1_EFFORT_LIMIT):
        act = spec.add_actuator(name=joint, target=joint, trntype=mujoco.mjtTrn.mjTRN_JOINT)
        act.gaintype = mujoco.mjtGain.mjGAIN_FIXED
        act.biastype = mujoco.mjtBias.mjBIAS_AFFINE
        act.gainprm[0] = kp
        act.biasprm[1] = -kp
        act.biasprm[2] = -kd
        # Targets may lie beyond the joint range; the torque is what is bounded.
        act.ctrllimited = mujoco.mjtLimited.mjLIMITED_FALSE
        act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.forcerange = (-effort, effort)

    for name, kind in (("imu_gyro", mujoco.mjtSensor.mjSENS_GYRO),
                       ("imu_linvel", mujoco.mjtSensor.mjSENS_VELOCIMETER)):
        spec.add_sensor(name=name, type=kind, objtype=mujoco.mjtObj.mjOBJ_SITE, objname=G1_IMU_SITE)

    if with_floor:
        # Per foot: [found, net force (3)] of the foot-floor contacts.
        for body, name in zip(G1_FOOT_BODIES, G1_FOOT_CONTACT_SENSORS):
            sensor = spec.add_sensor(
                name=name, type=mujoco.mjtSensor.mjSENS_CONTACT, objtype=mujoco.mjtObj.mjOBJ_XBODY,
                objname=body, reftype=mujoco.mjtObj.mjOBJ_GEOM, refname="floor",
            )
            sensor.intprm[:3] = (1 | 2, 3, 1)  # data = found|force, reduce = netforce, num = 1

    if self_collisions:
        # An XBODY object of a contact sensor matches the body's whole subtree: the pelvis subtree on both
        # sides is every robot-robot contact. data = found (the number of matching contacts).
        sensor = spec.add_sensor(
            name=G1_SELF_COLLISION_SENSOR, type=mujoco.mjtSensor.mjSENS_CONTACT,
            objtype=mujoco.mjtObj.mjOBJ_XBODY, objname="pelvis", reftype=mujoco.mjtObj.mjOBJ_XBODY, refname="pelvis",
        )
        sensor.intprm[:3] = (1, 0, 1)

    spec.add_key(name="stand", qpos=_default_qpos_array(), ctrl=G1_DEFAULT_QPOS_JOINTS)
    return spec


def _default_qpos_array() -> np.ndarray:
    return np.concatenate([[0.0, 0.0, G1_DEFAULT_BASE_HEIGHT, 1.0, 0.0, 0.0, 0.0], G1_DEFAULT_QPOS_JOINTS])


def build_g1_model(**kw) -> mujoco.MjModel:
    return build_g1_spec(**kw).compile()


def default_qpos(model: mujoco.MjModel) -> np.ndarray:
    """(nq,) standing pose: pelvis at G1_DEFAULT_BASE_HEIGHT, joints at G1_DEFAULT_QPOS_JOINTS."""
    qpos = model.qpos0.copy()
    adr = model.jnt_qposadr[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, "floating_base_joint")]
    qpos[adr:adr + 7] = (0.0, 0.0, G1_DEFAULT_BASE_HEIGHT, 1.0, 0.0, 0.0, 0.0)
    for name, q in zip(G1_JOINT_NAMES, G1_DEFAULT_QPOS_JOINTS):
        qpos[model.jnt_qposadr[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)]] = q
    return qpos

"""Unitree G1 29-DoF asset: sizes, mass, joints, actuators, and that it stands on CPU MuJoCo."""

import mujoco
import numpy as np
import pytest

from unilab.assets import g1


@pytest.fixture(scope="module")
def model():
    return g1.build_g1_model()


def test_sizes_and_names(model):
    assert (model.nq, model.nv, model.nu) == (36, 35, 29)
    bodies = tuple(model.body(i).name for i in range(1, model.nbody))
    assert bodies == g1.G1_BODY_NAMES
    actuated = tuple(model.joint(model.actuator_trnid[i, 0]).name for i in range(model.nu))
    assert actuated == g1.G1_JOINT_NAMES
    assert g1.G1_JOINT_NAMES[:6] == (
        "left_hip_pitch_joint", "left_hip_roll_joint", "left_hip_yaw_joint",
        "left_knee_joint", "left_ankle_pitch_joint", "left_ankle_roll_joint",
    )
    assert g1.G1_JOINT_NAMES[12:15] == ("waist_yaw_joint", "waist_roll_joint", "waist_pitch_joint")
    for name in (*g1.G1_TRACKING_BODIES, *g1.G1_END_EFFECTORS, *g1.G1_FOOT_BODIES, g1.G1_ANCHOR_BODY):
        assert mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name) >= 0, name
    for name in (*g1.G1_FOOT_SITES, g1.G1_IMU_SITE):
        assert mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, name) >= 0, name
    assert model.opt.timestep == pytest.approx(0.005)
    assert len(g1.G1_TRACKING_BODIES) == 14


def test_mass_matches_published(model):
    total = float(model.body_mass.sum())
    assert abs(total - g1.G1_PUBLISHED_MASS_KG) < 0.01 * g1.G1_PUBLISHED_MASS_KG


def test_joints_and_actuators(model):
    hinge = model.jnt_type == mujoco.mjtJoint.mjJNT_HINGE
    assert hinge.sum() == 29 and model.jnt_type[0] == mujoco.mjtJoint.mjJNT_FREE
    lo, hi = model.jnt_range[hinge].T
    assert np.all(hi > lo) and np.all(model.jnt_limited[hinge])
    dof = model.jnt_dofadr[model.actuator_trnid[:, 0]]
    assert np.all(model.dof_armature[dof] > 0)
    # <position>-style PD with the 10 Hz / zeta = 2 rule, torque-limited
    np.testing.assert_allclose(model.actuator_gainprm[:, 0], g1.G1_KP)
    np.testing.assert_allclose(model.actuator_biasprm[:, 1], -g1.G1_KP)
    np.testing.assert_allclose(model.actuator_biasprm[:, 2], -g1.G1_KD)
    w = 2 * np.pi * 10.0
    np.testing.assert_allclose(g1.G1_KP, model.dof_armature[dof] * w**2)
    np.testing.assert_allclose(model.actuator_forcerange[:, 1], g1.G1_EFFORT_LIMIT)
    assert g1.G1_KP[g1.G1_JOINT_NAMES.index("left_knee_joint")] == pytest.approx(99.1, abs=0.1)
    # mirror symmetry of the ranges
    rng = dict(zip((model.joint(i).name for i in range(model.njnt)), model.jnt_range))
    np.testing.assert_allclose(rng["right_hip_roll_joint"], -rng["left_hip_roll_joint"][::-1])


def test_primitive_collisions_only(model):
    prim = {mujoco.mjtGeom.mjGEOM_CAPSULE, mujoco.mjtGeom.mjGEOM_SPHERE,
            mujoco.mjtGeom.mjGEOM_BOX, mujoco.mjtGeom.mjGEOM_PLANE}
    assert all(int(t) in {int(p) for p in prim} for t in model.geom_type)
    foot = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, g1.G1_FOOT_BODIES[0])
    assert (model.geom_bodyid == foot).sum() >= 2


def test_default_pose_touches_floor(model):
    data = mujoco.MjData(model)
    data.qpos[:] = g1.default_qpos(model)
    mujoco.mj_forward(model, data)
    assert data.qpos[2] == pytest.approx(g1.G1_DEFAULT_BASE_HEIGHT)
    assert data.ncon > 0  # soles rest on the floor
    assert np.all(data.contact.dist > -2e-3)  # without sinking into it
    assert np.all(np.abs(data.site(g1.G1_FOOT_SITES[0]).xpos[2]) < 3e-3)


def test_foot_contact_sensors(model):
    data = mujoco.MjData(model)
    data.qpos[:] = g1.default_qpos(model)
    data.ctrl[:] = g1.G1_DEFAULT_QPOS_JOINTS
    for _ in range(20):
        mujoco.mj_step(model, data)
    weight = model.body_mass.sum() * 9.81
    fz = 0.0
    for name in g1.G1_FOOT_CONTACT_SENSORS:
        found, _, _, force_z = data.sensor(name).data
        assert found > 0
        fz += abs(force_z)
    assert fz == pytest.approx(weight, rel=0.2)


def _stand(model, steps=1000):
    data = mujoco.MjData(model)
    data.qpos[:] = g1.default_qpos(model)
    data.ctrl[:] = g1.G1_DEFAULT_QPOS_JOINTS
    heights, ups = [], []
    for _ in range(steps):
        mujoco.mj_step(model, data)
        heights.append(data.qpos[2])
        ups.append(data.xmat[1][8])  # z of the pelvis z-axis
    return np.array(heights), np.array(ups)


def test_stands_five_seconds_with_stiff_pd():
    # At 10 Hz the G1 cannot balance passively (see build_g1_spec); 30 Hz holds it.
    heights, ups = _stand(g1.build_g1_model(natural_freq_hz=30.0), steps=1000)
    assert heights.min() > 0.7 and ups.min() > 0.98


def test_default_gains_hold_pose_briefly(model):
    heights, ups = _stand(model, steps=100)  # 0.5 s before the slow topple builds up
    assert heights.min() > 0.7 and ups.min() > 0.98


# ------------------------------------------------------------------------------- self-collisions
def _self_contacts(m: mujoco.MjModel, d: mujoco.MjData) -> list[tuple[str, str]]:
    floor = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "floor")
    return [(m.geom(c.geom[0]).name, m.geom(c.geom[1]).name) for c in d.contact[:d.ncon] if floor not in c.geom]


def test_self_collisions_off_by_default(model):
    robot = model.geom_bodyid > 0
    assert (model.geom_contype[robot] == 0).all()  # robot geoms meet the floor only
    names = [model.sensor(i).name for i in range(model.nsensor)]
    assert g1.G1_SELF_COLLISION_SENSOR not in names


def test_self_collision_sensor_counts_overlapping_limbs():
    m = g1.build_g1_model(self_collisions=True)
    d = mujoco.MjData(m)
    adr = m.sensor_adr[m.sensor(g1.G1_SELF_COLLISION_SENSOR).id]
    d.qpos[:] = g1.default_qpos(m)
    mujoco.mj_forward(m, d)
    assert _self_contacts(m, d) == [] and d.sensordata[adr] == 0  # excluded neighbours do not touch at rest
    # Both upper arms rolled through the chest.
    for joint, q in (("left_shoulder_roll_joint", -1.5), ("right_shoulder_roll_joint", 1.5)):
        d.qpos[m.jnt_qposadr[m.joint(joint).id]] = q
    mujoco.mj_forward(m, d)
    pairs = _self_contacts(m, d)
    assert any("torso_link" in a + b for a, b in pairs)
    assert d.sensordata[adr] == len(pairs)  # every robot-robot contact, none with the floor
    # Parent and child never collide, even where their capsules overlap.
    parent = {m.body(i).name: m.body(m.body_parentid[i]).name for i in range(m.nbody)}
    for a, b in pairs:
        ba, bb = a.rsplit("_col", 1)[0], b.rsplit("_col", 1)[0]
        assert parent[ba] != bb and parent[bb] != ba


def test_default_clip_has_no_self_contacts(tmp_path, monkeypatch):
    """The tracking task turns self-collisions on: its default clip must not be penalised for touching."""
    from unilab.motion import default_clip, default_clip_path, load_motion_clip

    monkeypatch.setattr(default_clip, "cache_dir", lambda: tmp_path)
    clip = load_motion_clip(default_clip_path())
    m = g1.build_g1_model(self_collisions=True)
    d = mujoco.MjData(m)
    d.qpos[:] = g1.default_qpos(m)
    for frame in range(0, clip.num_frames, 5):
        d.qpos[7:] = clip.joint_pos[frame]
        mujoco.mj_forward(m, d)
        assert _self_contacts(m, d) == [], frame

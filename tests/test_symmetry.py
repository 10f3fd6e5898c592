"""Left-right symmetry: the G1's joint mirror is the physics' mirror, the walk's observation map is its own
inverse, and the learner trains on a batch whose second half is mirrored."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_learners import FASTSAC

from unilab.algos.base import make_learner
from unilab.algos.fastsac.config import FastSACConfig
from unilab.algos.symmetry import Mirror, RowMirror, VectorMirror
from unilab.assets import g1
from unilab.sim.headless import mujoco
from unilab.tasks.common.mirror import joint_mirror, mirror_free_qpos, mirror_free_qvel
from unilab.tasks.g1_walk_flat.symmetry import walk_mirror

POLICY = [("base_ang_vel", 3), ("projected_gravity", 3), ("joint_pos_rel", 29), ("joint_vel", 29),
          ("last_action", 29), ("command", 3), ("gait_phase_sin_cos", 2)]
CRITIC = POLICY + [("base_lin_vel", 3), ("foot_contact", 2), ("foot_height", 2), ("base_height", 1)]


@pytest.fixture(scope="module")
def model():
    """The G1 with its mid-plane bodies made symmetric: the published figures put the waist's and the torso's
    centres of mass a fraction of a millimetre off the mid-plane (the one asymmetry of the model)."""
    m = g1.build_g1_model()
    for name in ("waist_yaw_link", "waist_roll_link", "torso_link"):
        b = m.body(name).id
        m.body_ipos[b][1] = 0.0
        m.body_iquat[b] = (1.0, 0.0, 0.0, 0.0)
    return m


@pytest.fixture(scope="module")
def joints(model):
    return joint_mirror(model, g1.G1_JOINT_NAMES)


def _mirrored_state(qpos, qvel, ctrl, joints):
    perm, sign = np.array(joints[0]), np.array(joints[1])
    return (np.concatenate((mirror_free_qpos(qpos[:7]), qpos[7:][perm] * sign)),
            np.concatenate((mirror_free_qvel(qvel[:6]), qvel[6:][perm] * sign)), ctrl[perm] * sign)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_the_joint_mirror_is_the_physics_mirror(model, joints, seed):
    """A random state and PD targets, and their mirror image, stepped in plain MuJoCo: the second stays the
    mirror image of the first (the robot in the air, its joints and base moving)."""
    rng = np.random.default_rng(seed)
    data = mujoco.MjData(model)
    q = g1.default_qpos(model).copy()
    q[:3] = (rng.uniform(-1, 1), rng.uniform(-1, 1), 2.0)
    quat = rng.normal(size=4)
    q[3:7] = quat / np.linalg.norm(quat)
    q[7:] += rng.uniform(-0.3, 0.3, size=29)
    qvel = rng.uniform(-1, 1, size=model.nv)
    ctrl = g1.G1_DEFAULT_QPOS_JOINTS + rng.uniform(-0.4, 0.4, size=29)
    states = []
    for qpos_i, qvel_i, ctrl_i in ((q, qvel, ctrl), _mirrored_state(q, qvel, ctrl, joints)):
        mujoco.mj_resetData(model, data)
        data.qpos[:], data.qvel[:], data.ctrl[:] = qpos_i, qvel_i, ctrl_i
        for _ in range(20):
            mujoco.mj_step(model, data)
        states.append((data.qpos.copy(), data.qvel.copy()))
    (q1, v1), (q2, v2) = states
    want_q, want_v, _ = _mirrored_state(q1, v1, ctrl, joints)
    assert np.abs(q2 - want_q).max() < 1e-6 and np.abs(v2 - want_v).max() < 1e-5


def test_the_g1_joint_mirror(joints):
    names = g1.G1_JOINT_NAMES
    perm, sign = joints
    pairs = {names[i]: (names[perm[i]], sign[i]) for i in range(len(names))}
    assert pairs["left_hip_pitch_joint"] == ("right_hip_pitch_joint", 1.0)
    assert pairs["right_hip_roll_joint"] == ("left_hip_roll_joint", -1.0)
    assert pairs["waist_yaw_joint"] == ("waist_yaw_joint", -1.0)
    assert pairs["waist_pitch_joint"] == ("waist_pitch_joint", 1.0)
    default = g1.G1_DEFAULT_QPOS_JOINTS
    assert np.array_equal(default[list(perm)] * sign, default)  # the stand pose is its own mirror image


def test_a_model_whose_sides_differ_is_refused(model):
    lopsided = g1.build_g1_model()
    jid = lopsided.joint("right_hip_roll_joint").id
    lopsided.jnt_axis[jid] = (0.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="right_hip_roll_joint"):
        joint_mirror(lopsided, g1.G1_JOINT_NAMES)
    with pytest.raises(ValueError, match="mirror partner"):
        joint_mirror(model, [n for n in g1.G1_JOINT_NAMES if n != "right_knee_joint"])


def test_the_walk_mirror_is_its_own_inverse(joints):
    mirror = walk_mirror(POLICY, CRITIC, joints)
    mirror.check(98, 106, 29)
    obs = torch.randn(5, 98)
    rows = RowMirror(mirror, torch.device("cpu"))
    assert torch.equal(rows("obs", rows("obs", obs)), obs)
    command = slice(93, 96)
    assert torch.equal(rows("obs", obs)[:, command], obs[:, command] * torch.tensor([1.0, -1.0, -1.0]))
    assert torch.equal(rows("obs", obs)[:, 96:], -obs[:, 96:])  # the gait clock half a cycle on
    critic = torch.randn(5, 106)
    assert torch.equal(rows("critic_obs", critic)[:, 101:103], critic[:, [102, 101]])  # feet swapped
    with pytest.raises(ValueError, match="no mirror"):
        walk_mirror(POLICY + [("height_scan", 4)], CRITIC, joints)


def test_a_map_that_is_not_its_own_inverse_is_refused():
    VectorMirror((1, 0, 2), (1.0, 1.0, -1.0)).check("x", 3)
    with pytest.raises(ValueError, match="mirroring twice"):
        VectorMirror((1, 2, 0), (1.0, 1.0, 1.0)).check("x", 3)
    with pytest.raises(ValueError, match="mirroring twice"):
        VectorMirror((1, 0), (1.0, -1.0)).check("x", 2)
    with pytest.raises(ValueError, match="not a permutation"):
        VectorMirror((0, 0), (1.0, 1.0)).check("x", 2)


def _tiny(symmetry: bool) -> FastSACConfig:
    return dataclasses.replace(FASTSAC, symmetry=symmetry)


def test_the_learner_trains_on_a_half_mirrored_batch(joints):
    """With symmetry on, the losses equal those of the same learner without it on rows whose second half was
    mirrored by hand: the rows the losses read are mirrored, and only the second half."""
    mirror = walk_mirror(POLICY, CRITIC, joints)
    on = make_learner(_tiny(True), 98, 106, 29, "cpu", seed=3, mirror=mirror)
    off = make_learner(_tiny(False), 98, 106, 29, "cpu", seed=3)
    g = torch.Generator().manual_seed(0)
    data = {"obs": torch.randn(16, 98, generator=g), "critic_obs": torch.randn(16, 106, generator=g),
            "action": torch.rand(16, 29, generator=g) * 2 - 1, "reward": torch.randn(16, generator=g),
            "next_obs": torch.randn(16, 98, generator=g), "next_critic_obs": torch.randn(16, 106, generator=g),
            "terminated": torch.zeros(16)}
    idx = torch.arange(8)
    by_hand = RowMirror(mirror, torch.device("cpu")).mirror_half({k: v[idx] for k, v in data.items()})
    assert torch.equal(by_hand["obs"][:4], data["obs"][:4]) and not torch.equal(by_hand["obs"][4:], data["obs"][4:8])
    alpha = torch.tensor(0.1)
    for loss in ("_critic_loss", "_actor_loss"):
        torch.manual_seed(7)
        got = getattr(on, loss)(data, idx, alpha)[0]
        torch.manual_seed(7)
        want = getattr(off, loss)(by_hand, idx, alpha)[0]
        torch.manual_seed(7)
        unmirrored = getattr(off, loss)(data, idx, alpha)[0]
        assert torch.allclose(got, want) and not torch.allclose(got, unmirrored), loss


def test_symmetry_without_a_map_is_refused():
    with pytest.raises(ValueError, match="needs the task's mirror map"):
        make_learner(_tiny(True), 98, 106, 29, "cpu", seed=0)
    with pytest.raises(ValueError, match="observation mirror"):
        make_learner(_tiny(True), 97, 106, 29, "cpu", seed=0,
                     mirror=Mirror(VectorMirror((0,), (1.0,)), VectorMirror((0,), (1.0,)), VectorMirror((0,), (1.0,))))


# ------------------------------------------------------------- a mirrored bandit: what the learner learns

B_OBS, B_CRITIC, B_ACT, B_N = 8, 8, 3, 64
# The mirror flips the first entry of the observation and of the action: a bandit whose best action's first
# entry follows the sign of the observation's first entry is symmetric under it.
B_MIRROR = Mirror(VectorMirror(tuple(range(B_OBS)), (-1.0,) + (1.0,) * (B_OBS - 1)),
                  VectorMirror(tuple(range(B_CRITIC)), (-1.0,) + (1.0,) * (B_CRITIC - 1)),
                  VectorMirror(tuple(range(B_ACT)), (-1.0, 1.0, 1.0)))


def _best(obs: torch.Tensor) -> torch.Tensor:
    return torch.stack((0.5 * obs[:, 0].sign(), torch.full_like(obs[:, 0], -0.3), torch.full_like(obs[:, 0], 0.2)), 1)


def _one_sided_batch(lrn, gen: torch.Generator) -> dict:
    """Every observation has a positive first entry: the robot is only ever pushed from one side."""
    obs = torch.randn(B_N, B_OBS, generator=gen, device=gen.device)
    obs[:, 0] = obs[:, 0].abs() + 0.5
    action = lrn.act(obs)
    reward = -(action - _best(obs)).square().sum(-1)
    done = torch.ones(B_N, dtype=torch.bool, device=gen.device)
    return dict(obs=obs, critic_obs=obs, action=action, reward=reward, next_obs=obs, next_critic_obs=obs,
                terminated=done)


def _trained(symmetry: bool, device: str = "cpu", iterations: int = 100, **overrides):
    cfg = dataclasses.replace(FASTSAC, symmetry=symmetry, **overrides)
    lrn = make_learner(cfg, B_OBS, B_CRITIC, B_ACT, device, seed=0, mirror=B_MIRROR if symmetry else None)
    gen = torch.Generator(device).manual_seed(1)
    for _ in range(iterations):
        lrn.add(_one_sided_batch(lrn, gen))
        if lrn.ready():
            lrn.update()
            lrn.publish_policy()
    return lrn, gen


def _other_side(lrn, gen) -> torch.Tensor:
    obs = torch.randn(256, B_OBS, generator=gen, device=gen.device)
    obs[:, 0] = -(obs[:, 0].abs() + 0.5)
    return lrn.act(obs, deterministic=True)


@pytest.mark.integration  # two learners trained to their target: tens of seconds on a CPU
def test_a_mirrored_batch_teaches_the_side_never_seen():
    """Trained only on one side, the learner with symmetry acts right on the other side too; without it, it
    acts there as it learned to on the side it saw."""
    with_mirror, gen = _trained(True)
    _acts_right_on_the_other_side(_other_side(with_mirror, gen))
    without, gen = _trained(False)
    assert _other_side(without, gen)[:, 0].mean() > 0.25  # as on the side it saw (+0.5)


def _acts_right_on_the_other_side(greedy: torch.Tensor) -> None:
    """The first entry turned over (its best, -0.5), the others kept; within what the tiny learner's seeds and
    thread counts leave (the mean of its greedy first entry lands between -0.45 and -0.65)."""
    first = greedy[:, 0]
    assert (first < 0).all() and -0.75 < first.mean() < -0.35, greedy.mean(0)
    assert (greedy.mean(0)[1:] - torch.tensor([-0.3, 0.2], device=greedy.device)).abs().max() < 0.15, greedy.mean(0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_mirrored_batch_under_the_compiled_cuda_graph():
    lrn, gen = _trained(True, "cuda", iterations=150, cuda_graph=True, compile=True, bf16=True)
    assert lrn._graph is not None
    _acts_right_on_the_other_side(_other_side(lrn, gen))


def test_a_policy_trained_with_symmetry_loads_for_eval_play_and_export():
    """The mirror is a training-time augmentation: eval, play and export build the learner without the task's
    map, and the checkpoint's actor acts as it did."""
    from unilab.runtime.play import fitted_learner

    trained, gen = _trained(True, iterations=20)
    state = {"learner": trained.state_dict()}
    loaded = fitted_learner(dataclasses.replace(FASTSAC, symmetry=True), (B_OBS, B_CRITIC, B_ACT), state,
                            "iter_0000020.pt", "bandit", "cpu", 0)
    obs = torch.randn(32, B_OBS, generator=gen)
    assert torch.allclose(loaded.act(obs, deterministic=True), trained.act(obs, deterministic=True))

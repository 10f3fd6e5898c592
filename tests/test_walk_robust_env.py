"""The robust walk hooks on a few CPU worlds: push curriculum, payload and motor draws, single-axis
commands, the torso term. Builds MJWarp envs: integration."""

from __future__ import annotations

import pytest
import torch

from unilab.sim.config import MjWarpSimConfig
from unilab.tasks import make_env
from unilab.tasks.common import math as qm
from unilab.tasks.g1_walk_flat.config import CommandConfig, G1WalkFlatConfig, RandomizationConfig

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def env():
    rnd = RandomizationConfig(push_interval_s=(1.0, 3.0), push_min_vel_xy=0.2, push_max_vel_xy=1.0,
                              push_curriculum_steps=100, push_curriculum_start=0.5, added_mass_kg=(-1.0, 3.0),
                              kp_scale=(0.8, 1.2), kd_scale=(0.9, 1.1), stagger_first_episode=False)
    cfg = G1WalkFlatConfig(num_envs=6, episode_length_s=1.0, randomization=rnd,
                           commands=CommandConfig(single_axis_fraction=1.0, standing_fraction=0.0))
    return make_env(cfg, MjWarpSimConfig(), device="cpu", seed=0)


def test_push_sizes_follow_the_curriculum(env):
    env.reset()
    for step, scale in ((0, 0.5), (50, 0.75), (400, 1.0)):
        env.common_step_counter.fill_(step)
        assert float(env.push_scale) == pytest.approx(scale)
        before = env.base_lin_vel_w[:, :2].clone()
        env._push(torch.tensor([True, True, True, True, True, False]))
        size = (env.base_lin_vel_w[:, :2] - before).norm(dim=1)
        assert (size[:5] >= 0.2 * scale - 1e-5).all() and (size[:5] <= 1.0 * scale + 1e-5).all() and size[5] == 0.0


def test_payload_per_world_keeps_subtree_masses_consistent(env):
    env.reset()
    added = env._added_mass.added
    assert ((added >= -1.0) & (added <= 3.0)).all() and not (added[:, 0] == added[0, 0]).all()
    mass, subtree, parent = env._added_mass.mass, env._added_mass.subtree, env.mj_model.body_parentid
    expect = mass.clone()
    for b in range(env.mj_model.nbody - 1, 0, -1):  # children come after their parents
        expect[:, parent[b]] += expect[:, b]
    assert torch.allclose(subtree, expect, atol=1e-4)


def test_motor_factors_per_world_and_actuator_within_range(env):
    env.reset()
    kp, kd = env._motors.scales
    assert ((kp >= 0.8 - 1e-6) & (kp <= 1.2 + 1e-6)).all() and ((kd >= 0.9 - 1e-6) & (kd <= 1.1 + 1e-6)).all()
    assert torch.equal(env._motors.bias[:, :, 1], -env._motors.gain[:, :, 0]) and kp.std() > 0.0


def test_single_axis_commands_and_torso_term(env):
    env.reset()
    assert ((env.commands != 0.0).sum(dim=1) <= 1).all()
    for _ in range(5):
        env.step(torch.zeros(env.num_envs, 29))
    g = qm.projected_gravity(env.backend.xquat[:, env._torso_id])
    assert torch.allclose(env._reward_torso_orientation(), (g[:, :2] ** 2).sum(dim=1), atol=1e-5)


def test_the_observations_mirror_with_the_robot(env):
    """Put every world into the mirror image of its state (body, command, gait clock, last action, contacts):
    its observations are then the task's mirror map applied to the ones before (algo.symmetry)."""
    from unilab.algos.symmetry import RowMirror

    env.reset()
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        env.step(torch.rand(env.num_envs, 29, generator=g) * 0.6 - 0.3)
    rows = RowMirror(env.mirror(), torch.device("cpu"))
    before = torch.cat(env._policy_terms(), 1), torch.cat(env._policy_terms() + env._privileged_terms(), 1)

    perm, sign = rows.maps["action"]
    qpos, qvel = env.qpos.clone(), env.qvel.clone()
    r, d = env.root_qpos_adr, env.root_dof_adr
    qpos[:, r + 1] *= -1.0
    qpos[:, [r + 4, r + 6]] *= -1.0  # the quaternion's x and z
    qvel[:, d + 1] *= -1.0
    qvel[:, [d + 3, d + 5]] *= -1.0  # the body-frame angular velocity's x and z
    qpos[:, env._jq] = env.qpos[:, env._jq][:, perm] * sign
    qvel[:, env._jd] = env.qvel[:, env._jd][:, perm] * sign
    env.backend.reset_worlds(torch.ones(env.num_envs, dtype=torch.bool), qpos, qvel)
    env.commands.mul_(torch.tensor([1.0, -1.0, -1.0]))
    env.actions.copy_(env.actions[:, perm] * sign)
    env.foot_contact.copy_(env.foot_contact.flip(1))
    env.episode_length.add_(round(0.5 * env.cfg.rewards.gait_period_s / env.dt))  # half a gait cycle on
    after = torch.cat(env._policy_terms(), 1), torch.cat(env._policy_terms() + env._privileged_terms(), 1)

    assert torch.allclose(after[0], rows("obs", before[0]), atol=1e-4)
    assert torch.allclose(after[1], rows("critic_obs", before[1]), atol=1e-4)

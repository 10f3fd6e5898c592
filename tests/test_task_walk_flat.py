"""g1_walk_flat on the CPU with a handful of worlds.

The envs are module-scoped: MJWarp compiles its kernels (~30 s on a CPU) the first
time a model is stepped in a process. Each test starts from `env.reset()`.
"""

from __future__ import annotations

import math

import pytest
import torch

from unilab.sim.config import MjWarpSimConfig
from unilab.tasks import make_env
from unilab.tasks.common import math as qm
from unilab.tasks.g1_walk_flat.config import G1WalkFlatConfig, ObservationConfig, RandomizationConfig

N = 8
SHORT_STEPS = 10  # episode_length_s = 0.2 at dt = 0.02


def plain_config(**kw) -> G1WalkFlatConfig:
    """No noise, pushes, friction draws or staggered first episodes; uniform 0.5 rad action scale."""
    quiet = RandomizationConfig(friction_range=None, push_interval_s=None, stagger_first_episode=False)
    return G1WalkFlatConfig(**{"randomization": quiet, "observations": ObservationConfig(noise_scale=0.0),
                               "action_bounds": "uniform", **kw})


@pytest.fixture(scope="module")
def _shared_env():
    return make_env(plain_config(num_envs=N, episode_length_s=3.0), MjWarpSimConfig(), device="cpu", seed=0)


@pytest.fixture
def env(_shared_env):
    """The module's env with its generator reseeded: a test's reset draws must not depend on
    which tests ran before it on the same worker (pytest-xdist splits a module between workers).
    The scripted stance controller below topples on some reset draws."""
    _shared_env.generator.manual_seed(0)
    return _shared_env


def _short_env(seed: int):
    """Short episodes, the randomisation hooks on (but the staggered first episode)."""
    cfg = G1WalkFlatConfig(
        num_envs=4,
        episode_length_s=SHORT_STEPS * 0.02,
        randomization=RandomizationConfig(friction_range=(0.4, 1.2), push_interval_s=(0.06, 0.06),
                                          push_max_vel_xy=0.3, stagger_first_episode=False),
    )
    return make_env(cfg, MjWarpSimConfig(), device="cpu", seed=seed)


@pytest.fixture(scope="module")
def _shared_short_envs():
    return _short_env(7), _short_env(7)


@pytest.fixture
def short_envs(_shared_short_envs):
    """Two envs of one seed, their generators set back to it: the tests that use the first one alone must not leave
    it ahead of the second for the test that compares them (whichever ran first on the worker)."""
    for short in _shared_short_envs:
        short.generator.manual_seed(7)
    return _shared_short_envs


def _random_actions(gen: torch.Generator, n: int) -> torch.Tensor:
    return torch.rand(n, 29, generator=gen) * 2.0 - 1.0


def _balance_actions(env) -> torch.Tensor:
    """Scripted stance controller for action_scale 0.5: stiffen every joint around the
    default pose and shift the ankles with the pelvis pitch (ankle strategy). Zero actions
    alone topple the robot in ~1.3 s: its 10 Hz PD gains are softer than gravity's pull."""
    a = 6.0 * (env.default_joint_pos - env.joint_pos)
    pitch = torch.asin(env.projected_gravity[:, 0].clamp(-1.0, 1.0))
    a[:, [4, 10]] += (10.0 * pitch + 1.0 * env.base_ang_vel_b[:, 1])[:, None]
    return a.clamp(-1.0, 1.0)


@pytest.mark.integration
def test_shapes_and_contract(env):
    obs = env.reset()
    assert (env.obs_dim, env.critic_obs_dim, env.action_dim) == (98, 106, 29)
    assert env.max_episode_length == 150 and env.num_envs == N
    assert obs.shape == (N, 98) and obs.dtype == torch.float32 and obs.device == env.device
    assert env.critic_obs().shape == (N, 106)
    obs, critic_obs, reward, terminated, truncated, info = env.step(torch.zeros(N, 29))
    assert obs.shape == (N, 98) and critic_obs.shape == (N, 106) and reward.shape == (N,)
    assert terminated.dtype == torch.bool and truncated.dtype == torch.bool and terminated.shape == (N,)
    assert info["final_obs"].shape == (N, 98) and info["final_critic_obs"].shape == (N, 106)
    for key in ("episode_done", "episode_return", "episode_length"):
        assert info[key].shape == (N,)
    # Policy obs layout: gravity after the angular velocity, phase sin/cos last.
    assert torch.allclose(obs[:, 3:6], env.projected_gravity)
    assert torch.allclose(obs[:, -2:].square().sum(1), torch.ones(N))
    timing = env.timing
    assert set(timing) == {"backend_ms", "task_ms"} and timing["backend_ms"] > 0.0


@pytest.mark.integration
def test_same_seed_same_rollout(short_envs):
    a, b = short_envs
    obs_a, obs_b = a.reset(), b.reset()
    assert torch.equal(obs_a, obs_b)
    assert not torch.equal(_short_env(8).reset(), obs_a)
    assert torch.equal(a._geom_friction, b._geom_friction)
    gen = torch.Generator().manual_seed(0)
    for _ in range(SHORT_STEPS + 5):  # crosses an auto-reset and two pushes
        actions = _random_actions(gen, a.num_envs)
        out_a, out_b = a.step(actions), b.step(actions.clone())
        for x, y in zip(out_a[:5], out_b[:5]):
            assert torch.equal(x, y)
    assert torch.equal(a.commands, b.commands)


@pytest.mark.integration
def test_reward_terms_finite(env):
    env.reset()
    gen = torch.Generator().manual_seed(1)
    for _ in range(10):
        _, critic_obs, reward, _, _, info = env.step(_random_actions(gen, N))
        assert torch.isfinite(reward).all() and torch.isfinite(critic_obs).all()
        terms = {k: v for k, v in info.items() if k.startswith("rew/")}
        assert len(terms) == 19
        assert all(v.shape == () and torch.isfinite(v) for v in terms.values())
    assert info["rew/alive"] > 0.0 and info["rew/action_rate"] < 0.0


@pytest.mark.integration
def test_low_pelvis_terminates_and_auto_resets(env):
    env.reset()
    qpos = env.qpos
    assert not env._check_terminated().any()
    qpos[1, 2] = 0.2  # upright but below the 0.3 m pelvis threshold
    assert env._check_terminated().tolist() == [False, True] + [False] * (N - 2)

    # Env 0 lies on its back 0.15 m above the floor: too low and too tilted after a step.
    env.reset()
    steps_before = env.episode_length.clone()
    qpos[0, 2] = 0.15
    qpos[0, 3:7] = qm.quat_from_axis_angle(torch.tensor([0.0, 1.0, 0.0]), torch.tensor(-math.pi / 2))
    obs, critic_obs, reward, terminated, truncated, info = env.step(torch.zeros(N, 29))
    assert terminated.tolist() == [True] + [False] * (N - 1)
    assert not truncated.any()
    assert info["episode_done"].tolist() == terminated.tolist()
    assert info["episode_length"][0] == steps_before[0] + 1
    assert info["rew/termination"] < 0.0
    # The final obs saw the fall; the returned obs is the fresh episode's.
    assert info["final_obs"][0, 5] > -0.5  # projected gravity z of a robot on its back
    assert obs[0, 5] < -0.99 and env.base_pos[0, 2] > 0.7
    assert env.episode_length[0] == 0 and env.episode_return[0] == 0.0
    assert torch.equal(obs[1:], info["final_obs"][1:])  # other envs untouched


@pytest.mark.integration
def test_timeout_truncates(short_envs):
    env = short_envs[0]
    env.reset()
    for i in range(SHORT_STEPS):
        _, _, _, terminated, truncated, info = env.step(torch.zeros(env.num_envs, 29))
        assert not terminated.any()
        assert truncated.all() == (i == SHORT_STEPS - 1)
    assert (info["episode_length"] == SHORT_STEPS).all()
    assert (env.episode_length == 0).all()


@pytest.mark.integration
def test_commands_resample(env):
    env.reset()
    c = env.cfg.commands
    lo = torch.tensor([c.lin_vel_x[0], c.lin_vel_y[0], c.ang_vel_z[0]])
    hi = torch.tensor([c.lin_vel_x[1], c.lin_vel_y[1], c.ang_vel_z[1]])
    assert ((env.commands >= lo) & (env.commands <= hi)).all()

    before = env.commands.clone()
    env.command_time_left[:] = 100.0
    env.command_time_left[:4] = 0.0  # due now
    env.step(torch.zeros(N, 29))
    assert torch.equal(env.commands[4:], before[4:])
    assert not torch.equal(env.commands[:4], before[:4])
    lo_t, hi_t = c.resampling_time_s
    assert ((env.command_time_left[:4] > lo_t - 0.05) & (env.command_time_left[:4] <= hi_t)).all()

    # Commands are either exactly standing or a planar speed above the dead band.
    for _ in range(20):
        env._resample_commands(torch.ones(N, dtype=torch.bool))
        speed = env.commands[:, :2].norm(dim=1)
        assert ((speed == 0.0) | (speed >= c.min_lin_speed)).all()


@pytest.mark.integration
def test_randomisation_hooks(short_envs):
    env = short_envs[0]
    env.reset()
    mu = env._geom_friction[..., 0]
    assert ((mu >= 0.4) & (mu <= 1.2)).all()
    assert (mu == mu[:, :1]).all() and not (mu[:, 0] == mu[0, 0]).all()  # per world, every geom
    before = env.base_lin_vel_w[:, :2].clone()
    env._push(torch.tensor([True, False, True, False]))
    kick = (env.base_lin_vel_w[:, :2] - before).abs()
    assert (kick[[0, 2]].max(dim=1).values > 0.0).all() and (kick[[0, 2]] <= 0.3).all()
    assert (kick[[1, 3]] == 0.0).all()
    env.push_time_left[:] = 100.0
    env.push_time_left[:2] = 0.01  # envs 0 and 1 are due at the next step, each at its own time
    env.step(torch.zeros(env.num_envs, 29))
    assert torch.allclose(env.push_time_left[:2], torch.full((2,), 0.06)) and (env.push_time_left[2:] > 99.0).all()


@pytest.mark.integration
def test_default_task_staggers_first_episodes_and_bounds_actions_by_joint_limits():
    env = make_env(G1WalkFlatConfig(num_envs=N, episode_length_s=3.0), MjWarpSimConfig(), device="cpu", seed=3)
    first = env.episode_length.clone()
    assert (first >= 0).all() and (first < env.max_episode_length).all() and len(set(first.tolist())) > 1
    # joint_limits: +1 / -1 put every target on the soft joint limit, 0 on the stand pose.
    for a, target in ((1.0, env.soft_upper), (-1.0, env.soft_lower), (0.0, env.default_joint_pos)):
        env.actions.fill_(a)
        env._apply_actions()
        torch.testing.assert_close(env.backend.ctrl[0], target)
    with pytest.raises(ValueError, match="action_bounds"):
        env._action_spans(G1WalkFlatConfig(action_bounds="torque"))


@pytest.mark.integration
def test_tracking_errors_and_held_commands(env):
    env.reset()
    qpos, qvel = env.qpos, env.qvel
    qpos[:, 3:7] = torch.tensor([1.0, 0.0, 0.0, 0.0])  # heading along world x: body frame = world frame
    qvel[:, :6] = 0.0
    qvel[:, 0] = 0.3  # 0.3 m/s forward
    qvel[:, 5] = 0.2  # 0.2 rad/s yaw rate
    env.commands.zero_()
    env.commands[0] = torch.tensor([1.0, 0.0, 0.0])  # moving only: lin error 0.7
    env.commands[1] = torch.tensor([0.0, 0.4, 1.0])  # moving and turning: lin error 0.5, yaw error 0.8
    env.commands[2] = torch.tensor([0.0, 0.0, -0.5])  # turning only: yaw error 0.7
    info = {}
    env._extend_info(info)
    assert info["metrics/lin_vel_error"].item() == pytest.approx((0.7 + 0.5) / 2, abs=1e-5)
    assert info["metrics/yaw_rate_error"].item() == pytest.approx((0.8 + 0.7) / 2, abs=1e-5)

    held = torch.tensor([[0.5, 0.0, 0.0]]).repeat(N, 1)
    env.hold_commands(held)
    env.command_time_left[:] = 0.0  # a resample is due: it keeps the held commands
    env.step(torch.zeros(N, 29))
    assert torch.equal(env.commands, held)
    env._held_commands = None


@pytest.mark.integration
def test_feet_distance_penalty(env):
    env.reset()
    assert (env._reward_feet_distance() == 0.0).all()  # the stand pose has its feet apart
    feet = env.foot_pos
    gap = (feet[:, 0, :2] - feet[:, 1, :2]).norm(dim=1)
    assert (gap > env.cfg.rewards.min_feet_distance).all()


@pytest.mark.integration
def test_stance_controller_survives_an_episode(env):
    env.reset()
    for i in range(env.max_episode_length):
        _, _, _, terminated, truncated, info = env.step(_balance_actions(env))
        assert not terminated.any(), f"fell at step {i}"
    assert truncated.all()
    assert (info["episode_length"] == env.max_episode_length).all()
    assert (info["episode_return"] > 0.0).all()


def test_quaternion_helpers_match_mujoco():
    import mujoco
    import numpy as np

    gen = torch.Generator().manual_seed(0)
    q = qm.normalize(torch.randn(16, 4, generator=gen, dtype=torch.float64))
    v = torch.randn(16, 3, generator=gen, dtype=torch.float64)
    for i in range(16):
        res = np.zeros(3)
        mujoco.mju_rotVecQuat(res, v[i].numpy(), q[i].numpy())
        assert np.allclose(qm.quat_apply(q[i], v[i]).numpy(), res)
        mat = np.zeros(9)
        mujoco.mju_quat2Mat(mat, q[i].numpy())
        assert np.allclose(qm.quat_to_matrix(q[i]).numpy(), mat.reshape(3, 3))
    assert torch.allclose(qm.quat_apply_inverse(q, qm.quat_apply(q, v)), v)
    assert torch.allclose(qm.quat_mul(q, qm.quat_inverse(q)), torch.tensor([1.0, 0, 0, 0], dtype=q.dtype).expand(16, 4))
    yaw = torch.linspace(-3.0, 3.0, 16, dtype=torch.float64)
    assert torch.allclose(qm.yaw_from_quat(qm.quat_from_yaw(yaw)), yaw)
    assert torch.allclose(qm.projected_gravity(qm.quat_from_yaw(yaw)), torch.tensor([0.0, 0, -1], dtype=q.dtype))
    # quat_error rotates q onto the target; its norm is the angle between them.
    err = qm.quat_error(q.flip(0), q)
    assert torch.allclose(err.norm(dim=-1), qm.quat_error_magnitude(q.flip(0), q), atol=1e-6)
    back = qm.quat_mul(qm.quat_from_axis_angle(qm.normalize(err), err.norm(dim=-1)), q)
    assert torch.allclose(qm.quat_error_magnitude(back, q.flip(0)), torch.zeros(16, dtype=q.dtype), atol=1e-6)

"""Robustness defaults of `g1_motion_tracking` (reset noise, pushes, per-world friction and CoM, policy-only
observation noise, self-collision penalty, per-joint action scale), on CPU MJWarp with a few worlds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from unilab.assets import g1
from unilab.sim.config import MjWarpSimConfig
from unilab.tasks.g1_motion_tracking.config import (
    G1MotionTrackingConfig,
    ObservationConfig,
    RandomizationConfig,
)

N = 4
OBS_DIM = 160
# Policy obs slices (see G1MotionTrackingEnv._POLICY_TERM_NAMES): exact terms and noised ones.
EXACT = {"ref_joint_pos": slice(0, 29), "ref_joint_vel": slice(29, 58), "last_action": slice(131, 160)}
NOISED = {"anchor_pos_b": (slice(58, 61), "anchor_pos_noise"), "anchor_ori_b": (slice(61, 67), "anchor_ori_noise"),
          "base_lin_vel_b": (slice(67, 70), "lin_vel_noise"), "base_ang_vel_b": (slice(70, 73), "ang_vel_noise"),
          "joint_pos_rel": (slice(73, 102), "joint_pos_noise"), "joint_vel": (slice(102, 131), "joint_vel_noise")}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    from unilab.motion import default_clip

    d = tmp_path_factory.mktemp("motion_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(default_clip, "cache_dir", lambda: d)
        yield d


def _make(cfg: G1MotionTrackingConfig, seed: int = 0):
    from unilab.tasks.g1_motion_tracking.env import G1MotionTrackingEnv

    return G1MotionTrackingEnv(cfg, MjWarpSimConfig(), device="cpu", seed=seed)


@pytest.fixture(scope="module")
def _shared_env(cache):
    """Every robustness default on."""
    return _make(G1MotionTrackingConfig(num_envs=N))


@pytest.fixture
def env(_shared_env):
    """The module's env (built once: its kernels), its generator set back to its seed: a test's draws do not depend
    on which tests ran before it on its worker."""
    _shared_env.generator.manual_seed(0)
    return _shared_env


@pytest.fixture(scope="module")
def _shared_quiet_env(cache):
    """Exact resets and clean observations; a push in the third control step (0.05 s, 0.02 s steps) and
    then every 0.05 s; no friction or CoM draws, no self-collisions."""
    rnd = RandomizationConfig(reset_root_pos=0.0, reset_root_yaw=0.0, reset_joint_pos=0.0, reset_vel=0.0,
                              friction_range=None, push_interval_s=(0.05, 0.05), com_offset=None)
    return _make(G1MotionTrackingConfig(num_envs=N, randomization=rnd, observations=ObservationConfig(noise_scale=0.0),
                                        self_collisions=False))


@pytest.fixture
def quiet_env(_shared_quiet_env):
    _shared_quiet_env.generator.manual_seed(0)  # as `env`
    return _shared_quiet_env


pytestmark = pytest.mark.integration


# --------------------------------------------------------------------------- reset noise
def test_reset_noise_stays_near_the_reference(env):
    rnd = env.cfg.randomization
    assert (rnd.reset_root_pos, rnd.reset_root_yaw, rnd.reset_joint_pos, rnd.reset_vel) == (0.05, 0.2, 0.1, 0.5)
    frames = torch.full((N,), 100)
    env.reset_to_frames(frames)
    ref_root = env.ref_body_pos_all[frames, env._root]
    dxy = (env.base_pos[:, :2] - ref_root[:, :2]).abs()
    assert (dxy <= rnd.reset_root_pos + 1e-6).all() and (dxy > 0).any()
    torch.testing.assert_close(env.base_pos[:, 2], ref_root[:, 2])  # height untouched
    dq = (env.joint_pos - env.ref_joint_pos_all[frames]).abs()
    assert (dq <= rnd.reset_joint_pos + 1e-6).all() and (dq > 1e-3).any()
    # Same frame for every world, still different states: the noise is per env.
    assert not torch.allclose(env.joint_pos[0], env.joint_pos[1])


# --------------------------------------------------------------------------- pushes
def test_push_kicks_the_root_at_its_time(quiet_env):
    env = quiet_env
    env.reset_to_frames(torch.full((N,), 50))  # one state in every world
    d = env.root_dof_adr
    # Env 0 is due within this step, the others much later.
    env.push_time_left.copy_(torch.tensor([0.5 * env.dt, 100.0, 100.0, 100.0]))
    actions = torch.zeros(N, 29)
    env.step(actions)
    kick = env.qvel[0, d:d + 6] - env.qvel[1, d:d + 6]
    half = torch.tensor(env.cfg.randomization.push_max_vel)
    assert (kick.abs() <= half + 1e-5).all() and kick.abs().max() > 1e-3
    torch.testing.assert_close(env.qvel[2], env.qvel[1])  # unpushed worlds stay identical
    low, high = env.cfg.randomization.push_interval_s
    assert low - 1e-6 <= float(env.push_time_left[0]) <= high + 1e-6  # the next push is scheduled
    assert torch.allclose(env.push_time_left[1:], torch.full((N - 1,), 100.0 - env.dt))


def test_pushes_follow_the_interval(quiet_env):
    env = quiet_env
    env.reset_to_frames(torch.full((N,), 50))
    # The first push falls in step 3: the velocity leaves the unperturbed rollout there, not before.
    ref = _make_states(env, steps=3)
    env.cfg.randomization.push_interval_s = None  # same rollout without pushes
    try:
        env.reset_to_frames(torch.full((N,), 50))
        free = _make_states(env, steps=3)
    finally:
        env.cfg.randomization.push_interval_s = (0.05, 0.05)
    torch.testing.assert_close(ref[1], free[1], atol=1e-5, rtol=0)  # steps 1 and 2: no push yet
    torch.testing.assert_close(ref[0], free[0], atol=1e-5, rtol=0)
    assert (ref[2] - free[2]).abs().max() > 1e-3


def _make_states(env, steps: int) -> list[torch.Tensor]:
    d = env.root_dof_adr
    out = []
    for _ in range(steps):
        env.step(torch.zeros(N, 29))
        out.append(env.qvel[:, d:d + 6].clone())
    return out


# --------------------------------------------------------------------------- friction and CoM
def test_friction_per_world_within_range(env):
    env.reset()
    mu = env._geom_friction[..., 0]
    assert mu.shape == (N, env.mj_model.ngeom)
    assert ((mu >= 0.3) & (mu <= 1.2)).all()
    assert (mu == mu[:, :1]).all() and len(set(mu[:, 0].tolist())) == N  # one value per world, every geom


def test_com_offsets_per_world_within_range(env):
    env.reset()
    torso = env.mj_model.body(g1.G1_ANCHOR_BODY).id
    ipos = env.backend.expand_model_field("body_ipos")
    nominal = torch.as_tensor(env.mj_model.body_ipos, dtype=torch.float32)
    offset = ipos[:, torso] - nominal[torso]
    half = torch.tensor(env.cfg.randomization.com_offset)
    assert (offset.abs() <= half + 1e-6).all() and (offset.abs() > 0).any(dim=0).all()
    assert len({tuple(o.tolist()) for o in offset}) == N
    others = torch.ones(env.mj_model.nbody, dtype=torch.bool)
    others[torso] = False
    torch.testing.assert_close(ipos[:, others], nominal[others].expand(N, -1, -1), atol=0, rtol=0)
    torch.testing.assert_close(env.com_offsets.offsets[:, 0], offset)
    # Kinematics uses them: one pose, the whole-body CoM differs across worlds.
    env.reset_to_frames(torch.full((N,), 10))
    qpos = env.qpos[:1].expand(N, -1).clone()
    env.backend.reset_worlds(torch.ones(N, dtype=torch.bool), qpos, torch.zeros_like(env.qvel))
    com = env.backend.subtree_com[:, 0]
    assert (com - com[:1]).abs().max() > 1e-4


def test_off_means_shared_model_fields(quiet_env):
    assert quiet_env.com_offsets is None and quiet_env._geom_friction is None
    assert quiet_env.backend.model.body_ipos.shape[0] == 1 and quiet_env.backend.model.geom_friction.shape[0] == 1


# --------------------------------------------------------------------------- observation noise
def test_noise_on_policy_obs_only(env):
    env.reset()
    obs, critic, *_ = env.step(torch.zeros(N, 29))
    clean = critic[:, :OBS_DIM]
    torch.testing.assert_close(env.critic_obs()[:, :OBS_DIM], clean)  # the critic is noise-free
    o = env.cfg.observations
    for name, s in EXACT.items():
        assert torch.equal(obs[:, s], clean[:, s]), name
    for name, (s, width) in NOISED.items():
        diff = (obs[:, s] - clean[:, s]).abs()
        assert diff.max() <= getattr(o, width) * o.noise_scale + 1e-5 and diff.max() > 0, name


def test_no_noise_with_scale_zero(quiet_env):
    obs, critic, *_ = quiet_env.step(torch.zeros(N, 29))
    assert torch.equal(obs, critic[:, :OBS_DIM])


# --------------------------------------------------------------------------- self-collision
def test_self_collision_is_penalised(env):
    env.reset_to_frames(torch.full((N,), 100))
    names = list(g1.G1_JOINT_NAMES)
    # Shoulder roll inward, far past the torso: the upper arms go through the chest. The state starts
    # there; the actions push inward as far as the spans reach, so one step keeps the arms in the chest.
    target = env.default_joint_pos.clone()
    target[names.index("left_shoulder_roll_joint")] = -1.5
    target[names.index("right_shoulder_roll_joint")] = 1.5
    actions = ((target - env.default_joint_pos) / env.action_spans()[1]).clamp(-1.0, 1.0).expand(N, -1).clone()
    qpos = env.qpos.clone()
    qpos[:2, env._jq] = target
    env.backend.reset_worlds(torch.tensor([True, True, False, False]), qpos, env.qvel.clone())
    _, _, _, _, _, info = env.step(torch.cat((actions[:2], torch.zeros(2, 29))))
    count = env._reward_self_collision()
    assert (count[:2] >= 1).all() and (count[2:] == 0).all()
    assert info["rew/self_collision"] < 0
    assert env.reward_weights["self_collision"] == env.cfg.rewards.weights.self_collision < 0


def test_no_self_collision_term_when_off(quiet_env):
    assert quiet_env.reward_weights["self_collision"] == 0.0
    assert g1.G1_SELF_COLLISION_SENSOR not in [quiet_env.mj_model.sensor(i).name
                                               for i in range(quiet_env.mj_model.nsensor)]


# --------------------------------------------------------------------------- action scale
def test_per_joint_scale_from_the_figures(env):
    expected = 0.25 * g1.G1_EFFORT_LIMIT / g1.G1_KP
    np.testing.assert_allclose(env.per_joint_scale().numpy(), expected, rtol=1e-6)
    low, high = env.action_spans()
    assert torch.equal(low, high)
    np.testing.assert_allclose(high.numpy(), env.cfg.per_joint_gain * expected, rtol=1e-6)
    # An action moves each target by its own span, from the targets of action 0.
    a = torch.linspace(-1, 1, 29).expand(N, -1)
    offset = env.action_offset.clone()
    env.step(a)
    torch.testing.assert_close(env.backend.ctrl, offset + high * a)


def test_solver_cap_is_the_tasks(env):
    # The tracking worlds run the task's cap, not the G1 model's 10 (sim.iterations, unset here, would win).
    assert env.backend.model.opt.iterations == env.cfg.solver_iterations == 6
    assert g1.build_g1_model().opt.iterations == 10


def test_per_joint_gain_trades_reach(env):
    """Actions are bounded to [-1, 1]. Around the stand pose the spans bound what the policy can ask for:
    at `per_joint_gain=4` every offset of the default clip from the stand pose is a target, at 2 the top
    of the clip's knee raise is not, at 1 neither are the hip and shoulder pitch. Around the reference
    (the default) an action of 0 asks for every frame, so the default gain of 1.5 bounds the corrections
    only."""
    offset = (torch.as_tensor(env.clip.joint_pos, dtype=torch.float32) - env.default_joint_pos).abs().amax(dim=0)
    scale = env.per_joint_scale()

    def short(gain):
        return [g1.G1_JOINT_NAMES[i].removesuffix("_joint") for i in torch.nonzero(offset > gain * scale).flatten().tolist()]

    assert short(4.0) == []
    assert short(2.0) == ["left_knee", "right_knee"]
    assert short(1.0) == ["left_hip_pitch", "left_knee", "right_hip_pitch", "right_knee", "left_shoulder_pitch",
                          "right_shoulder_pitch"]
    assert (env.cfg.action_offset, env.cfg.per_joint_gain) == ("reference", 1.5)
    torch.testing.assert_close(env.action_spans()[1], 1.5 * scale)


def _calm(action_offset: str):
    """Exact resets, clean observations, no pushes or draws."""
    rnd = RandomizationConfig(reset_root_pos=0.0, reset_root_yaw=0.0, reset_joint_pos=0.0, reset_vel=0.0,
                              friction_range=None, push_interval_s=None, com_offset=None)
    return _make(G1MotionTrackingConfig(num_envs=N, randomization=rnd, observations=ObservationConfig(noise_scale=0.0),
                                        action_offset=action_offset))


@pytest.fixture(scope="module")
def reference_env(cache):
    return _calm("reference")


def test_reference_offset_targets_the_frame_the_step_reaches(reference_env):
    """With `action_offset=reference` an action of 0 asks for the reference joint positions of the frame
    the step ends on (the frame the reward then compares against), and an action adds its span."""
    env = reference_env
    env.reset_to_frames(torch.tensor([0, 10, 50, 100]))
    _, high = env.action_spans()
    for a in (torch.zeros(N, 29), torch.linspace(-1, 1, 29).expand(N, -1)):
        ctrl_offset = env.action_offset.clone()
        _, _, _, terminated, truncated, _ = env.step(a)
        assert not bool((terminated | truncated).any())
        torch.testing.assert_close(ctrl_offset, env.ref_joint_pos_all[env.motion_frame])
        torch.testing.assert_close(env.backend.ctrl, ctrl_offset + high * a)
    assert "ref_joint_pos" in env.action_to_target


def test_reference_offset_follows_the_clip_without_a_policy(reference_env):
    """Zero actions: around the reference the PD targets move with the clip; around the stand pose they
    do not. Over half a second of the clip's arm and knee raise (frames 150-205, up to 0.19 rad from the
    stand pose on average) the first stays closer to the clip."""
    def joint_error(env):
        env.reset_to_frames(torch.tensor([150, 160, 170, 180]))
        total = 0.0
        for _ in range(25):
            env.step(torch.zeros(N, 29))
            total += float(env.tracking_errors()["joint_pos"].mean())
        return total / 25

    around_reference, around_stand = joint_error(reference_env), joint_error(_calm("stand"))
    assert around_reference < 0.5 * around_stand


def test_export_names_the_action_mapping():
    # The uniform spans themselves are tested with the nominal env (tests/test_task_motion_tracking.py).
    assert G1MotionTrackingConfig(num_envs=1).action_bounds == "per_joint"
    assert G1MotionTrackingConfig(num_envs=1, action_scale=1.25).action_bounds == "uniform"


# --------------------------------------------------------------------------- determinism, config checks
def test_seeded_rollouts_are_deterministic_with_randomisation(env):
    def rollout():
        env.generator.manual_seed(7)
        out = [env.reset()]
        for _ in range(4):
            out.append(env.step(torch.zeros(N, 29))[0])
        return torch.stack(out), env._geom_friction[:, 0, 0].clone(), env.com_offsets.offsets.clone()

    a, b = rollout(), rollout()
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=0)


@pytest.mark.parametrize("build, needle", [
    (lambda: G1MotionTrackingConfig(action_scale="per_world"), "task.action_scale='per_world'"),
    (lambda: G1MotionTrackingConfig(action_scale=0.0), "task.action_scale=0.0"),
    (lambda: G1MotionTrackingConfig(per_joint_gain=0.0), "task.per_joint_gain"),
    (lambda: G1MotionTrackingConfig(solver_iterations=0), "task.solver_iterations=0"),
    (lambda: G1MotionTrackingConfig(action_offset="default"), "task.action_offset='default'"),
    (lambda: RandomizationConfig(friction_range=(1.2, 0.3)), "task.randomization.friction_range"),
    (lambda: RandomizationConfig(push_interval_s=(0.0, 1.0)), "task.randomization.push_interval_s"),
    (lambda: RandomizationConfig(push_max_vel=(0.5, 0.5)), "task.randomization.push_max_vel"),
    (lambda: RandomizationConfig(reset_vel=-0.1), "task.randomization.reset_vel"),
    (lambda: RandomizationConfig(com_offset=(0.5, 0.0, 0.0)), "task.randomization.com_offset"),
    (lambda: RandomizationConfig(com_bodies=("torso",)), "task.randomization.com_bodies='torso'"),
    (lambda: ObservationConfig(joint_vel_noise=-1.0), "task.observations.joint_vel_noise"),
])
def test_bad_values_fail_in_the_schema(build, needle):
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        build()


def test_bad_value_exits_2_before_the_run(tmp_path, monkeypatch, capsys):
    import unilab.launcher.launch as launch_mod
    from unilab.cli.train import main as train_main

    calls = []
    monkeypatch.setattr(launch_mod, "launch", lambda *a, **k: calls.append(a))
    log_dir = tmp_path / "runs"
    with pytest.raises(SystemExit) as exc:
        train_main(["task=g1_motion_tracking", "task.randomization.friction_range=[1.2,0.3]",
                    f"training.run.log_dir={log_dir}"])
    assert exc.value.code == 2 and "task.randomization.friction_range" in capsys.readouterr().err
    assert not log_dir.exists() and calls == []

"""`g1_motion_tracking` on CPU MJWarp with a handful of worlds (kernels compile once per module)."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from unilab.motion import load_motion_clip, save_motion_clip
from unilab.motion.synth import synthesize
from unilab.sim.config import MjWarpSimConfig
from unilab.tasks.g1_motion_tracking.config import G1MotionTrackingConfig, ObservationConfig, RandomizationConfig

pytestmark = pytest.mark.integration

N = 6
OBS_DIM = 2 * 29 + 3 + 6 + 3 + 3 + 3 * 29  # 160
CRITIC_DIM = OBS_DIM + 14 * (3 + 6)  # 286


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """The default clip is synthesised into a private directory, not the user's cache. (Not via
    XDG_CACHE_HOME: Warp keeps its compiled kernels there, they would be rebuilt every run.)"""
    from unilab.motion import default_clip

    d = tmp_path_factory.mktemp("motion_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(default_clip, "cache_dir", lambda: d)
        yield d


@pytest.fixture(scope="module")
def _shared_env(cache):
    from unilab.tasks.g1_motion_tracking.env import G1MotionTrackingEnv

    return G1MotionTrackingEnv(nominal_config(N), MjWarpSimConfig(), device="cpu", seed=0)


@pytest.fixture
def env(_shared_env):
    """The module's env (built once: its kernels), its generator set back to its seed: a test's draws do not depend
    on which tests ran before it on its worker."""
    _shared_env.generator.manual_seed(0)
    return _shared_env


def nominal_config(num_envs: int, **kw) -> G1MotionTrackingConfig:
    """Exact resets, clean observations, no pushes or model randomisation, the uniform 1.25 rad action
    scale: the robustness defaults have their own tests (tests/test_task_motion_tracking_robust.py)."""
    quiet = RandomizationConfig(reset_root_pos=0.0, reset_root_yaw=0.0, reset_joint_pos=0.0, reset_vel=0.0,
                                friction_range=None, push_interval_s=None, com_offset=None)
    return G1MotionTrackingConfig(num_envs=num_envs, action_scale=1.25, randomization=quiet,
                                  observations=ObservationConfig(noise_scale=0.0), **kw)


def _zeros():
    return torch.zeros(N, 29)


def test_shapes_and_contract(env, cache):
    assert (env.num_envs, env.action_dim, env.obs_dim, env.critic_obs_dim) == (N, 29, OBS_DIM, CRITIC_DIM)
    assert env.max_episode_length == 500 and env.device == torch.device("cpu")
    obs = env.reset()
    assert obs.shape == (N, OBS_DIM) and env.critic_obs().shape == (N, CRITIC_DIM)
    obs, critic_obs, reward, terminated, truncated, info = env.step(torch.rand(N, 29) * 2 - 1)
    assert obs.shape == (N, OBS_DIM) and critic_obs.shape == (N, CRITIC_DIM) and reward.shape == (N,)
    assert terminated.dtype == torch.bool and truncated.dtype == torch.bool
    assert info["final_obs"].shape == (N, OBS_DIM) and info["final_critic_obs"].shape == (N, CRITIC_DIM)
    assert set(env.timing) == {"backend_ms", "task_ms"}
    assert isinstance(env.max_episode_length, int)  # restored after the per-env limit used inside step
    assert env.clip.source.startswith(str(cache))  # motion_file=None: the default clip


def test_frame_changes_match_the_quaternion_formulas(env):
    """The observations and the tilt termination rotate with the bodies' matrices (one batched matmul
    each); on a tumbling, yawed robot they must equal the quaternion formulas they stand for."""
    from unilab.tasks.common import math as qm

    env.reset_to_frames(torch.full((N,), 20))
    for _ in range(15):  # strong random actions: the worlds tilt, turn and drift apart
        env.step(torch.rand(N, 29, generator=torch.Generator().manual_seed(3)) * 2 - 1)
    a, k = env._anchor, env.num_tracked
    quat, pos = env.body_quat, env.body_pos
    assert float(qm.projected_gravity(quat[:, a])[:, 2].max()) > -0.999  # some anchor is off vertical
    terms = dict(zip(env._POLICY_TERM_NAMES, env._policy_terms(), strict=True))
    expected = {
        "anchor_pos_b": qm.quat_apply_inverse(quat[:, a], env.ref_body_pos[:, a] - pos[:, a]),
        "anchor_ori_b": qm.matrix_first_two_columns(qm.quat_mul(qm.quat_conjugate(quat[:, a]), env.ref_body_quat[:, a])),
        "base_lin_vel_b": qm.quat_apply_inverse(env.base_quat, env.base_lin_vel_w),
    }
    for name, value in expected.items():
        torch.testing.assert_close(terms[name], value, atol=1e-5, rtol=0, msg=name)
    anchor_quat = quat[:, a : a + 1].expand(-1, k, -1)
    pos_b = qm.quat_apply_inverse(anchor_quat, pos[:, :k] - pos[:, a : a + 1])
    ori_b = qm.matrix_first_two_columns(qm.quat_mul(qm.quat_conjugate(anchor_quat), quat[:, :k]))
    torch.testing.assert_close(env._privileged_obs(), torch.cat((pos_b.flatten(1), ori_b.flatten(1)), dim=-1),
                               atol=1e-5, rtol=0)
    # The termination's tilt part alone (no height or end-effector check reaches 1e9), at a threshold
    # that splits these worlds.
    gz_error = (qm.projected_gravity(env.ref_body_quat[:, a])[:, 2] - qm.projected_gravity(quat[:, a])[:, 2]).abs()
    t = env.cfg.terminations
    saved = (t.anchor_height, t.end_effector_height, t.anchor_gravity_z)
    low, high = gz_error.sort().values[N // 2 - 1 : N // 2 + 1]
    assert high - low > 1e-4  # a threshold between them, not at a float's rounding distance from one
    t.anchor_height, t.end_effector_height, t.anchor_gravity_z = 1e9, 1e9, float(low + high) / 2
    try:
        tilt = gz_error > t.anchor_gravity_z
        assert tilt.any() and not tilt.all()
        assert torch.equal(env._check_terminated(), tilt)
    finally:
        t.anchor_height, t.end_effector_height, t.anchor_gravity_z = saved


def test_policy_obs_layout_and_uniform_action_spans(env):
    layout = env.policy_obs_layout()
    assert [n for n, _, _ in layout][:2] == ["ref_joint_pos", "ref_joint_vel"] and layout[-1][0] == "last_action"
    assert sum(size for _, size, _ in layout) == OBS_DIM and {scale for _, _, scale in layout} == {1.0}
    low, high = env.action_spans()
    assert torch.equal(low, high) and torch.all(low == env.cfg.action_scale) and low.shape == (29,)


def test_reward_terms_finite(env):
    env.reset()
    gen = torch.Generator().manual_seed(1)
    for _ in range(8):
        _, _, reward, _, _, info = env.step(torch.rand(N, 29, generator=gen) * 2 - 1)
        assert torch.isfinite(reward).all()
    names = ("anchor_pos", "anchor_ori", "body_pos", "body_ori", "body_lin_vel", "body_ang_vel", "action_rate",
             "joint_limit")
    for name in names:
        assert torch.isfinite(info[f"rew/{name}"]), name
    assert info["rew/action_rate"] < 0
    for key in ("metrics/body_pos_error", "metrics/anchor_ori_error", "term/anchor_height"):
        assert torch.isfinite(info[key]), key
    # Tracking terms are exp kernels in [0, 1], times weight and dt.
    assert 0 < info["rew/body_pos"] <= env.dt * env.reward_weights["body_pos"] + 1e-6


def test_reset_puts_robot_on_reference(env):
    frames = torch.tensor([0, 60, 160, 290, 360, 450])
    obs = env.reset_to_frames(frames)
    assert torch.equal(env.motion_frame, frames)
    for name, err in env.tracking_errors().items():
        assert err.max() < 1e-4, name
    torch.testing.assert_close(env.body_lin_vel, env.ref_body_lin_vel, atol=1e-4, rtol=0)
    torch.testing.assert_close(env.body_ang_vel, env.ref_body_ang_vel, atol=1e-4, rtol=0)
    clip = env.clip
    torch.testing.assert_close(obs[:, :29], torch.as_tensor(clip.joint_pos[frames.numpy()]))
    anchor = obs[:, 58:67]
    torch.testing.assert_close(anchor, torch.tensor([0, 0, 0, 1, 0, 0, 1, 0, 0.0]).expand(N, -1), atol=1e-4, rtol=0)
    # After one step near the reference, errors stay small (a few cm), the clip advanced one frame.
    _, _, _, terminated, _, info = env.step(torch.zeros(N, 29))
    assert not terminated.any()
    assert torch.equal(env.motion_frame, frames + 1)
    assert info["metrics/body_pos_error"] < 0.05


def test_terminates_when_anchor_deviates(env):
    env.reset_to_frames(torch.full((N,), 100))
    qpos = env.backend.qpos
    qpos[0, 2] += 0.5  # anchor height
    half = math.sqrt(0.5)
    qpos[1, 3:7] = torch.tensor([half, half, 0.0, 0.0])  # pelvis rolled 90 degrees: anchor tilt
    env.backend.forward()
    obs, _, _, terminated, truncated, info = env.step(_zeros())
    assert terminated[:2].all() and not terminated[2:].any() and not truncated.any()
    assert info["term/anchor_height"] > 0 and info["term/anchor_tilt"] > 0
    assert torch.equal(env.episode_length[:2], torch.zeros(2, dtype=torch.long))
    # Auto-reset: the returned obs is the new episode's, the final one is kept in info.
    assert not torch.allclose(obs[:2], info["final_obs"][:2])
    torch.testing.assert_close(obs[2:], info["final_obs"][2:])
    assert env.tracking_errors()["body_pos"][:2].max() < 1e-4


def test_clip_end_truncates(env):
    last = env.num_frames - 1
    env.reset_to_frames(torch.tensor([last - 3, last - 2, last - 1, last - 1, last - 2, last - 3]))
    assert env.episode_limit.tolist() == [3, 2, 1, 1, 2, 3]
    for step in range(1, 4):
        _, _, _, terminated, truncated, info = env.step(_zeros())
        assert not terminated.any()
        assert truncated.tolist() == [n == step for n in (3, 2, 1, 1, 2, 3)]
        ended = truncated.nonzero().flatten()
        # The final obs of a truncated env shows the clip's last frame as its reference.
        torch.testing.assert_close(info["final_obs"][ended, :29], torch.as_tensor(env.clip.joint_pos[last]).expand(len(ended), -1))
    assert (env.episode_length < 3).all()


def test_seeded_rollouts_are_deterministic(env):
    actions = torch.rand(5, N, 29, generator=torch.Generator().manual_seed(3)) * 2 - 1

    def rollout():
        env.generator.manual_seed(123)
        obs = [env.reset()]
        starts = env.motion_start.clone()
        for a in actions:
            obs.append(env.step(a)[0])
        return starts, torch.stack(obs)

    s1, o1 = rollout()
    s2, o2 = rollout()
    assert torch.equal(s1, s2)
    torch.testing.assert_close(o1, o2, atol=1e-5, rtol=0)


def test_make_env_with_clip_file_and_timeout(cache, tmp_path):
    """A 100 fps clip advances two frames per 50 Hz step; the time-out truncates too."""
    from unilab.tasks import make_env

    path = save_motion_clip(synthesize(duration=2.0, fps=100.0), tmp_path / "clip100.npz")
    cfg = {"name": "g1_motion_tracking", "num_envs": 2, "motion_file": str(path), "episode_length_s": 0.1}
    env = make_env(cfg, {}, "cpu", 0)
    assert env.max_episode_length == 5 and env.num_frames == load_motion_clip(path).num_frames
    env.reset_to_frames(torch.tensor([0, 190]))
    assert env.episode_limit.tolist() == [5, 5]
    env.step(torch.zeros(2, 29))
    assert env.motion_frame.tolist() == [2, 192]
    truncated = [env.step(torch.zeros(2, 29))[4] for _ in range(4)]
    assert truncated[-1].all() and not any(t.any() for t in truncated[:-1])
    assert np.isfinite(env.timing["task_ms"])


def test_bad_motion_file_fails_before_the_backend(tmp_path):
    from unilab.motion import MotionClipError
    from unilab.tasks.g1_motion_tracking.env import G1MotionTrackingEnv

    missing = tmp_path / "missing.npz"
    # Typing the config loads and checks the clip (`train` does that at compose) ...
    with pytest.raises(ValueError, match="task.motion_file=.*missing.npz.*file not found"):
        G1MotionTrackingConfig(num_envs=2, motion_file=str(missing))
    # ... and the env reads it again, before the backend compiles anything.
    cfg = G1MotionTrackingConfig(num_envs=2, motion_file=str(save_motion_clip(synthesize(duration=1.0), missing)))
    missing.unlink()
    with pytest.raises(MotionClipError, match="missing.npz"):
        G1MotionTrackingEnv(cfg, MjWarpSimConfig(), device="cpu", seed=0)


def _tensor_attrs(env):
    return {k: v for k, v in vars(env).items() if isinstance(v, torch.Tensor)}


def test_state_stays_in_fixed_storage(cache):
    """A captured step (CUDA) reads the tensors that existed at capture: every tensor attribute must
    keep its object across steps and resets, including the ones the task code rebinds."""
    from unilab.tasks.g1_motion_tracking.env import G1MotionTrackingEnv

    env = G1MotionTrackingEnv(G1MotionTrackingConfig(num_envs=N, episode_length_s=0.1), MjWarpSimConfig(),
                              device="cpu", seed=3)
    env.reset()
    before = _tensor_attrs(env)
    gen = torch.Generator().manual_seed(0)
    for _ in range(8):  # 5-step episodes: every env resets at least once
        env.step(torch.rand(N, 29, generator=gen) * 2 - 1)
    env.reset()
    after = _tensor_attrs(env)
    moved = sorted(k for k in before if after.get(k) is not before[k])
    assert not moved, f"rebound state tensors: {moved}"


def test_fixed_storage_changes_no_result(cache, monkeypatch):
    """Copy-back of rebound state (keep_bindings) gives exactly the eager results."""
    import contextlib

    from unilab.tasks.common import base
    from unilab.tasks.g1_motion_tracking.env import G1MotionTrackingEnv

    def rollout():
        env = G1MotionTrackingEnv(G1MotionTrackingConfig(num_envs=N, episode_length_s=0.1), MjWarpSimConfig(),
                                  device="cpu", seed=5)
        gen = torch.Generator().manual_seed(1)
        out = [env.reset()]
        for _ in range(8):
            obs, critic, reward, terminated, truncated, _ = env.step(torch.rand(N, 29, generator=gen) * 2 - 1)
            out += [obs.clone(), critic.clone(), reward.clone(), terminated.clone(), truncated.clone()]
        return out

    kept = rollout()
    monkeypatch.setattr(base, "keep_bindings", lambda obj: contextlib.nullcontext())
    plain = rollout()
    for a, b in zip(kept, plain):
        assert torch.equal(a, b)


@pytest.fixture(scope="module")
def _shared_library_env(tmp_path_factory):
    """Three short synthesized clips of different lengths in one directory."""
    from unilab.tasks.g1_motion_tracking.env import G1MotionTrackingEnv

    d = tmp_path_factory.mktemp("library")
    for name, duration, seed in (("a", 0.5, 1), ("b", 1.0, 2), ("c", 0.7, 3)):
        save_motion_clip(synthesize(duration=duration, seed=seed), d / f"{name}.npz")
    cfg = nominal_config(N, motion_file=str(d), episode_length_s=2.0)
    return G1MotionTrackingEnv(cfg, MjWarpSimConfig(), device="cpu", seed=0)


@pytest.fixture
def library_env(_shared_library_env):
    _shared_library_env.generator.manual_seed(0)  # as `env`
    return _shared_library_env


def test_library_env_concatenates_and_resets_onto_clips(library_env):
    env = library_env
    lengths = [load_motion_clip(p).num_frames for p in sorted(Path(env.cfg.motion_file).glob("*.npz"))]
    assert env.clip_names == ["a", "b", "c"] and env.clip_num_frames == lengths and env.num_frames == sum(lengths)
    with pytest.raises(AttributeError, match="3 clips"):
        env.clip
    clips, frames = torch.tensor([0, 1, 2, 2, 1, 0]), torch.tensor([0, 5, 0, 10, 1000, 3])
    obs = env.reset_to_clips(clips, frames)
    offsets = torch.tensor([0, lengths[0], lengths[0] + lengths[1]])
    local = torch.tensor([0, 5, 0, 10, lengths[1] - 2, 3])  # past the end: the clip's last start frame
    assert torch.equal(env.motion_clip, clips) and torch.equal(env.motion_frame, offsets[clips] + local)
    for k in range(N):  # the reference is the clip file's own frame
        clip = env.motion.clips[int(clips[k])]
        torch.testing.assert_close(obs[k, :29], torch.as_tensor(clip.joint_pos[int(local[k])]))
    for name, err in env.tracking_errors().items():
        assert err.max() < 1e-4, name
    # Default frames: every env at its clip's first frame.
    env.reset_to_clips(torch.tensor([2] * N))
    assert (env.motion_frame == offsets[2]).all()
    with pytest.raises(ValueError, match="clip ids"):
        env.reset_to_clips(torch.tensor([3] * N))


def test_library_episodes_stay_inside_their_clip(library_env):
    env = library_env
    env.generator.manual_seed(7)
    env.reset()
    offsets = env.clip_offset
    seen_clips = set()
    gen = torch.Generator().manual_seed(2)
    for _ in range(60):
        clip, start = env.motion_clip.clone(), env.motion_start.clone()
        _, _, _, terminated, truncated, info = env.step(torch.rand(N, 29, generator=gen) * 0.2 - 0.1)
        seen_clips.update(env.motion_clip.tolist())
        # Envs that did not finish keep their clip and move within it; a clip end truncates.
        going = ~(terminated | truncated)
        assert torch.equal(env.motion_clip[going], clip[going]) and torch.equal(env.motion_start[going], start[going])
        lo = offsets[env.motion_clip]
        hi = lo + env.clip_length[env.motion_clip] - 1
        assert ((env.motion_frame >= lo) & (env.motion_frame <= hi)).all()
        assert ((env.motion_start >= lo) & (env.motion_start < hi)).all()
    assert seen_clips == {0, 1, 2}
    for name in env.clip_names:
        assert 0 <= info[f"metrics/clip/{name}/failure_rate"] <= 1
    assert 0 < info["metrics/sampling/entropy"] <= 1 and 0 < info["metrics/sampling/max_clip_share"] <= 1


def test_only_step_resets_count_as_episode_ends(library_env):
    env = library_env
    before = env.sampler.bin_failure_rate.clone()
    env.terminated.fill_(True)  # a stale flag must not be counted by an explicit reset
    env.reset_to_clips(torch.tensor([1] * N), torch.full((N,), 20))
    assert torch.equal(env.sampler.bin_failure_rate, before)
    qpos = env.backend.qpos
    qpos[:, 2] += 0.5  # every anchor too high: all terminate in clip b's first bin
    env.backend.forward()
    _, _, _, terminated, _, _ = env.step(torch.zeros(N, 29))
    assert terminated.all()
    alpha = env.cfg.sampling.smoothing
    expected = (1 - alpha) * before
    expected[int(env.sampler.clip_first_bin[1])] += alpha * N
    torch.testing.assert_close(env.sampler.bin_failure_rate, expected)
    assert env.sampler.clip_failure_rate[1] > 0

"""The tracking metadata pinned to the env, as tests/test_sim2sim_agreement.py pins the walk's: a randomly
initialised g1_motion_tracking policy exported from an MJWarp env on the CPU plays a synthesised clip from its first
frame in MJWarp (the env) and in plain MuJoCo (unilab.deploy.tracking's play_clip, from the ONNX file, its metadata
and the clip alone). Their observations agree term by term and their actions step by step, and the episode ends on
the same control step in both: the one the metadata's frame rule names for the clip's end."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

FPS = 60.0  # 1.2 clip frames per 50 Hz control step: the frame rule rounds, and the end is an exact quotient
DURATION_S = 1.0  # 61 frames: the clip ends after floor(60 / 1.2) = 50 steps
# The action means' head scaled up from its init (within 1e-3 of zero, actions of about 1e-3): actions of about 0.2
# on average, at most about 0.6, far from the tanh's bounds, on which the robot tracks the whole clip unterminated.
HEAD_GAIN = 300.0
# Per term, about ten times what float32 MJWarp against float64 MuJoCo leaves over the 50 steps: the reference terms
# are the clip's float32 numbers at the same frame and come out equal (a frame off by one moves them by about 1e-2);
# positions and orientations part by about 1e-5 (m, rad, rotation entries), velocities by about 4e-4 (m/s, rad/s),
# actions by about 6e-5. A term in another frame, unit or order, or PD targets around another frame, parts them by
# far more within a few steps.
POSITION_TOL, VELOCITY_TOL, ACTION_TOL = 1e-4, 5e-3, 1e-3
TOLERANCES = {
    "ref_joint_pos": 1e-6, "ref_joint_vel": 1e-6,
    "anchor_pos_b": POSITION_TOL, "anchor_ori_b": POSITION_TOL, "joint_pos_rel": POSITION_TOL,
    "base_lin_vel_b": VELOCITY_TOL, "base_ang_vel_b": VELOCITY_TOL, "joint_vel": VELOCITY_TOL,
    "last_action": ACTION_TOL,
}


def _env_clip_and_policy(tmp_path):
    from tiny_learners import export_random_policy
    from unilab.motion import save_motion_clip
    from unilab.motion.synth import synthesize
    from unilab.registry import instantiate
    from unilab.tasks import make_env

    clip = save_motion_clip(synthesize(duration=DURATION_S, fps=FPS), tmp_path / "clip.npz")
    off = {"reset_root_pos": 0.0, "reset_root_yaw": 0.0, "reset_joint_pos": 0.0, "reset_vel": 0.0,
           "friction_range": None, "push_interval_s": None, "com_offset": None}
    task = {"name": "g1_motion_tracking", "num_envs": 1, "motion_file": str(clip),
            "observations": {"noise_scale": 0.0}, "randomization": off}
    env = make_env(instantiate("task", task), instantiate("sim", {}), "cpu", 0)
    policy = export_random_policy(env, "g1_motion_tracking", tmp_path / "policy.onnx", head_gain=HEAD_GAIN)
    return env, clip, policy


class _Both:
    """The ONNX policy as play_clip calls it on MuJoCo's observation; each call also checks that observation and its
    action against the env's and steps the env with the action of the env's own observation."""

    def __init__(self, policy, env, first_obs):
        self.policy, self.meta, self.env, self.warp_obs = policy, policy.meta, env, first_obs
        self.calls, self.truncated_at, self.final_warp_obs = 0, None, None
        self.protocol = []  # the env's protocol errors after each step that did not end the episode
        sizes = self.meta["observation_sizes"]
        edges = np.cumsum([0, *sizes])
        self.slices = {n: slice(a, b) for n, a, b in zip(self.meta["observation_names"], edges[:-1], edges[1:])}

    def __call__(self, obs):
        import torch

        step = self.calls
        assert self.truncated_at is None, f"the env's episode ended after {self.truncated_at} steps, MuJoCo's goes on"
        self.compare(obs, self.warp_obs, f"observation at step {step}")
        action, warp_action = self.policy(obs), self.policy(self.warp_obs)
        np.testing.assert_allclose(action, warp_action, atol=ACTION_TOL, err_msg=f"action at step {step}")
        warp_obs, _, _, terminated, truncated, info = self.env.step(torch.as_tensor(warp_action)[None])
        assert not bool(terminated[0]), f"the env terminated at step {step + 1}: the random policy fell"
        self.calls, self.last_action = self.calls + 1, np.clip(action, -1.0, 1.0)
        if bool(truncated[0]):
            self.truncated_at, self.final_warp_obs = self.calls, info["final_obs"][0].numpy()
        else:
            self.protocol.append({k: float(v[0]) for k, v in self.env.protocol_errors().items()})
        self.warp_obs = warp_obs[0].numpy()
        return action

    def compare(self, obs, warp_obs, what):
        for name, part in self.slices.items():
            np.testing.assert_allclose(obs[part], warp_obs[part], atol=TOLERANCES[name], rtol=0,
                                       err_msg=f"{what}, term {name}")


@pytest.mark.integration
def test_plain_mujoco_and_mjwarp_agree_on_a_clip_and_end_it_on_the_same_step(tmp_path):
    import torch

    from unilab.deploy.model import build_model
    from unilab.deploy.policy import OnnxPolicy
    from unilab.deploy.tracking import ClipPlayer, load_clip, play_clip

    env, clip_path, path = _env_clip_and_policy(tmp_path)
    policy = OnnxPolicy(path)
    meta = policy.meta
    model, _ = build_model(meta, "ours")
    both = _Both(policy, env, env.reset_to_clips(torch.zeros(1, dtype=torch.long))[0].numpy())
    last = {}
    (row,) = play_clip(model, both, str(clip_path), on_frame=lambda data: last.update(data=data))

    # The rule the metadata states for the clip's end, from the metadata and the clip alone (float64, as written).
    clip, bodies = load_clip(str(clip_path), meta)
    rule = meta["motion"]["frame_rule"]
    assert "floor((last frame - start frame) / (fps * control_dt))" in rule, rule
    per_step = clip.fps * meta["control_dt"]
    end = max(1, math.floor((clip.num_frames - 1) / per_step + 1e-6))
    assert end == 50 and min(round(end * per_step), clip.num_frames - 1) == clip.num_frames - 1
    assert row["fall_fraction"] == 0.0 and row["completion"] == 1.0
    assert both.calls == end, f"MuJoCo played {both.calls} steps, the metadata's rule says {end}"
    assert both.truncated_at == end, f"the env's episode ended after {both.truncated_at} steps, the rule says {end}"

    # The published tables' errors, averaged over the same steps (all but the truncating one), agree to positions'
    # tolerance; another body list, root or frame parts them by far more (the anchor for the root: 0.7 mm).
    for key in ("global", "root_relative"):
        warp_mm = 1000.0 * np.mean([p[key] for p in both.protocol])
        assert warp_mm > 0.1 and row[f"{key}_body_pos_error_mm"] == pytest.approx(warp_mm, abs=1000.0 * POSITION_TOL)
    assert len(both.protocol) == end - 1 and row["success"] == 1.0

    # The state the episode ends on, at the clip's last frame: MuJoCo's against the env's final observation.
    final = ClipPlayer(model, meta, clip, bodies).observation(last["data"], end, both.last_action)
    both.compare(final, both.final_warp_obs, "the final observation")

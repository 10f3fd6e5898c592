"""The metadata pinned to the env: a randomly initialised walk policy exported from an MJWarp env on the CPU, then
run from the same start state in MJWarp (the env) and in plain MuJoCo (unilab.deploy, from the ONNX file and its
metadata alone). Their observations and actions agree step by step: a term built in another frame, unit, scale
or order, a gait clock off by a step or PD targets around the wrong pose would part them at once."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

# 1.2 s, a gait period and a half: the random policy's robot has not fallen yet (it does by about 1.4 s, and the env
# then resets). Over these steps the two agree to about 1e-6 (float32 MJWarp against float64 MuJoCo).
STEPS = 60
OBS_TOL = 1e-3  # scaled observation units (rad, rad/s x 0.05, rad/s x 0.25)
ACTION_TOL = 1e-3  # of an action in [-1, 1]
COMMAND = (0.5, 0.2, 0.3)


def _env_and_policy(tmp_path):
    import torch

    from tiny_learners import export_random_policy
    from unilab.registry import instantiate
    from unilab.tasks import make_env

    task = {"name": "g1_walk_flat", "num_envs": 1, "observations": {"noise_scale": 0.0},
            "randomization": {"friction_range": None, "push_interval_s": None, "stagger_first_episode": False,
                              "reset_joint_pos_noise": 0.0, "reset_base_yaw": 0.0, "reset_base_vel_noise": 0.0}}
    env = make_env(instantiate("task", task), instantiate("sim", {}), "cpu", 0)
    env.hold_commands(torch.tensor([COMMAND]))
    return env, export_random_policy(env, "g1_walk_flat", tmp_path / "policy.onnx")


@pytest.mark.integration
def test_plain_mujoco_and_mjwarp_agree_on_observations_and_actions(tmp_path):
    import torch

    from unilab.deploy.model import build_model, decimation
    from unilab.deploy.observe import Robot, WalkInputs, action_targets, walk_observation
    from unilab.deploy.policy import OnnxPolicy
    from unilab.deploy.walk import start_state
    from unilab.sim.headless import mujoco

    env, path = _env_and_policy(tmp_path)
    policy = OnnxPolicy(path)
    meta = policy.meta
    model, _ = build_model(meta, "ours")
    robot = Robot(model, meta["joint_names"])
    data = mujoco.MjData(model)
    data.qpos[:] = start_state(meta, model, robot)
    mujoco.mj_forward(model, data)
    inputs = WalkInputs(np.asarray(COMMAND), 0, np.zeros(meta["action_dim"]))

    warp_obs = env.reset()[0].numpy()
    for step in range(STEPS):
        obs = walk_observation(meta, robot, data, inputs)
        np.testing.assert_allclose(obs, warp_obs, atol=OBS_TOL, err_msg=f"observation at step {step}")
        action, warp_action = policy(obs), policy(warp_obs)
        np.testing.assert_allclose(action, warp_action, atol=ACTION_TOL, err_msg=f"action at step {step}")
        data.ctrl[robot.actuators] = action_targets(meta, action)
        for _ in range(decimation(meta, model)):
            mujoco.mj_step(model, data)
        inputs.steps, inputs.last_action = inputs.steps + 1, np.clip(action, -1.0, 1.0)
        warp_obs, *_ = env.step(torch.as_tensor(warp_action)[None])
        warp_obs = warp_obs[0].numpy()
        assert bool(env.episode_length[0] == step + 1), "the env reset: the rollout left the comparable range"
    np.testing.assert_allclose(env.backend.ctrl[0].numpy(), data.ctrl[robot.actuators], atol=1e-3)

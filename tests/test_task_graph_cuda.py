"""On CUDA the post-physics part of a step is one captured graph (sim.task_cuda_graph). It must give
the eager results, resets and RNG draws included. Runs on a GPU host only (the H200 device)."""

import pytest
import torch

from unilab.sim.config import MjWarpSimConfig
from unilab.tasks import make_env
from unilab.tasks.g1_motion_tracking.config import G1MotionTrackingConfig
from unilab.tasks.g1_walk_flat.config import G1WalkFlatConfig

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

N = 64


def _rollout(cfg, graph: bool, steps: int = 40):
    env = make_env(cfg, MjWarpSimConfig(task_cuda_graph=graph), device="cuda:0", seed=7)
    gen = torch.Generator(device="cuda:0").manual_seed(2)
    rows = [env.reset().clone()]
    dones = 0
    for _ in range(steps):
        obs, critic, reward, terminated, truncated, info = env.step(
            torch.rand(N, env.action_dim, device="cuda:0", generator=gen) * 2 - 1)
        rows += [obs.clone(), critic.clone(), reward.clone()]
        dones += int((terminated | truncated).sum())
    torch.cuda.synchronize()
    return rows, dones


@pytest.mark.parametrize("cfg", [G1WalkFlatConfig(num_envs=N, episode_length_s=0.3),
                                 G1MotionTrackingConfig(num_envs=N, episode_length_s=0.3)],
                         ids=["walk_flat", "motion_tracking"])
def test_captured_step_matches_eager(cfg):
    eager, eager_dones = _rollout(cfg, graph=False)
    graphed, graphed_dones = _rollout(cfg, graph=True)
    assert eager_dones > N  # every env reset at least once inside the captured steps
    assert graphed_dones == eager_dones
    for i, (a, b) in enumerate(zip(eager, graphed)):
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4, msg=lambda m: f"row {i}: {m}")

"""Tiny CPU configurations of the three SAC learners and the checks their tests share (FlashSAC's helpers serve
WarpSAC, a FlashSAC with another replay sampler and update order)."""

from __future__ import annotations

import io
import math
import subprocess
import sys

import torch

from unilab.algos.base import make_learner
from unilab.algos.fastsac.config import FastSACConfig
from unilab.algos.flashsac.config import FlashSACConfig
from unilab.algos.flashsac.networks import EnsembleBatchNorm, EnsembleRMSNorm, UnitLinear
from unilab.algos.warpsac.config import ReplaySampling, WarpSACConfig

OBS, CRITIC_OBS, ACT, ENVS = 5, 7, 3, 32  # FlashSAC's and WarpSAC's learners (FastSAC's tests use their own)

FASTSAC = FastSACConfig(
    batch_size=64,
    updates_per_step=4,
    policy_delay=2,
    replay_capacity=4096,
    learning_starts=1,
    critic_hidden_dim=32,
    actor_hidden_dim=32,
    num_atoms=51,
    v_min=-6.0,
    v_max=1.0,
    lr=3e-3,
    init_alpha=0.05,
    bf16=False,
    cuda_graph=False,
)
FLASHSAC = FlashSACConfig(
    batch_size=64, updates_per_step=2, policy_delay=2, replay_capacity=2048, learning_starts=1,
    actor_hidden_dim=16, critic_hidden_dim=16, actor_num_blocks=1, critic_num_blocks=1, num_envs=ENVS,
    noise_repeat_max=4,
)
WARPSAC = WarpSACConfig(
    batch_size=64, updates_per_step=4, policy_delay=2, replay_capacity=2048, learning_starts=1,
    actor_hidden_dim=16, critic_hidden_dim=16, actor_num_blocks=1, critic_num_blocks=1, num_envs=ENVS,
    noise_repeat_max=4, replay_sampling=ReplaySampling(decay_step=64, num_buckets=16),
)  # fmt: skip


def export_random_policy(env, task: str, path, head_gain: float | None = None):
    """A randomly initialised FastSAC actor (32 wide) for `env`, exported to `path` as ONNX with the env's metadata
    (schema 2, as training writes it). Its head starts within 1e-3 of zero, so its actions are about 1e-3:
    `head_gain` multiplies the weights of the action means' head, for actions that move the joints."""
    from unilab.rundir.policy import metadata_props
    from unilab.tasks.common.metadata import env_description

    cfg = FastSACConfig(actor_hidden_dim=32, critic_hidden_dim=32, bf16=False, cuda_graph=False, replay_capacity=64)
    lrn = make_learner(cfg, env.obs_dim, env.critic_obs_dim, env.action_dim, torch.device("cpu"), 0)
    if head_gain is not None:
        with torch.no_grad():
            lrn.actor.net[-1].weight[: env.action_dim].mul_(head_gain)
    meta = metadata_props(env_description(env), task=task, algo="fastsac", checkpoint="none", iteration=0,
                          env_steps=0)
    lrn.export_onnx(str(path), meta)
    return path


def transitions(n: int = ENVS, terminal_prob: float = 0.1) -> dict[str, torch.Tensor]:
    return {
        "obs": torch.randn(n, OBS),
        "critic_obs": torch.randn(n, CRITIC_OBS),
        "action": torch.rand(n, ACT) * 2 - 1,
        "reward": torch.randn(n),
        "next_obs": torch.randn(n, OBS),
        "next_critic_obs": torch.randn(n, CRITIC_OBS),
        "terminated": (torch.rand(n) < terminal_prob).float(),
    }


def learner(cfg: FlashSACConfig = FLASHSAC, seed: int = 0, chunks: int = 4):
    torch.manual_seed(100 + seed)
    lrn = make_learner(cfg, OBS, CRITIC_OBS, ACT, "cpu", seed)
    for _ in range(chunks):
        lrn.add(transitions())
    return lrn


def norm_layers(module):
    return [m for m in module.modules() if isinstance(m, (UnitLinear, EnsembleBatchNorm, EnsembleRMSNorm))]


def assert_on_spheres(module) -> None:
    for m in norm_layers(module):
        if isinstance(m, UnitLinear):
            torch.testing.assert_close(m.weight.norm(dim=-1), torch.ones(m.weight.shape[:-1]))
        else:
            sq = m.weight.square().sum(-1) + (m.bias.square().sum(-1) if isinstance(m, EnsembleBatchNorm) else 0)
            torch.testing.assert_close(sq, torch.full_like(sq, float(m.weight.shape[-1])))


def name_imported_without_torch(module: str, cls: str) -> str:
    """The `name` of config class `cls` of `module`, built in a fresh interpreter that must not import torch."""
    code = f"import sys, {module} as c; assert 'torch' not in sys.modules; print(c.{cls}().name)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def round_trip_continues_identically(cfg) -> None:
    """A learner of `cfg` saved after two cycles and loaded into another of another seed acts and updates
    as the first does."""
    lrn = learner(cfg)
    for _ in range(2):
        lrn.update()
    lrn.publish_policy()
    other = make_learner(cfg, OBS, CRITIC_OBS, ACT, "cpu", seed=7)
    saved = io.BytesIO()
    torch.save(lrn.state_dict(), saved)  # state_dict() aliases live tensors (optimiser moments): go via bytes
    saved.seek(0)
    other.load_state_dict(torch.load(saved, weights_only=True))
    obs = torch.randn(16, OBS)
    assert torch.equal(other.act(obs, deterministic=True), lrn.act(obs, deterministic=True))
    # Same replay contents and RNG: the next update matches to the bit.
    other.replay.extend({k: v[: lrn.replay.size] for k, v in lrn.replay.storage.items()})
    torch.manual_seed(3)
    m1 = lrn.update()
    torch.manual_seed(3)
    m2 = other.update()
    for key in m1:
        assert torch.equal(m1[key], m2[key]), key
    assert other.num_updates == lrn.num_updates
    assert all(g["lr"] is other.lr for g in other.critic_opt.param_groups)


def bandit(cfg, device: str, cycles: int = 30, max_error: float = 0.4):
    """A learner of `cfg` (4-dim observations, 2-dim actions) trained for `cycles` update cycles on a
    one-step bandit, reward -|a - a*|^2: its deterministic action must approach a*. Returns the learner."""
    torch.manual_seed(0)
    torch.set_default_device(device)
    try:
        lrn = make_learner(cfg, 4, 4, 2, device, 0)
        _bandit(lrn, cycles, max_error)
        return lrn
    finally:
        torch.set_default_device(None)


def _bandit(lrn, cycles: int, max_error: float) -> None:
    assert lrn.compiled == lrn.use_graph == (lrn.device.type == "cuda")
    best = torch.tensor([0.5, -0.3])

    def play(actions):
        obs = torch.randn(64, 4)
        reward = -(actions - best).square().sum(-1)
        lrn.add({"obs": obs, "critic_obs": obs, "action": actions, "reward": reward, "next_obs": obs,
                 "next_critic_obs": obs, "terminated": torch.ones(64)})

    for _ in range(8):
        play(torch.rand(64, 2) * 2 - 1)
    probe = torch.randn(256, 4)

    def error():
        return float((lrn.act(probe, deterministic=True) - best).norm(dim=-1).mean())

    start = error()
    for _ in range(cycles):
        metrics = lrn.update()
        lrn.publish_policy()
        play(lrn.act(torch.randn(64, 4)))
    assert all(math.isfinite(float(v)) for v in metrics.values())
    assert error() < min(max_error, 0.5 * start), (start, error())
    assert lrn._graph is not None or not lrn.use_graph
    assert_on_spheres(lrn.critic)

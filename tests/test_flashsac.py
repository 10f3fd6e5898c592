"""FlashSAC learner and the shared helpers it uses (CPU, tiny networks)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from tiny_learners import (
    ACT, CRITIC_OBS, ENVS, OBS, assert_on_spheres, bandit, learner, name_imported_without_torch, norm_layers,
    round_trip_continues_identically, transitions,
)
from tiny_learners import FLASHSAC as TINY
from train_compose import compose_train

from unilab.algos.base import make_learner
from unilab.algos.common import (
    RepeatedNoise,
    ReturnNormalizer,
    categorical_projection,
    repeat_length_probs,
    warmup_cosine,
)
from unilab.algos.flashsac.config import FlashSACConfig
from unilab.algos.flashsac.networks import UnitLinear, project_weights_


# ---------------------------------------------------------------- shared helpers


def test_categorical_projection_hand_computed():
    support = torch.linspace(0.0, 4.0, 5)
    probs = torch.tensor([0.1, 0.2, 0.3, 0.2, 0.2])
    # r = 0.5, gamma = 1: atoms at 0.5 .. 4.5; each splits evenly, the last is clamped onto 4.
    out = categorical_projection(probs, 0.5 + support, support)
    torch.testing.assert_close(out, torch.tensor([0.05, 0.15, 0.25, 0.25, 0.30]))
    # r = -1, gamma = 0.5: atoms -1, -0.5, 0, 0.5, 1 -> clamped mass piles up on the lowest support point.
    out = categorical_projection(probs, -1.0 + 0.5 * support, support)
    torch.testing.assert_close(out, torch.tensor([0.70, 0.30, 0.0, 0.0, 0.0]))


def test_categorical_projection_sums_to_one():
    torch.manual_seed(0)
    support = torch.linspace(-5.0, 5.0, 101)
    probs = torch.randn(64, 101).softmax(-1)
    atoms = torch.randn(64, 1) * 3 + torch.rand(64, 1) * support  # shifted and shrunk, some out of range
    out = categorical_projection(probs, atoms, support)
    assert (out >= 0).all()
    torch.testing.assert_close(out.sum(-1), torch.ones(64))
    # The mean is preserved wherever no atom was clamped.
    inside = ((atoms >= -5) & (atoms <= 5)).all(-1)
    torch.testing.assert_close((out * support).sum(-1)[inside], (probs * atoms).sum(-1)[inside], atol=1e-4, rtol=0)


def test_warmup_cosine_schedule():
    steps = torch.tensor([0.0, 5.0, 10.0, 55.0, 100.0, 500.0])
    lr = warmup_cosine(steps, init=0.0, peak=1e-3, end=1e-4, warmup_steps=10, total_steps=100)
    torch.testing.assert_close(lr, torch.tensor([0.0, 5e-4, 1e-3, 5.5e-4, 1e-4, 1e-4]))


def test_noise_is_held_for_the_drawn_number_of_steps():
    torch.manual_seed(0)
    rows, dim, max_repeat = 64, 2, 5
    noise = RepeatedNoise(repeat_length_probs(max_repeat, "uniform"), torch.device("cpu"))
    history, lengths = [noise(rows, dim).clone()], [noise.left + 1]
    for _ in range(40):
        history.append(noise(rows, dim).clone())
        lengths.append(noise.left + 1)
    checked = 0
    for r in range(rows):
        t = 0
        while True:
            k = int(lengths[t][r])  # drawn at step t
            assert 1 <= k <= max_repeat
            if t + k >= len(history):
                break
            for s in range(t + 1, t + k):
                assert torch.equal(history[s][r], history[t][r])
            assert not torch.equal(history[t + k][r], history[t][r])  # a fresh sample after k steps
            t += k
            checked += 1
    assert checked > rows * 5


def test_zeta_repeat_lengths_follow_their_law():
    torch.manual_seed(0)
    probs = repeat_length_probs(16, "zeta", 2.0)
    torch.testing.assert_close(probs[1] / probs[0], torch.tensor(0.25))
    noise = RepeatedNoise(probs, torch.device("cpu"))
    counts = torch.bincount(noise.draw_lengths(200_000) - 1, minlength=16).float() / 200_000
    torch.testing.assert_close(counts, probs, atol=4e-3, rtol=0)
    with pytest.raises(ValueError, match="zeta"):
        repeat_length_probs(4, "poisson")


def test_return_normalizer_matches_numpy():
    rng = np.random.default_rng(0)
    envs, ticks, chunks, gamma, max_return = 3, 2, 6, 0.9, 2.0
    rewards = rng.normal(1.0, 2.0, size=(chunks * ticks, envs))
    terminated = rng.random((chunks * ticks, envs)) < 0.2
    norm = ReturnNormalizer(gamma, max_return, num_envs=envs)
    for c in range(chunks):  # rows of a chunk are tick-major, as the collector writes them
        rows = slice(c * ticks, (c + 1) * ticks)
        norm.update(torch.tensor(rewards[rows].reshape(-1), dtype=torch.float32),
                    torch.tensor(terminated[rows].reshape(-1)))
    g, seen = np.zeros(envs), []
    for r, d in zip(rewards.astype(np.float32).astype(np.float64), terminated):
        g = gamma * g + r
        seen.append(g.copy())
        g = g * (1 - d)
    seen = np.array(seen)
    np.testing.assert_allclose(norm.return_stats.mean.numpy(), [seen.mean()], rtol=1e-5)
    np.testing.assert_allclose(norm.return_stats.var.numpy(), [seen.var()], rtol=1e-5)
    np.testing.assert_allclose(float(norm.max_abs_return), np.abs(seen).max(), rtol=1e-5)
    divisor = max(np.sqrt(seen.var() + 1e-8), np.abs(seen).max() / max_return)
    np.testing.assert_allclose(float(norm.divisor), divisor, rtol=1e-5)
    np.testing.assert_allclose(norm.returns.numpy(), g, rtol=1e-5, atol=1e-6)
    scaled = norm.normalize(torch.tensor([divisor], dtype=torch.float32))
    torch.testing.assert_close(scaled, torch.tensor([1.0]), rtol=1e-5, atol=0)
    with pytest.raises(ValueError, match="whole steps"):
        norm.update(torch.zeros(4), torch.zeros(4))


# ---------------------------------------------------------------- learner


def test_config_imports_without_torch():
    assert name_imported_without_torch("unilab.algos.flashsac.config", "FlashSACConfig") == "flashsac"
    cfg = FlashSACConfig()
    assert (cfg.batch_size, cfg.num_atoms, cfg.expansion, cfg.cuda_graph, cfg.bf16) == (2048, 101, 4, True, True)


def test_num_bins_is_a_deprecated_name_of_num_atoms():
    """The old key warns, naming algo.num_atoms, and still sets the atom count: in the dataclass, and in a
    plain attribute config (the runtime hands the learner the resolved dict, a run directory its own)."""
    from types import SimpleNamespace

    with pytest.warns(FutureWarning, match="algo.num_bins is deprecated .* algo.num_atoms"):
        cfg = replace(TINY, num_bins=51)
    assert (cfg.num_atoms, cfg.num_bins) == (51, None)
    plain = SimpleNamespace(**{**vars(TINY), "num_bins": 51})
    assert plain.num_atoms == 101
    for c in (cfg, plain):
        lrn = make_learner(c, OBS, CRITIC_OBS, ACT, "cpu", 0)
        assert lrn.support.shape == (51,) and lrn.critic.head_bias.shape == (2, 51)


def test_unit_norm_holds_after_optimiser_steps():
    lrn = learner()
    for module in (lrn.actor, lrn.critic, lrn.critic_target):
        assert_on_spheres(module)
    before = [m.weight.detach().clone() for m in norm_layers(lrn.critic)]
    metrics = lrn.update()
    assert all(torch.isfinite(v) for v in metrics.values())
    assert set(metrics) >= {"critic_loss", "actor_loss", "alpha"}
    for module in (lrn.actor, lrn.critic, lrn.critic_target):
        assert_on_spheres(module)
    assert any(not torch.equal(b, m.weight) for b, m in zip(before, norm_layers(lrn.critic)))  # they did move
    # Without the projection, a plain Adam step leaves the sphere.
    layer = UnitLinear(2, 4, 3)
    opt = torch.optim.Adam(layer.parameters(), lr=0.1)
    layer(torch.randn(2, 8, 4)).square().sum().backward()
    opt.step()
    assert not torch.allclose(layer.weight.norm(dim=-1), torch.ones(2, 3))
    project_weights_(layer)
    torch.testing.assert_close(layer.weight.norm(dim=-1), torch.ones(2, 3))


@pytest.mark.integration
def test_compiled_cycle_matches_eager(inductor_fallback_random):
    """algo.compile=true: the cycle calls compiled losses and sphere projections (inductor; C++ on the
    CPU) that leave every weight, BatchNorm statistic and the temperature where the eager cycle does."""
    eager, compiled = learner(replace(TINY, compile=False), seed=3), learner(replace(TINY, compile=True), seed=3)
    assert compiled.compiled and not eager.compiled
    assert compiled._critic_loss_fn is not compiled._critic_loss and eager._critic_loss_fn == eager._critic_loss
    assert not learner(seed=3).compiled  # compile=null: only where the cycle is a CUDA graph
    metrics = []
    for lrn in (eager, compiled):
        torch.manual_seed(0)
        metrics.append([lrn.update() for _ in range(2)])
    for a, b in zip(*metrics):
        for key in a:
            torch.testing.assert_close(b[key], a[key], atol=1e-5, rtol=1e-4, msg=key)
    for name in ("actor", "critic", "critic_target"):
        want, got = getattr(eager, name).state_dict(), getattr(compiled, name).state_dict()
        for key in want:
            torch.testing.assert_close(got[key], want[key], atol=1e-5, rtol=1e-4, msg=f"{name}.{key}")
    torch.testing.assert_close(compiled.log_alpha, eager.log_alpha)
    assert_on_spheres(compiled.critic_target)
    for lrn in (eager, compiled):
        lrn.publish_policy()
    probe, noise = torch.randn(16, OBS), torch.randn(16, ACT)
    assert compiled._act_fn is not compiled.acting  # acting is compiled too
    torch.testing.assert_close(compiled.act(probe, deterministic=True), eager.act(probe, deterministic=True),
                               atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(compiled._act_fn(probe, noise), eager.acting(probe, noise), atol=1e-5, rtol=1e-4)
    assert eager.critic.trunk.input_norm.updates.item() > 0  # the losses did update BatchNorm statistics


def test_learning_rate_lives_in_one_device_tensor_that_follows_the_schedule():
    cfg = replace(TINY, lr=1e-3, lr_init=0.0, lr_end=1e-4, lr_warmup_steps=4, lr_decay_steps=20)
    lrn = learner(cfg)
    for opt in (lrn.actor_opt, lrn.critic_opt, lrn.alpha_opt):
        assert all(g["lr"] is lrn.lr for g in opt.param_groups)
    for _ in range(3):
        lrn.update()
    # The 6th gradient step ran at step index 5, and lr_step now counts 6 steps.
    assert float(lrn.lr_step) == 6
    expected = warmup_cosine(torch.tensor(5.0), 0.0, 1e-3, 1e-4, 4, 20)
    torch.testing.assert_close(lrn.lr, expected)


def test_temperature_tracks_the_target_action_std():
    # The policy starts at target_action_std; move each target far away from it.
    wide, narrow = learner(), learner()
    wide.log_target_std, narrow.log_target_std = math.log(0.9), math.log(1e-3)
    alpha0 = TINY.init_alpha
    for _ in range(3):
        m_wide, m_narrow = wide.update(), narrow.update()
    assert float(m_wide["action_std"]) < 0.9 and float(m_wide["alpha"]) > alpha0
    assert float(m_narrow["action_std"]) > 1e-3 and float(m_narrow["alpha"]) < alpha0


def test_min_alpha_is_a_floor_under_the_temperature():
    # A target std far below the policy's drives the temperature down; the floor stops it there, and only there.
    floor = TINY.init_alpha * 0.999  # the tiny learner moves it about 0.2 % in six cycles
    free, floored = learner(), learner(replace(TINY, min_alpha=floor))
    for lrn in (free, floored):
        lrn.log_target_std = math.log(1e-3)
    for _ in range(6):
        m_free, m_floored = free.update(), floored.update()
    assert float(m_free["alpha"]) < floor
    assert float(m_floored["alpha"]) == pytest.approx(floor, rel=1e-6)
    # A floor above the starting temperature is where it starts.
    assert float(learner(replace(TINY, min_alpha=2 * TINY.init_alpha)).log_alpha.exp()) == pytest.approx(
        2 * TINY.init_alpha, rel=1e-6)
    with pytest.raises(ValueError, match="algo.min_alpha"):
        replace(TINY, min_alpha=-1e-3)


def test_reward_statistics_are_updated_in_add():
    lrn = make_learner(TINY, OBS, CRITIC_OBS, ACT, "cpu", 0)
    batches = [transitions() for _ in range(3)]
    ref = ReturnNormalizer(TINY.gamma, TINY.reward_norm_max_return, num_envs=ENVS)
    for b in batches:
        lrn.add(b)
        ref.update(b["reward"], b["terminated"])
    torch.testing.assert_close(lrn.reward_norm.divisor, ref.divisor)
    torch.testing.assert_close(lrn.reward_norm.returns, ref.returns)
    assert float(lrn.reward_norm.divisor) != 1.0


def test_publish_policy_and_repeated_noise_in_act():
    lrn = learner()
    obs = torch.randn(ENVS, OBS)
    before = lrn.act(obs, deterministic=True)
    lrn.update()
    assert torch.equal(lrn.act(obs, deterministic=True), before)  # acting copy untouched by update()
    lrn.publish_policy()
    after = lrn.act(obs, deterministic=True)
    assert not torch.equal(after, before)
    torch.testing.assert_close(after, torch.tanh(lrn.actor(obs)[0]))
    # Stochastic acting on fixed observations: an env's action changes only when its noise is redrawn.
    actions, fresh = [], []
    for _ in range(12):
        expired = lrn.noise.left <= 0 if lrn.noise.left is not None else torch.ones(ENVS, dtype=torch.bool)
        actions.append(lrn.act(obs))
        fresh.append(expired)
    assert all(a.abs().max() <= 1 for a in actions)
    for t in range(1, 12):
        same = (actions[t] == actions[t - 1]).all(-1)
        assert torch.equal(same, ~fresh[t])


def test_checkpoint_layout_is_unchanged():
    """Checkpoints written by earlier versions must keep loading: the entries stay the same, and the
    optimisers' groups hold no learning rate (the shared schedule tensor is restored from lr_step)."""
    sd = learner().state_dict()
    assert set(sd) == {"actor", "critic", "critic_target", "reward_norm", "log_alpha", "lr_step",
                       "actor_opt", "critic_opt", "alpha_opt", "num_updates"}
    assert not any("lr" in g for name in ("actor_opt", "critic_opt", "alpha_opt") for g in sd[name]["param_groups"])


def test_state_dict_round_trip_continues_identically():
    round_trip_continues_identically(TINY)


@pytest.mark.integration
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA"))])
def test_bandit_deterministic_action_approaches_the_optimum(device):
    """On CUDA with the defaults: bf16, compiled losses and projections, the cycle one captured graph."""
    cfg = replace(TINY, batch_size=128, updates_per_step=4, policy_delay=1, num_envs=64, lr=3e-3, lr_init=3e-3,
                  lr_end=3e-3, target_action_std=0.1)
    bandit(cfg, device)


def test_export_onnx_matches_act(tmp_path):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    ort = pytest.importorskip("onnxruntime")
    lrn = learner()
    lrn.update()
    lrn.publish_policy()
    path = tmp_path / "policy.onnx"
    lrn.export_onnx(str(path))
    obs = torch.randn(7, OBS)
    (out,) = ort.InferenceSession(str(path)).run(None, {"obs": obs.numpy()})
    np.testing.assert_allclose(out, lrn.act(obs, deterministic=True).numpy(), atol=1e-5)


def test_make_learner_takes_the_env_count_from_its_caller():
    """The runtime passes its env count (`make_learner(num_envs=...)`); add() splits its rows into env steps
    by it. Without it the config's own count is kept."""
    unset = replace(TINY, num_envs=0)
    assert make_learner(unset, OBS, CRITIC_OBS, ACT, "cpu", 0, num_envs=ENVS).reward_norm.num_envs == ENVS
    assert make_learner(TINY, OBS, CRITIC_OBS, ACT, "cpu", 0).reward_norm.num_envs == ENVS
    assert make_learner(unset, OBS, CRITIC_OBS, ACT, "cpu", 0).reward_norm.num_envs == 0


def test_hydra_composes_flashsac_per_task():
    from omegaconf import OmegaConf

    walk = OmegaConf.to_container(compose_train(["algo=flashsac_g1_walk_flat"]).algo, resolve=True)
    track = OmegaConf.to_container(
        compose_train(["algo=flashsac_g1_motion_tracking", "task=g1_motion_tracking"]).algo, resolve=True)
    assert walk["name"] == track["name"] == "flashsac"
    assert walk["num_envs"] == track["num_envs"] == 0  # the runtime passes the env count to make_learner
    assert track["batch_size"] == 8192 and track["target_action_std"] == 0.15
    assert walk["num_atoms"] == 101 and walk["num_bins"] is None and walk["v_max"] == walk["reward_norm_max_return"]

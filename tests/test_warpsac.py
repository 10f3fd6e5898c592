"""WarpSAC learner: FlashSAC trained actor first, on replay drawn by age (CPU, tiny networks; CUDA-only tests
skip here), and one short CPU run end to end."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from tiny_learners import (
    ACT, CRITIC_OBS, OBS, assert_on_spheres, bandit, name_imported_without_torch, norm_layers,
    round_trip_continues_identically, transitions,
)
from tiny_learners import WARPSAC as TINY
from tiny_learners import learner as flashsac_learner
from train_compose import compose_train

from unilab.algos.base import make_learner
from unilab.algos.flashsac.config import FlashSACConfig
from unilab.algos.flashsac.learner import FlashSACLearner
from unilab.algos.flashsac.networks import UnitLinear
from unilab.algos.replay import ReplayBuffer
from unilab.algos.warpsac.config import ReplaySampling, WarpSACConfig
from unilab.algos.warpsac.learner import WarpSACLearner
from unilab.algos.warpsac.replay import AgeBiasedSampler, age_weights


def learner(cfg=TINY, seed: int = 0, chunks: int = 4):
    return flashsac_learner(cfg, seed, chunks)


def flat(module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in module.parameters()])


# ---------------------------------------------------------------- config and registry


def test_config_imports_without_torch_and_keeps_flashsacs_defaults():
    assert name_imported_without_torch("unilab.algos.warpsac.config", "WarpSACConfig") == "warpsac"
    cfg, flash = WarpSACConfig(), FlashSACConfig()
    assert all(getattr(cfg, k) == v for k, v in vars(flash).items() if k != "name")
    assert set(vars(cfg)) - set(vars(flash)) == {"replay_sampling", "actor_normalize_parameters",
                                                 "critic_normalize_parameters"}
    assert cfg.replay_sampling == ReplaySampling(decay_step=512, min_weight=0.05, num_buckets=2000)
    assert cfg.actor_normalize_parameters and cfg.critic_normalize_parameters


@pytest.mark.parametrize("key, value, needle", [
    ("min_weight", 1.5, "algo.replay_sampling.min_weight=1.5: expected a number in [0, 1] (a weight)"),
    ("min_weight", -0.1, "algo.replay_sampling.min_weight=-0.1"),
    ("num_buckets", 0, "algo.replay_sampling.num_buckets=0: expected an integer in [1, 1000000]"),
])
def test_bad_replay_settings_are_refused(key, value, needle):
    from unilab.registry import instantiate

    with pytest.raises(ValueError, match=re.escape(needle)):
        instantiate("algo", {"name": "warpsac", "replay_sampling": {key: value}})


def test_registry_builds_warpsac():
    from unilab.registry import implementation, instantiate

    cfg = instantiate("algo", {"name": "warpsac", "replay_sampling": {"decay_step": -100}})
    assert isinstance(cfg, WarpSACConfig) and cfg.batch_size == 2048
    assert cfg.replay_sampling == ReplaySampling(decay_step=-100)
    assert implementation("algo", "warpsac") is WarpSACLearner
    assert isinstance(learner(chunks=0), WarpSACLearner)


def test_hydra_composes_warpsac():
    from omegaconf import OmegaConf

    algo = OmegaConf.to_container(compose_train(["algo=warpsac", "algo.replay_sampling.decay_step=0"]).algo)
    assert algo["name"] == "warpsac" and algo["replay_sampling"]["decay_step"] == 0 and algo["num_envs"] == 0
    assert algo["batch_size"] == FlashSACConfig.batch_size and algo["target_action_std"] == 0.15


# ---------------------------------------------------------------- the update order


def record_order(lrn) -> list[tuple[str, bool, bool]]:
    """Wraps the learner's compiled-or-plain loss functions: per call, which loss, and whether the actor's
    weights and log_alpha had already changed since the start of that gradient step."""
    calls, start = [], {}
    step = lrn._step

    def wrapped_step(update_actor):
        start["actor"], start["alpha"] = flat(lrn.actor).clone(), lrn.log_alpha.detach().clone()
        return step(update_actor)

    def spy(name, fn):
        def call(data, idx, alpha):
            calls.append((name, not torch.equal(flat(lrn.actor), start["actor"]),
                          not torch.equal(lrn.log_alpha.detach(), start["alpha"])))
            if name == "critic":  # the critic reads the temperature as it is now
                torch.testing.assert_close(alpha, lrn.log_alpha.detach().exp())
            return fn(data, idx, alpha)
        return call

    lrn._step = wrapped_step
    lrn._critic_loss_fn = spy("critic", lrn._critic_loss_fn)
    lrn._actor_loss_fn = spy("actor", lrn._actor_loss_fn)
    lrn.update()
    return calls


def test_actor_and_temperature_step_before_the_critic():
    """In each step that trains the actor, the actor and temperature take their optimiser steps first: the
    critic's loss then reads the updated actor and temperature. Each such step opens its group of
    `policy_delay` steps."""
    lrn = learner()
    assert lrn.policy_before_critic and lrn.actor_schedule == [True, False, True, False]
    calls = record_order(lrn)
    assert [name for name, *_ in calls] == ["actor", "critic", "critic", "actor", "critic", "critic"]
    assert calls[0] == ("actor", False, False)
    assert calls[1] == ("critic", True, True)  # same gradient step: the actor and log_alpha moved already
    assert calls[2] == ("critic", False, False)  # a critic-only step
    assert learner(replace(TINY, updates_per_step=6, policy_delay=3)).actor_schedule == [True, False, False] * 2


def test_the_order_check_tells_the_critic_first_order_apart():
    """The same recording on FlashSAC (the critic first, the actor closing each group) and on WarpSAC turned
    critic-first: what the test above asserts would fail."""
    flash = make_learner(FlashSACConfig(**{k: v for k, v in vars(TINY).items() if k in vars(FlashSACConfig())
                                           and k != "name"}), OBS, CRITIC_OBS, ACT, "cpu", 0)
    for _ in range(4):
        flash.add(transitions())
    assert type(flash) is FlashSACLearner
    assert [name for name, *_ in record_order(flash)] == ["critic", "critic", "actor", "critic", "critic", "actor"]
    critic_first = learner()
    critic_first.policy_before_critic = False
    calls = record_order(critic_first)
    assert calls[0] == ("critic", False, False) and calls[1][0] == "actor"


def test_the_order_changes_what_is_learnt():
    """One step from the same state and batch: actor first and critic first end in different critics (the
    target reads the updated policy and temperature) and different actors (the actor reads the critic
    before or after its step). Without an actor step the two orders are one."""
    first, second = learner(), learner()
    second.policy_before_critic = False
    for lrn in (first, second):
        lrn.sampler.prepare()
        torch.manual_seed(5)
        lrn._step(update_actor=False)
    assert torch.equal(flat(first.critic), flat(second.critic))
    for lrn in (first, second):
        torch.manual_seed(6)
        lrn._step(update_actor=True)
    assert not torch.equal(flat(first.critic), flat(second.critic))
    assert not torch.equal(flat(first.actor), flat(second.actor))


def test_metrics_are_flashsacs():
    metrics = learner().update()
    assert tuple(metrics) == FlashSACLearner.metric_names
    assert all(v.dim() == 0 and torch.isfinite(v) for v in metrics.values())


# ---------------------------------------------------------------- replay drawn by age


def expected_row_probs(size: int, capacity: int, ptr: int, decay: int, min_weight: float, buckets: int):
    """P(physical row) as the sampler's docstring and WarpSACConfig describe it, written out per row."""
    width = -(-size // buckets)
    weights, rows = [], []
    for b in range(buckets):
        start, end = b * width, min(b * width + width, size)
        if end <= start:
            continue
        age = size - (start + end - 1) // 2
        w = max(min_weight, 1 - age / decay) if decay > 0 else min(1.0, min_weight + age / -decay)
        weights.append(w)
        rows.append(range(start, end))
    if sum(weights) == 0:
        weights = [1.0] * len(weights)
    probs = torch.zeros(capacity, dtype=torch.float64)
    oldest = ptr - size
    for w, logical in zip(weights, rows):
        for row in logical:
            probs[(oldest + row) % capacity] = w / sum(weights) / len(logical)
    return probs


def filled_replay(capacity: int, rows: int) -> ReplayBuffer:
    replay = ReplayBuffer(capacity, {"x": ((1,), torch.float32)}, "cpu")
    for start in range(0, rows, 10):
        n = min(10, rows - start)
        replay.extend({"x": torch.arange(start, start + n, dtype=torch.float32).unsqueeze(1)})
    return replay


@pytest.mark.parametrize("capacity, rows, decay, min_weight, buckets", [
    (500, 230, 50, 0.1, 20),  # not full: the newest favoured
    (200, 530, 60, 0.05, 16),  # wrapped twice: ages follow the write position
    (200, 530, -120, 0.2, 16),  # the oldest favoured
    (120, 300, 30, 0.0, 1000),  # a bucket per row: exact per-row weights
    (100, 300, 5, 0.0, 4),  # every weight 0: buckets drawn uniformly
])
def test_age_biased_draws_follow_the_documented_weights(capacity, rows, decay, min_weight, buckets):
    replay = filled_replay(capacity, rows)
    sampler = AgeBiasedSampler(replay, decay, min_weight, buckets)
    sampler.prepare()
    torch.manual_seed(0)
    n = 400_000
    idx = sampler.sample(n)
    assert idx.dtype == torch.int64 and int(idx.min()) >= 0 and int(idx.max()) < replay.size
    got = torch.bincount(idx, minlength=capacity).double() / n
    want = expected_row_probs(replay.size, capacity, replay.ptr, decay, min_weight, buckets)
    torch.testing.assert_close(got, want, atol=2.5e-3, rtol=0.15)


def test_decay_zero_draws_uniformly_like_flashsac():
    replay = filled_replay(64, 100)
    sampler = AgeBiasedSampler(replay, 0, 0.05, 8)
    sampler.prepare()
    torch.manual_seed(3)
    got = sampler.sample(32)
    torch.manual_seed(3)
    assert torch.equal(got, replay.sample_indices(32))


def test_age_weights_profiles():
    age = torch.tensor([1.0, 50.0, 100.0, 400.0])
    torch.testing.assert_close(age_weights(age, 100, 0.1), torch.tensor([0.99, 0.5, 0.1, 0.1]))
    torch.testing.assert_close(age_weights(age, -100, 0.1), torch.tensor([0.11, 0.6, 1.0, 1.0]))


def test_the_update_samples_through_the_age_biased_sampler():
    lrn = learner(replace(TINY, replay_sampling=ReplaySampling(decay_step=8, min_weight=0.0, num_buckets=128)))
    seen = []
    sample = lrn.sampler.sample
    lrn.sampler.sample = lambda n: seen.append(sample(n)) or seen[-1]
    lrn.update()
    assert len(seen) == TINY.updates_per_step
    # size 128 in 128 buckets, decay 8: only the 7 newest rows carry weight.
    newest = set(range(lrn.replay.size - 7, lrn.replay.size))
    assert set(torch.cat(seen).tolist()) <= newest


# ---------------------------------------------------------------- norm bounds on or off


def test_parameters_stay_on_their_spheres_by_default():
    lrn = learner()
    lrn.update()
    for module in (lrn.actor, lrn.critic, lrn.critic_target):
        assert_on_spheres(module)


def test_parameter_normalisation_can_be_switched_off_per_network():
    cfg = replace(TINY, actor_normalize_parameters=False, critic_normalize_parameters=False, tau=0.5)
    lrn = learner(cfg)
    up = lrn.critic.trunk.blocks[0].up  # widening by 4: plain orthogonal rows have norm 1/2 on average
    assert up.weight.norm(dim=-1).mean() < 0.75
    assert torch.equal(flat(lrn.critic), flat(lrn.critic_target))
    target_before, critic_before = flat(lrn.critic_target).clone(), flat(lrn.critic).clone()
    lrn.sampler.prepare()
    lrn._step(update_actor=False)
    # The target is the plain EMA of the critic: no projection afterwards.
    torch.testing.assert_close(flat(lrn.critic_target), target_before + 0.5 * (flat(lrn.critic) - target_before))
    assert not torch.equal(flat(lrn.critic), critic_before)
    for _ in range(3):
        lrn.update()
    rows = torch.cat([m.weight.norm(dim=-1).flatten() for m in norm_layers(lrn.actor) if isinstance(m, UnitLinear)])
    assert (rows - 1).abs().max() > 1e-3  # left off the sphere
    only_actor = learner(replace(TINY, actor_normalize_parameters=False))
    only_actor.update()
    assert_on_spheres(only_actor.critic)


# ---------------------------------------------------------------- learning, checkpoints, CUDA


@pytest.mark.integration
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA"))])
def test_bandit_deterministic_action_approaches_the_optimum(device):
    """FlashSAC's one-step bandit, the replay drawn by age. On CUDA with the defaults: bf16, compiled losses,
    the cycle (the draws included) one captured graph."""
    cfg = replace(TINY, batch_size=128, updates_per_step=4, policy_delay=1, num_envs=64, lr=3e-3, lr_init=3e-3,
                  lr_end=3e-3, target_action_std=0.1, replay_sampling=ReplaySampling(1024, 0.05, 64))
    # Twice FlashSAC's cycles: drawing mostly the newest rows, it moves more slowly on this bandit.
    assert isinstance(bandit(cfg, device, cycles=60, max_error=0.3), WarpSACLearner)


def test_checkpoints_are_flashsacs_and_continue_identically():
    assert set(learner(chunks=0).state_dict()) == {"actor", "critic", "critic_target", "reward_norm", "log_alpha",
                                                   "lr_step", "actor_opt", "critic_opt", "alpha_opt", "num_updates"}
    # The reloaded learner's replay is filled with the same rows: the same write position, which ages count from.
    round_trip_continues_identically(TINY)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@cuda
def test_cuda_graph_draws_by_age_without_host_sync():
    """The captured cycle samples by age from the replay's current contents, and nothing syncs the host."""
    cfg = replace(TINY, replay_capacity=512, replay_sampling=ReplaySampling(decay_step=16, min_weight=0.0,
                                                                          num_buckets=512))
    lrn = make_learner(cfg, OBS, CRITIC_OBS, ACT, "cuda", 0)
    assert lrn.use_graph

    batches = [{k: v.cuda() for k, v in transitions().items()} for _ in range(32)]  # copied before the check
    for batch in batches[:2]:
        lrn.add(batch)
    lrn.update()  # warm-up cycles, capture, first replay
    assert lrn._graph is not None
    seen = []
    torch.cuda.set_sync_debug_mode("error")
    try:
        for batch in batches[2:]:  # wraps the ring under the captured graph
            lrn.add(batch)
            metrics = lrn.update()
            seen.append((lrn.replay.ptr, lrn.sampler.sample(256)))
            lrn.publish_policy()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert all(math.isfinite(float(v)) for v in metrics.values())
    for ptr, idx in seen:  # only the 15 newest rows carry weight (the sampler's table is the graph's)
        ages = (ptr - 1 - idx.cpu()) % 512 + 1
        assert int(ages.max()) <= 16


# ---------------------------------------------------------------- end to end


@pytest.mark.integration
def test_cpu_smoke_run_with_warpsac_completes_and_learns(tmp_path):
    """`train +preset=cpu_smoke --algo warpsac`: the two processes, the MJWarp walk task, updates whose critic
    loss falls, checkpoints, and the trained policy played from its checkpoint at the end."""
    from unilab.rundir.metrics import read_metrics

    cmd = [sys.executable, "-m", "unilab.cli.train", "+preset=cpu_smoke", "--algo", "warpsac", "task.num_envs=16",
           "training.outputs.logger=[]", "algo.max_iterations=16", "algo.save_interval=8", "training.outputs.play_envs=4",
           "training.outputs.play_steps=12", f"training.run.log_dir={tmp_path}", "training.run.run_name=warp"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    run = tmp_path / "warp"
    assert json.loads((run / "run_config.json").read_text())["algo"]["name"] == "warpsac"
    rows = read_metrics(run)
    assert [r["iteration"] for r in rows] == list(range(16))
    trained = [r for r in rows if r["critic_loss"] is not None]
    assert len(trained) >= 4 and all(math.isfinite(r["critic_loss"]) and math.isfinite(r["actor_loss"])
                                     for r in trained)
    assert trained[-1]["critic_loss"] < trained[0]["critic_loss"], [r["critic_loss"] for r in trained]
    summary = json.loads((run / "run_summary.json").read_text())
    assert summary["status"] == "completed" and summary["exit_codes"] == {"learner": 0, "collector": 0}
    assert (run / "checkpoints" / "iter_0000008.pt").exists() and (run / "checkpoints" / "latest.pt").exists()
    play = json.loads((run / "play.json").read_text())
    assert (play["num_envs"], play["steps"], play["iteration"]) == (4, 12, 16)
    assert math.isfinite(play["mean_return"])

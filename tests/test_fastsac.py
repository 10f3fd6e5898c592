"""FastSAC learner, C51 projection and the off-policy learner registry (CPU; CUDA-only tests skip here)."""

from __future__ import annotations

import importlib.util
import io
from dataclasses import replace

import pytest
import torch
from tiny_learners import FASTSAC as TINY

from unilab.algos.base import OffPolicyLearner, make_learner
from unilab.algos.common import categorical_projection
from unilab.algos.fastsac.learner import FastSACLearner

OBS, CRITIC_OBS, ACT, N = 8, 10, 3, 64
TARGET_ACTION = torch.tensor([0.5, -0.3, 0.2])


def learner(device="cpu", seed=0, **overrides) -> FastSACLearner:
    return make_learner(replace(TINY, **overrides), OBS, CRITIC_OBS, ACT, torch.device(device), seed)


def bandit_batch(lrn: FastSACLearner, gen: torch.Generator, target: torch.Tensor = TARGET_ACTION) -> dict:
    """One-step bandit: reward -||a - a*||^2, every transition terminal. `gen` and `target` live on the
    learner's device, so that no host-to-device copy happens here."""
    device = gen.device
    obs = torch.randn(N, OBS, generator=gen, device=device)
    critic_obs = torch.randn(N, CRITIC_OBS, generator=gen, device=device)
    action = lrn.act(obs)
    reward = -(action - target).square().sum(-1)
    terminated = torch.ones(N, dtype=torch.bool, device=device)
    return dict(obs=obs, critic_obs=critic_obs, action=action, reward=reward,
                next_obs=obs, next_critic_obs=critic_obs, terminated=terminated)  # fmt: skip


def filled(device="cpu", **overrides) -> FastSACLearner:
    lrn = learner(device, **overrides)
    gen = torch.Generator(device).manual_seed(1)
    for _ in range(2):
        lrn.add(bandit_batch(lrn, gen, TARGET_ACTION.to(device)))
    return lrn


# ---------------------------------------------------------------- C51 projection (FastSAC scatters; both ways)

METHODS = pytest.mark.parametrize("method", ["scatter", "dense"])


@METHODS
def test_projection_hand_computed(method):
    support = torch.tensor([-1.0, 0.0, 1.0])
    probs = torch.tensor([[0.2, 0.3, 0.5]])
    # r = 0.25, discount 0.5: atoms move to -0.25, 0.25, 0.75 (fractional indices 0.75, 1.25, 1.75).
    target_atoms = 0.25 + 0.5 * support.unsqueeze(0)
    out = categorical_projection(probs, target_atoms, support, method)
    expected = torch.tensor([[0.2 * 0.25, 0.2 * 0.75 + 0.3 * 0.75 + 0.5 * 0.25, 0.3 * 0.25 + 0.5 * 0.75]])
    torch.testing.assert_close(out, expected)  # [0.05, 0.5, 0.45]


@METHODS
def test_projection_terminal_collapses_onto_reward_and_clamps(method):
    support = torch.linspace(-1.0, 1.0, 5)  # spacing 0.5
    probs = torch.softmax(torch.randn(3, 5), -1)
    reward = torch.tensor([0.25, 5.0, -1.0])  # between atoms, above v_max, exactly v_min
    out = categorical_projection(probs, reward.unsqueeze(-1).expand(3, 5), support, method)  # discount 0
    torch.testing.assert_close(out[0], torch.tensor([0.0, 0.0, 0.5, 0.5, 0.0]))
    torch.testing.assert_close(out[1], torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0]))
    torch.testing.assert_close(out[2], torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0]))


@METHODS
def test_projection_keeps_mass_and_mean(method):
    torch.manual_seed(0)
    support = torch.linspace(-10.0, 10.0, 101)
    probs = torch.softmax(torch.randn(256, 101), -1)
    target_atoms = (torch.rand(256, 1) - 0.5) * 0.6 + 0.97 * support  # stays inside the support
    out = categorical_projection(probs, target_atoms, support, method)
    assert (out >= 0).all()
    torch.testing.assert_close(out.sum(-1), torch.ones(256))
    # Linear interpolation between neighbours preserves the expected value exactly.
    torch.testing.assert_close((out * support).sum(-1), (probs * target_atoms).sum(-1), atol=1e-4, rtol=1e-4)


def test_projection_methods_agree_and_unknown_is_refused():
    torch.manual_seed(0)
    support = torch.linspace(-5.0, 5.0, 51)
    probs = torch.softmax(torch.randn(32, 51), -1)
    atoms = torch.randn(32, 1) * 3 + 0.9 * support  # some beyond either end
    torch.testing.assert_close(categorical_projection(probs, atoms, support, "scatter"),
                               categorical_projection(probs, atoms, support, "dense"))
    with pytest.raises(ValueError, match="unknown method 'sparse'"):
        categorical_projection(probs, atoms, support, "sparse")


# ---------------------------------------------------------------- learner


def test_twin_critic_members_are_the_documented_mlp_and_independent():
    from unilab.algos.fastsac.networks import TwinDistributionalCritic, mlp

    torch.manual_seed(0)
    critic = TwinDistributionalCritic(CRITIC_OBS, ACT, hidden_dim=32, num_atoms=7)
    obs, act = torch.randn(5, CRITIC_OBS), torch.rand(5, ACT) * 2 - 1
    logits = critic(obs, act)
    assert logits.shape == (2, 5, 7)
    net = critic.net
    for m in range(2):
        # The same weights in the plain Linear/LayerNorm/SiLU stack give the same member output.
        ref = mlp(CRITIC_OBS + ACT, 32, 7)
        linears = [layer for layer in ref if isinstance(layer, torch.nn.Linear)]
        norms = [layer for layer in ref if isinstance(layer, torch.nn.LayerNorm)]
        with torch.no_grad():
            for lin, w, b in zip(linears, net.weights, net.biases):  # the unpadded part of each layer
                lin.weight.copy_(w[m, : lin.in_features, : lin.out_features].T)
                lin.bias.copy_(b[m, 0, : lin.out_features])
            for ln, w, b in zip(norms, net.norm_weights, net.norm_biases):
                ln.weight.copy_(w[m, 0])
                ln.bias.copy_(b[m, 0])
        torch.testing.assert_close(logits[m], ref(torch.cat([obs, act], -1)))
    # Member 1's output has no gradient into member 0's weights.
    logits[1].sum().backward()
    assert all(p.grad[0].abs().sum() == 0 and p.grad[1].abs().sum() > 0 for p in net.weights)


def test_padded_widths_are_aligned_and_their_weights_stay_zero_through_updates():
    """Odd input/output widths are padded to multiples of 8 (fast bf16 GEMM kernels on the GPU); the
    padding must not change the networks: its weights start at zero and no update moves them."""
    from unilab.algos.fastsac.networks import ALIGN

    lrn = learner(num_atoms=51)  # critic in 10 + 3 = 13 -> 16, atoms 51 -> 56; actor in 8, out 6 -> 8
    net, actor = lrn.critic.net, lrn.actor.net
    assert net.weights[0].shape[1:] == (16, 32) and net.weights[-1].shape[1:] == (8, 56)
    assert actor[0].in_features == 8 and actor[-1].out_features == 8
    assert all(w.shape[-1] % ALIGN == 0 for w in (net.weights[0], net.weights[-1], actor[-1].weight.T))

    def padding():
        return torch.cat([net.weights[0][:, 13:].flatten(), net.weights[-1][..., 51:].flatten(),
                          net.biases[-1][..., 51:].flatten(), actor[-1].weight[6:].flatten(),
                          actor[-1].bias[6:]])

    assert padding().numel() > 0 and (padding() == 0).all()
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        lrn.add(bandit_batch(lrn, gen))
        lrn.update()
    assert (padding() == 0).all()
    assert (net.weights[0][:, :13] != 0).all()  # the real weights did train
    assert lrn.critic(torch.randn(4, CRITIC_OBS), torch.rand(4, ACT)).shape == (2, 4, 51)


def test_compile_modes_with_cuda_graphs_are_refused():
    # The learner captures its whole cycle itself; inductor's own graphs inside it cannot be captured.
    with pytest.raises(ValueError, match="algo.compile_mode='max-autotune': choose one of null, default"):
        replace(TINY, compile_mode="max-autotune")
    assert replace(TINY, compile_mode="max-autotune-no-cudagraphs").compile_mode == "max-autotune-no-cudagraphs"


def test_registry_builds_fastsac_and_rejects_unknown():
    lrn = learner()
    assert isinstance(lrn, FastSACLearner) and isinstance(lrn, OffPolicyLearner)
    assert lrn.replay.capacity == TINY.replay_capacity
    assert lrn.target_entropy == -ACT
    with pytest.raises(ValueError, match="unknown off-policy algorithm 'nope'"):
        make_learner(replace(TINY, name="nope"), OBS, CRITIC_OBS, ACT, torch.device("cpu"), 0)


def test_one_learning_rate_and_the_deprecated_per_optimiser_rates():
    """`lr` sets critic, actor and temperature alike; the old per-optimiser keys warn, naming algo.lr, and
    still set their own optimiser's rate (also from a plain attribute config, as the runtime hands over)."""
    from types import SimpleNamespace

    lrn = learner(lr=1e-3)
    assert [opt.param_groups[0]["lr"] for opt in (lrn.critic_opt, lrn.actor_opt, lrn.alpha_opt)] == [1e-3] * 3
    with pytest.warns(FutureWarning, match=r"algo.critic_lr is deprecated .* set algo.lr"):
        cfg = replace(TINY, critic_lr=1e-2)
    with pytest.warns(FutureWarning, match="algo.alpha_lr"):
        replace(TINY, alpha_lr=1e-2)
    plain = SimpleNamespace(**{**vars(TINY), "critic_lr": 1e-2, "alpha_lr": 2e-2})
    for old in (make_learner(cfg, OBS, CRITIC_OBS, ACT, torch.device("cpu"), 0),
                make_learner(plain, OBS, CRITIC_OBS, ACT, torch.device("cpu"), 0)):
        assert old.critic_opt.param_groups[0]["lr"] == 1e-2
        assert old.actor_opt.param_groups[0]["lr"] == TINY.lr
    assert old.alpha_opt.param_groups[0]["lr"] == 2e-2


def test_ready_counts_samples_against_batch_size_and_learning_starts():
    lrn = learner(batch_size=100, learning_starts=3)
    gen = torch.Generator().manual_seed(0)
    assert not lrn.ready()
    with pytest.raises(RuntimeError, match="before ready"):
        lrn.update()
    lrn.add(bandit_batch(lrn, gen))
    lrn.add(bandit_batch(lrn, gen))
    assert not lrn.ready()  # 128 >= batch 100, but < 3 chunks of 64
    lrn.add(bandit_batch(lrn, gen))
    assert lrn.ready()


def test_add_updates_normalizers():
    lrn = learner()
    batch = bandit_batch(lrn, torch.Generator().manual_seed(0))
    lrn.add(batch)
    torch.testing.assert_close(lrn.obs_norm.mean.float(), batch["obs"].mean(0))
    torch.testing.assert_close(lrn.critic_obs_norm.mean.float(), batch["critic_obs"].mean(0))
    assert lrn.replay.size == N and lrn.replay.storage["terminated"].dtype == torch.float32


@pytest.mark.integration
def test_bandit_learns_target_action():
    lrn = learner()
    gen = torch.Generator().manual_seed(1)
    start_alpha = lrn.log_alpha.exp().item()
    for _ in range(150):
        lrn.add(bandit_batch(lrn, gen))
        if lrn.ready():
            metrics = lrn.update()
            lrn.publish_policy()
    assert set(metrics) == {"critic_loss", "actor_loss", "alpha", "entropy", "q_mean"}
    assert all(v.dim() == 0 and torch.isfinite(v) for v in metrics.values())
    assert metrics["alpha"].item() != pytest.approx(start_alpha, rel=1e-3)
    assert lrn.num_updates == 150 * TINY.updates_per_step
    greedy = lrn.act(torch.randn(256, OBS, generator=gen), deterministic=True)
    assert (greedy - TARGET_ACTION).abs().max() < 0.1, greedy.mean(0)
    assert metrics["q_mean"].item() > -0.5  # the learned value is close to the optimum 0


@pytest.mark.integration
@pytest.mark.parametrize("combo_kernels", [False, True], ids=["plain", "combo_kernels"])
def test_compiled_losses_match_eager(inductor_fallback_random, combo_kernels):
    """algo.compile=true: the cycle calls compiled critic and actor losses (inductor; C++ on the CPU)
    that compute what the eager losses compute, gradients included, and the cycle runs on them; also with
    algo.combo_kernels (inductor options instead of a mode)."""
    lrn = learner(seed=3, compile=True, combo_kernels=combo_kernels)
    gen = torch.Generator().manual_seed(1)
    b = {
        "obs": torch.randn(N, OBS, generator=gen),
        "next_obs": torch.randn(N, OBS, generator=gen),
        "critic_obs": torch.randn(N, CRITIC_OBS, generator=gen),
        "next_critic_obs": torch.randn(N, CRITIC_OBS, generator=gen),
        "action": torch.rand(N, ACT, generator=gen) * 2 - 1,
        "reward": torch.randn(N, generator=gen),
        "terminated": (torch.rand(N, generator=gen) < 0.2).float(),
    }
    idx = torch.randint(0, N, (N // 2,), generator=gen)  # the losses read these replay rows
    alpha = torch.tensor(0.1)

    def losses(critic_loss_fn, actor_loss_fn):
        params = [*lrn.critic.parameters(), *lrn.actor.parameters(), lrn.log_alpha]
        for p in params:
            p.grad = None
        torch.manual_seed(0)
        critic_loss, q_mean = critic_loss_fn(b, idx, alpha)
        critic_loss.backward()
        lrn.critic.requires_grad_(False)
        actor_loss, alpha_loss, logp = actor_loss_fn(b, idx, alpha)
        lrn.critic.requires_grad_(True)
        (actor_loss + alpha_loss).backward()
        grads = [p.grad.clone() for p in params]
        return [critic_loss.detach(), q_mean, actor_loss.detach(), alpha_loss.detach(), logp.detach(), *grads]

    eager = losses(lrn._critic_loss, lrn._actor_loss)
    compiled = losses(lrn._critic_loss_fn, lrn._actor_loss_fn)
    assert lrn.compiled and lrn._critic_loss_fn is not lrn._critic_loss
    assert not learner(seed=3).compiled  # compile=null: only where the cycle is a CUDA graph
    for x, y in zip(eager, compiled):
        torch.testing.assert_close(y, x, atol=1e-5, rtol=1e-4)
    lrn.add(bandit_batch(lrn, gen))
    lrn.add(bandit_batch(lrn, gen))
    assert all(torch.isfinite(v) for v in lrn.update().values())
    lrn.publish_policy()
    probe = torch.randn(16, OBS, generator=gen)
    assert lrn._act_fn is not lrn.acting  # acting is compiled too
    torch.testing.assert_close(lrn.act(probe, deterministic=True), lrn.acting(probe, True), atol=1e-5, rtol=1e-4)


def test_act_uses_published_copy_only():
    lrn = filled()
    obs = torch.randn(16, OBS)
    before = lrn.act(obs, deterministic=True)
    lrn.update()
    assert torch.equal(lrn.act(obs, deterministic=True), before)  # update() does not touch the acting copy
    fresh = torch.tanh(lrn.actor(lrn.obs_norm(obs))[0])
    assert not torch.allclose(fresh, before)
    lrn.publish_policy()
    torch.testing.assert_close(lrn.act(obs, deterministic=True), fresh)
    stochastic = lrn.act(obs)
    assert stochastic.shape == (16, ACT) and stochastic.abs().max() <= 1.0
    assert not torch.equal(stochastic, lrn.act(obs))


def test_policy_delay_pattern():
    assert learner(updates_per_step=8, policy_delay=2).actor_schedule == [False, True] * 4
    assert learner(updates_per_step=3, policy_delay=3).actor_schedule == [False, False, True]
    with pytest.raises(ValueError, match="policy_delay"):
        learner(updates_per_step=1, policy_delay=2)

    lrn = filled()
    actor = [p.clone() for p in lrn.actor.parameters()]
    critic = [p.clone() for p in lrn.critic.parameters()]
    alpha = lrn.log_alpha.clone()
    out = lrn._step(update_actor=False)  # step 0 of a cycle with policy_delay=2
    assert set(out) == {"critic_loss", "q_mean"}
    assert all(torch.equal(a, b) for a, b in zip(actor, lrn.actor.parameters()))
    assert torch.equal(alpha, lrn.log_alpha)
    assert not all(torch.equal(a, b) for a, b in zip(critic, lrn.critic.parameters()))
    lrn._step(update_actor=True)
    assert not all(torch.equal(a, b) for a, b in zip(actor, lrn.actor.parameters()))
    assert not torch.equal(alpha, lrn.log_alpha)


def test_target_critic_tracks_online_critic():
    lrn = filled(tau=0.5)
    lrn.update()
    for t, o in zip(lrn.critic_target.parameters(), lrn.critic.parameters()):
        assert not t.requires_grad
    diff_before = sum((t - o).abs().sum() for t, o in zip(lrn.critic_target.parameters(), lrn.critic.parameters()))
    assert diff_before > 0
    lrn2 = filled(tau=1.0)
    lrn2.update()
    for t, o in zip(lrn2.critic_target.parameters(), lrn2.critic.parameters()):
        assert torch.equal(t, o)


def test_checkpoint_layout_is_unchanged():
    """Checkpoints written by earlier versions must keep loading: the entries stay the same."""
    sd = filled().state_dict()
    assert set(sd) == {"actor", "critic", "critic_target", "obs_norm", "critic_obs_norm", "log_alpha",
                       "actor_opt", "critic_opt", "alpha_opt", "num_updates"}
    assert all(g["lr"] == TINY.lr for name in ("actor_opt", "critic_opt", "alpha_opt")
               for g in sd[name]["param_groups"])


def test_state_dict_round_trip():
    lrn = filled()
    for _ in range(3):
        lrn.update()
    buf = io.BytesIO()
    torch.save(lrn.state_dict(), buf)
    buf.seek(0)
    other = learner(seed=123)
    obs = torch.randn(32, OBS)
    assert not torch.equal(other.act(obs, deterministic=True), lrn.act(obs, deterministic=True))
    other.load_state_dict(torch.load(buf, weights_only=False))
    lrn.publish_policy()
    assert torch.equal(other.act(obs, deterministic=True), lrn.act(obs, deterministic=True))
    assert other.num_updates == lrn.num_updates == 3 * TINY.updates_per_step
    assert torch.equal(other.log_alpha, lrn.log_alpha)
    for a, b in zip(other.critic_target.parameters(), lrn.critic_target.parameters()):
        assert torch.equal(a, b)
    moments = [next(iter(x.critic_opt.state.values()))["exp_avg"] for x in (other, lrn)]
    assert torch.equal(*moments)
    # The restored learner keeps training (its replay is empty: the replay is not part of the checkpoint).
    assert other.replay.size == 0
    other.add(bandit_batch(other, torch.Generator().manual_seed(5)))
    assert torch.isfinite(other.update()["critic_loss"])


def test_checkpoint_from_before_the_width_padding_still_loads():
    """Checkpoints of earlier versions hold the unpadded widths (critic input 13, 51 atoms, actor
    output 6 here); loading one gives the same policy, critic and optimiser moments."""
    lrn = filled(num_atoms=51)
    for _ in range(2):
        lrn.update()
    lrn.publish_policy()
    sd = lrn.state_dict()
    head = f"net.{len(lrn.actor.net) - 1}"
    unpad = {  # parameter name -> the slice of it an unpadded network had
        ("actor", f"{head}.weight"): (slice(0, 6),), ("actor", f"{head}.bias"): (slice(0, 6),),
        ("critic", "net.weights.0"): (slice(None), slice(0, 13)),
        ("critic", "net.weights.3"): (slice(None), slice(None), slice(0, 51)),
        ("critic", "net.biases.3"): (slice(None), slice(None), slice(0, 51)),
    }
    old = {**sd, "actor": dict(sd["actor"]), "critic": dict(sd["critic"]), "critic_target": dict(sd["critic_target"])}
    for (net, key), idx in unpad.items():
        for name in (net, "critic_target") if net == "critic" else (net,):
            old[name][key] = sd[name][key][idx].clone()
    for opt, module in (("actor_opt", lrn.actor), ("critic_opt", lrn.critic)):
        names = [n for n, _ in module.named_parameters()]
        net = opt.removesuffix("_opt")
        state = {i: {k: (v[unpad[(net, names[i])]].clone() if (net, names[i]) in unpad and k.startswith("exp_avg") else v)
                     for k, v in per.items()} for i, per in sd[opt]["state"].items()}
        old[opt] = {**sd[opt], "state": state}
    assert old["critic"]["net.weights.0"].shape[1] == 13 and old["actor"][f"{head}.bias"].shape == (6,)

    other = learner(seed=7, num_atoms=51)
    other.load_state_dict(old)
    obs = torch.randn(16, OBS)
    assert torch.equal(other.act(obs, deterministic=True), lrn.act(obs, deterministic=True))
    c_obs, act = torch.randn(16, CRITIC_OBS), torch.rand(16, ACT)
    assert torch.equal(other.critic(c_obs, act), lrn.critic(c_obs, act))
    for a, b in zip(other.critic_opt.state.values(), lrn.critic_opt.state.values()):
        assert torch.equal(a["exp_avg_sq"], b["exp_avg_sq"])
    other.add(bandit_batch(other, torch.Generator().manual_seed(5)))
    assert torch.isfinite(other.update()["critic_loss"])


def test_export_onnx(tmp_path, capfd):
    lrn = filled()
    lrn.update()
    lrn.publish_policy()
    path = tmp_path / "actor.onnx"
    if importlib.util.find_spec("onnx") is None or importlib.util.find_spec("onnxscript") is None:
        with pytest.raises(RuntimeError, match="onnx"):
            lrn.export_onnx(str(path))
        return
    lrn.export_onnx(str(path))
    assert path.stat().st_size > 0
    said = capfd.readouterr()
    assert "[torch.onnx]" not in said.out + said.err  # torch's exporter narrates no stage of its own
    if importlib.util.find_spec("onnxruntime") is None:
        return
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    obs = torch.randn(7, OBS) * 3
    (onnx_action,) = session.run(None, {"obs": obs.numpy()})
    torch.testing.assert_close(torch.from_numpy(onnx_action), lrn.act(obs, deterministic=True), atol=1e-5, rtol=1e-4)


def test_export_onnx_names_missing_package(tmp_path, monkeypatch):
    import unilab.algos.base as module  # the export shared by the learners

    real = importlib.util.find_spec
    monkeypatch.setattr(module.importlib.util, "find_spec", lambda name: None if name == "onnxscript" else real(name))
    with pytest.raises(RuntimeError, match="onnxscript"):
        learner().export_onnx(str(tmp_path / "x.onnx"))


# ---------------------------------------------------------------- CUDA (skipped on CPU-only machines)

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@cuda
def test_cuda_graph_update_learns_without_host_sync():
    lrn = learner("cuda", cuda_graph=True, bf16=True)
    gen = torch.Generator("cuda").manual_seed(1)
    target = TARGET_ACTION.cuda()
    lrn.add(bandit_batch(lrn, gen, target))
    lrn.update()  # warm-up cycles + capture + first replay
    assert lrn._graph is not None
    acting_stream = torch.cuda.Stream(priority=-1)
    torch.cuda.set_sync_debug_mode("error")  # any implicit host sync below raises
    try:
        for _ in range(150):
            with torch.cuda.stream(acting_stream):
                batch = bandit_batch(lrn, gen, target)
            torch.cuda.current_stream().wait_stream(acting_stream)
            for value in batch.values():  # allocated on the acting stream, read on this one
                value.record_stream(torch.cuda.current_stream())
            lrn.add(batch)
            metrics = lrn.update()
            lrn.publish_policy()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert all(torch.isfinite(v) for v in metrics.values())
    greedy = lrn.act(torch.randn(256, OBS, device="cuda"), deterministic=True)
    assert (greedy - target).abs().max() < 0.15, greedy.mean(0)


@cuda
def test_cuda_graph_of_compiled_passes_learns():
    lrn = learner("cuda", cuda_graph=True, bf16=True, compile=True)
    gen = torch.Generator("cuda").manual_seed(1)
    target = TARGET_ACTION.cuda()
    for _ in range(150):
        lrn.add(bandit_batch(lrn, gen, target))
        metrics = lrn.update()
        lrn.publish_policy()
    assert lrn._graph is not None and all(torch.isfinite(v) for v in metrics.values())
    greedy = lrn.act(torch.randn(256, OBS, device="cuda"), deterministic=True)
    assert (greedy - target).abs().max() < 0.15, greedy.mean(0)


@cuda
def test_cuda_graph_sees_replay_growth_and_reload():
    lrn = learner("cuda", cuda_graph=True, replay_capacity=1024)
    gen = torch.Generator("cuda").manual_seed(1)
    target = TARGET_ACTION.cuda()
    lrn.add(bandit_batch(lrn, gen, target))
    lrn.update()
    for _ in range(20):  # wraps the ring several times under the captured graph
        lrn.add(bandit_batch(lrn, gen, target))
        lrn.update()
    assert int(lrn.replay.size_tensor) == 1024
    lrn.load_state_dict(lrn.state_dict())  # drops the graph; the next update re-captures it
    assert lrn._graph is None
    assert torch.isfinite(lrn.update()["critic_loss"])
    assert lrn._graph is not None


@cuda
def test_cuda_eager_path_without_graph():
    lrn = filled("cuda", cuda_graph=False, bf16=True)
    assert all(torch.isfinite(v) for v in lrn.update().values())
    assert lrn._graph is None


@pytest.mark.parametrize("algo", ["fastsac", "flashsac"])
def test_one_backward_gives_each_optimiser_its_own_losss_gradient(algo):
    """The actor and temperature losses share one backward pass: the actor's gradient must be the actor
    loss's alone, and log_alpha's the temperature loss's alone."""
    if algo == "fastsac":
        lrn = filled()
    else:
        from unilab.algos.flashsac.config import FlashSACConfig

        cfg = FlashSACConfig(batch_size=32, replay_capacity=256, actor_hidden_dim=16, critic_hidden_dim=16,
                             actor_num_blocks=1, critic_num_blocks=1, num_envs=N)
        lrn = make_learner(cfg, OBS, CRITIC_OBS, ACT, torch.device("cpu"), seed=0)
        gen = torch.Generator().manual_seed(0)
        lrn.add({"obs": torch.randn(N, OBS, generator=gen), "critic_obs": torch.randn(N, CRITIC_OBS, generator=gen),
                 "action": torch.rand(N, ACT, generator=gen) * 2 - 1, "reward": torch.randn(N, generator=gen),
                 "next_obs": torch.randn(N, OBS, generator=gen),
                 "next_critic_obs": torch.randn(N, CRITIC_OBS, generator=gen), "terminated": torch.zeros(N)})
    idx = lrn.replay.sample_indices(32)
    alpha = lrn.log_alpha.detach().exp()

    def grads(which: str):
        torch.manual_seed(0)
        lrn.critic.requires_grad_(False)
        actor_loss, alpha_loss, *_ = lrn._actor_loss(lrn.replay.storage, idx, alpha)
        lrn.critic.requires_grad_(True)
        params = [*lrn.actor.parameters(), lrn.log_alpha]
        for p in params:
            p.grad = None
        {"both": actor_loss + alpha_loss, "actor": actor_loss, "alpha": alpha_loss}[which].backward()
        return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in params]

    both, actor_only, alpha_only = grads("both"), grads("actor"), grads("alpha")
    assert torch.count_nonzero(actor_only[-1]) == 0  # the actor loss reads alpha detached
    assert all(torch.count_nonzero(g) == 0 for g in alpha_only[:-1])  # the temperature reads no actor weight
    for got, want in zip(both, [*actor_only[:-1], alpha_only[-1]]):
        torch.testing.assert_close(got, want)
    assert torch.count_nonzero(both[-1]) == 1 and any(torch.count_nonzero(g) for g in both[:-1])

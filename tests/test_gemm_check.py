"""The half-precision GEMM self-check run by a process under an MPS thread share (CPU, with fakes
for the broken products seen on the H200)."""

from __future__ import annotations

import pytest
import torch

from unilab.mps.gemm_check import (
    MAX_RELATIVE_ERROR,
    HalfPrecisionGemmError,
    check_half_gemm,
    check_under_thread_share,
    half_gemm_errors,
    weight_products,
)

SMALL = (((2, 64, 96), (2, 96, 48)), ((64, 96), (96, 48)))
CPU = torch.device("cpu")


def test_correct_products_pass():
    errors = half_gemm_errors(CPU, shapes=SMALL)
    assert len(errors) == 4 and all(0 < e < MAX_RELATIVE_ERROR for e in errors.values()), errors
    check_half_gemm(CPU, "learner", "75", shapes=SMALL)


def _broken(kind):
    def matmul(a, b):
        out = torch.matmul(a, b)
        if a.dtype in (torch.bfloat16, torch.float16) and a.dim() == 3:
            return torch.full_like(out, float("nan")) if kind == "nan" else out * 1.5
        return out
    return matmul


@pytest.mark.parametrize("kind", ["nan", "wrong"])
def test_wrong_products_fail_closed_naming_the_share(kind):
    with pytest.raises(HalfPrecisionGemmError) as err:
        check_half_gemm(CPU, "learner", "75", shapes=SMALL, matmul=_broken(kind))
    msg = str(err.value)
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=75 for the learner" in msg
    assert "bfloat16 (2, 64, 96)@(2, 96, 48)" in msg
    assert "unset training.mps.mps_active_thread_percentage.learner" in msg


def test_only_cuda_processes_with_a_share_are_checked(monkeypatch):
    import unilab.mps.gemm_check as gc

    calls = []
    monkeypatch.setattr(gc, "check_half_gemm",
                        lambda device, role, share, shapes: calls.append((device.type, role, share)))
    monkeypatch.delenv(gc.SHARE_VAR, raising=False)
    check_under_thread_share(torch.device("cuda", 0), "learner")
    monkeypatch.setenv(gc.SHARE_VAR, "75")
    check_under_thread_share(CPU, "collector")
    assert calls == []
    check_under_thread_share(torch.device("cuda", 0), "collector")
    assert calls == [("cuda", "collector", "75")]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_products_pass_without_a_share():
    check_half_gemm(torch.device("cuda", 0), "learner", "unset")


def test_weight_products_cover_forward_input_gradient_and_weight_gradient():
    net = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 1))
    ensemble = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(2, 6, 5)), torch.nn.Parameter(torch.zeros(2, 1, 5))])
    shapes = weight_products([net, ensemble], batches=(8, 8))
    # nn.Linear(6, 4) stores (4, 6): x (8, 6) @ W^T, the input gradient (8, 4) @ W, the weight gradient.
    # Linear(4, 1), the LayerNorm's vectors and the (2, 1, 5) per-member bias make no matrix product.
    assert shapes == sorted([
        ((8, 4), (4, 6)), ((8, 6), (6, 4)), ((4, 8), (8, 6)),
        ((2, 8, 6), (2, 6, 5)), ((2, 8, 5), (2, 5, 6)), ((2, 6, 8), (2, 8, 5)),
    ])


def test_a_learner_shape_outside_the_fixed_ones_fails_closed():
    """The learner's own products are checked: a product broken only for its input width is caught."""
    from unilab.algos.base import make_learner
    from unilab.algos.fastsac.config import FastSACConfig

    cfg = FastSACConfig(batch_size=16, replay_capacity=64, critic_hidden_dim=32, actor_hidden_dim=32, num_atoms=11,
                        bf16=False, cuda_graph=False)
    lrn = make_learner(cfg, 21, 9, 3, CPU, seed=0)
    assert lrn.actor.net[0].in_features == 24  # the actor's input width, 21 padded to a multiple of 8
    shapes = weight_products((lrn.actor, lrn.critic), (16, 32))
    check_half_gemm(CPU, "learner", "30", shapes=shapes)  # correct arithmetic passes

    def broken_for_obs_width(a, b):
        out = torch.matmul(a, b)
        return out * 1.5 if a.dtype == torch.bfloat16 and a.shape[-1] == 24 else out

    with pytest.raises(HalfPrecisionGemmError, match=r"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30 .* \(16, 24\)@\(24, 32\)"):
        check_half_gemm(CPU, "learner", "30", shapes=shapes, matmul=broken_for_obs_width)
    check_half_gemm(CPU, "learner", "30", matmul=broken_for_obs_width, shapes=SMALL)  # the fixed shapes miss it


def _rows_seen(modules) -> tuple[set[int], list]:
    """The row counts of the inputs to every layer of `modules` whose weight makes a matrix product (what
    weight_products takes), recorded by forward pre-hooks."""
    rows: set[int] = set()

    def record(_module, args):
        rows.add(args[0].shape[-2])

    hooks = [m.register_forward_pre_hook(record) for module in modules for m in module.modules()
             if any(w.dim() in (2, 3) and min(w.shape[-2:]) > 1 for w in m.parameters(recurse=False))]
    return rows, hooks


@pytest.mark.parametrize("algo", ["fastsac", "flashsac", "warpsac"])
def test_the_learner_names_the_batches_its_products_see(algo):
    """gemm_batches, what the learner role's self-check tries, covers the rows of every weight product of an
    update and of acting: FlashSAC's (and WarpSAC's) critics see the batch and its successors stacked."""
    from unilab.algos.base import make_learner
    from unilab.algos.fastsac.config import FastSACConfig
    from unilab.algos.flashsac.config import FlashSACConfig
    from unilab.algos.warpsac.config import WarpSACConfig

    envs, batch = 12, 16
    config = {"fastsac": FastSACConfig, "flashsac": FlashSACConfig, "warpsac": WarpSACConfig}[algo]
    cfg = config(batch_size=batch, updates_per_step=2, replay_capacity=64, learning_starts=1, critic_hidden_dim=16,
                 actor_hidden_dim=16, num_atoms=11, bf16=False, cuda_graph=False, compile=False)
    lrn = make_learner(cfg, 5, 7, 3, CPU, seed=0, num_envs=envs)
    rows = {"obs": (5,), "critic_obs": (7,), "action": (3,), "reward": (), "next_obs": (5,), "next_critic_obs": (7,),
            "terminated": ()}
    lrn.add({k: torch.rand(2 * envs, *shape) for k, shape in rows.items()})
    seen, hooks = _rows_seen([lrn.actor, lrn.critic, lrn.acting])
    lrn.update()
    lrn.publish_policy()
    lrn.act(torch.rand(envs, 5))
    for hook in hooks:
        hook.remove()
    assert 2 * batch in seen or algo == "fastsac"  # the stacked critic input was seen, so it is checked
    assert seen <= set(lrn.gemm_batches(envs)), (sorted(seen), lrn.gemm_batches(envs))

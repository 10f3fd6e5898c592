"""Data-parallel learners: 2 CPU ranks over gloo, each with its own seed and its own data, stay in sync."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from unilab.algos.base import make_learner
from unilab.algos.distributed import GradAllReduce, broadcast_, dp_active
from unilab.algos.fastsac.config import FastSACConfig
from unilab.algos.flashsac.config import FlashSACConfig
from unilab.algos.warpsac.config import WarpSACConfig

pytestmark = [pytest.mark.integration,  # each test spawns two rank processes that train together
              pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")]

WORLD = 2
OBS, CRITIC_OBS, ACT, N = 6, 7, 3, 32
CYCLES = 4
COLLECTIVE_TIMEOUT_S = 30  # a rank waiting on a collective that never comes fails instead of hanging
TEST_TIMEOUT_S = 90

CONFIGS = {
    "fastsac": FastSACConfig(
        batch_size=32, updates_per_step=2, policy_delay=1, replay_capacity=1024, learning_starts=1,
        critic_hidden_dim=16, actor_hidden_dim=16, num_atoms=11, lr=3e-3,
        bf16=False, cuda_graph=False,
    ),
    "flashsac": FlashSACConfig(
        batch_size=32, updates_per_step=2, policy_delay=2, replay_capacity=1024, learning_starts=1,
        actor_hidden_dim=16, critic_hidden_dim=16, actor_num_blocks=1, critic_num_blocks=1, num_atoms=11,
        num_envs=N, lr=3e-3, lr_init=3e-3, noise_repeat_max=4,
    ),
}  # fmt: skip
# WarpSAC: the actor's collective before the critic's in a step, replay rows drawn by age on each rank.
CONFIGS["warpsac"] = WarpSACConfig(**{k: v for k, v in vars(CONFIGS["flashsac"]).items() if k != "name"})


# ---------------------------------------------------------------- harness


def _entry(rank: int, store: str, out: str, fn, *args) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD,
        timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S),
    )  # fmt: skip
    try:
        torch.save(fn(rank, *args), Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def run_ranks(tmp_path: Path, fn, *args) -> list:
    """Run fn(rank, *args) on WORLD gloo ranks; returns each rank's result. Bounded: a hung run is killed."""
    ctx = mp.spawn(_entry, args=(str(tmp_path / "store"), str(tmp_path), fn, *args), nprocs=WORLD, join=False)
    deadline = time.monotonic() + TEST_TIMEOUT_S
    while not ctx.join(timeout=1.0):  # raises if a rank failed
        if time.monotonic() > deadline:
            for proc in ctx.processes:
                proc.kill()
                proc.join(5)
            pytest.fail(f"distributed run did not finish within {TEST_TIMEOUT_S} s")
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]


# ---------------------------------------------------------------- helpers


def _helpers(rank: int) -> dict:
    assert dp_active()
    # broadcast_: modules (parameters and buffers) and plain tensors, float32 and int64 alike.
    module = torch.nn.BatchNorm1d(3)
    with torch.no_grad():
        module.weight.fill_(rank + 1.0)
    module.running_mean.fill_(rank + 2.0)
    counter = torch.tensor([rank * 10], dtype=torch.int64)
    broadcast_(module, counter)

    # GradAllReduce: two dtypes, a parameter without a gradient, one not requiring one.
    a = torch.nn.Parameter(torch.zeros(2, 3))
    b = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))
    unused = torch.nn.Parameter(torch.zeros(5))
    frozen = torch.nn.Parameter(torch.zeros(1), requires_grad=False)
    sync = GradAllReduce([a, b, unused, frozen])
    results = []
    for step in range(2):  # reused buffers: the second call must not see the first one's values
        a.grad = torch.full((2, 3), float(rank + step))
        b.grad = torch.arange(4, dtype=torch.float64) * (rank + 1)
        sync()
        results.append((a.grad.clone(), b.grad.clone()))
    return {
        "weight": module.weight.detach(),
        "running_mean": module.running_mean,
        "counter": counter,
        "results": results,
        "unused_grad": unused.grad,
    }


def _flat(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()])


def _snapshot(lrn) -> dict[str, torch.Tensor]:
    return {
        "actor": _flat(lrn.actor),
        "critic": _flat(lrn.critic),
        "critic_target": _flat(lrn.critic_target),
        "log_alpha": lrn.log_alpha.detach().clone(),
        # Adam moves a scalar by about lr per step whatever the gradient's size, so log_alpha itself barely
        # tells synced from unsynced ranks in a few steps; its last (averaged or not) gradient does.
        "log_alpha_grad": torch.zeros(()) if lrn.log_alpha.grad is None else lrn.log_alpha.grad.clone(),
    }


def _train(rank: int, algo: str) -> dict:
    """Per rank: a different seed and different transitions. 'dp' trains as built (weights broadcast,
    gradients averaged); 'control' is built the same way but its gradient all-reduce is switched off."""
    out = {}
    for mode in ("dp", "control"):
        lrn = make_learner(CONFIGS[algo], OBS, CRITIC_OBS, ACT, torch.device("cpu"), seed=100 + rank)
        out[f"{mode}_init"] = _snapshot(lrn)
        if mode == "control":
            lrn._critic_grad_sync = lrn._actor_grad_sync = None
        gen = torch.Generator().manual_seed(1000 + rank)
        updates = 0
        for _ in range(CYCLES):
            lrn.add({
                "obs": torch.randn(N, OBS, generator=gen),
                "critic_obs": torch.randn(N, CRITIC_OBS, generator=gen),
                "action": torch.rand(N, ACT, generator=gen) * 2 - 1,
                "reward": torch.randn(N, generator=gen) + rank,
                "next_obs": torch.randn(N, OBS, generator=gen),
                "next_critic_obs": torch.randn(N, CRITIC_OBS, generator=gen),
                "terminated": (torch.rand(N, generator=gen) < 0.1).float(),
            })  # fmt: skip
            if lrn.ready():  # host-side ints, the same on every rank
                lrn.update()
                updates += 1
        out[mode] = _snapshot(lrn)
        out[f"{mode}_updates"] = updates
    return out


# ---------------------------------------------------------------- tests


def test_single_process_is_not_data_parallel():
    assert not dp_active()
    with pytest.raises(RuntimeError, match="process group"):
        GradAllReduce([torch.nn.Parameter(torch.zeros(1))])


def test_broadcast_and_grad_allreduce(tmp_path):
    r0, r1 = run_ranks(tmp_path, _helpers)
    for r in (r0, r1):  # rank 0's values everywhere
        assert torch.equal(r["weight"], torch.ones(3))
        assert torch.equal(r["running_mean"], torch.full((3,), 2.0))
        assert torch.equal(r["counter"], torch.tensor([0]))
        for step, (a_grad, b_grad) in enumerate(r["results"]):
            assert torch.equal(a_grad, torch.full((2, 3), 0.5 + step))  # mean of rank + step over ranks 0, 1
            assert torch.equal(b_grad, torch.arange(4, dtype=torch.float64) * 1.5)
        assert r["unused_grad"] is None


@pytest.mark.parametrize("algo", ["fastsac", "flashsac", "warpsac"])
def test_learners_stay_in_sync(tmp_path, algo):
    r0, r1 = run_ranks(tmp_path, _train, algo)
    assert r0["dp_updates"] == r1["dp_updates"] == CYCLES
    for key in ("actor", "critic", "critic_target", "log_alpha", "log_alpha_grad"):
        # Different seeds, yet the same initial weights: rank 0's, broadcast at construction.
        assert torch.equal(r0["dp_init"][key], r1["dp_init"][key]), key
        # Different data on each rank, yet identical weights after training ...
        assert torch.equal(r0["dp"][key], r1["dp"][key]), key
        assert not torch.equal(r0["dp"][key], r0["dp_init"][key]), f"{key} was not trained"
        # ... and only thanks to the gradient all-reduce: without it the ranks drift apart.
        assert torch.equal(r0["control_init"][key], r1["control_init"][key]), key
        if key != "log_alpha":  # see _snapshot
            assert not torch.allclose(r0["control"][key], r1["control"][key], atol=1e-6), key

"""Each role measured alone on the GPU: the learner's update cycle, and the collector's tick.

    python benchmarks/roles_alone.py --algo fastsac --task g1_walk_flat --envs 2048
    python benchmarks/roles_alone.py --algo flashsac --task g1_motion_tracking --envs 2048

learner: `updates_per_step` gradient steps (one update cycle, captured as a CUDA graph when the
algo config says so) on a replay filled with random transitions.
collector: one env step + actor inference + the replay-slot write, in one process.
Overrides: --set algo.batch_size=4096 (dotted keys into the algo/task configs).
"""

from __future__ import annotations

import argparse
import json
import time


def _cfg(group: str, name: str, overrides: dict):
    from omegaconf import OmegaConf

    from unilab.config.store import GROUP_SCHEMAS, _load

    schema = _load(next(t for g, n, t in GROUP_SCHEMAS if g == group and n == f"{name}_schema"))
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), overrides))


def _timed(fn, iters: int, warmup: int = 5) -> float:
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters * 1e3


def _profile_cycle(algo, env, device, trained, path: str) -> None:
    """Kernel table of a few eager update cycles (same sizes, same config, no graph)."""
    import dataclasses

    import torch
    from torch.profiler import ProfilerActivity, profile

    from unilab.algos.base import make_learner

    eager_cfg = dataclasses.replace(algo, cuda_graph=False)
    learner = make_learner(eager_cfg, env.obs_dim, env.critic_obs_dim, env.action_dim, device, seed=0)
    learner.replay = trained.replay  # already full
    learner.update()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            learner.update()
        torch.cuda.synchronize()
    with open(path, "w") as f:
        f.write(prof.key_averages().table(sort_by="cuda_time_total", row_limit=40))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algo", default="fastsac")
    ap.add_argument("--task", default="g1_walk_flat")
    ap.add_argument("--envs", type=int, default=2048)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--set", nargs="*", default=[], help="algo.key=value, task.key=value or sim.key=value")
    ap.add_argument("--json", default=None)
    ap.add_argument("--profile", default=None, help="also write the learner cycle's top GPU kernels here "
                    "(profiled without the CUDA graph, so every kernel is visible)")
    args = ap.parse_args()
    import torch

    from unilab.algos.base import make_learner
    from unilab.sim.config import MjWarpSimConfig
    from unilab.tasks import make_env

    over = {"algo": {}, "task": {"num_envs": args.envs}, "sim": {}}
    for item in args.set:
        key, value = item.split("=", 1)
        group, _, field = key.partition(".")
        over[group][field] = json.loads(value) if value[:1] in "0123456789-[{tfn" else value
    algo = _cfg("algo", args.algo, over["algo"])
    task = _cfg("task", args.task, over["task"])
    device = torch.device("cuda:0")
    env = make_env(task, MjWarpSimConfig(**over["sim"]), str(device), seed=0)
    learner = make_learner(algo, env.obs_dim, env.critic_obs_dim, env.action_dim, device, seed=0)

    n = env.num_envs
    while not learner.ready():
        learner.add({
            "obs": torch.randn(n, env.obs_dim, device=device),
            "critic_obs": torch.randn(n, env.critic_obs_dim, device=device),
            "action": torch.rand(n, env.action_dim, device=device) * 2 - 1,
            "reward": torch.randn(n, device=device),
            "next_obs": torch.randn(n, env.obs_dim, device=device),
            "next_critic_obs": torch.randn(n, env.critic_obs_dim, device=device),
            "terminated": torch.zeros(n, device=device),
        })
    learner.update()  # captures the graph (if enabled)
    learner.publish_policy()
    update_ms = _timed(learner.update, args.iters)

    obs = env.reset()
    slot = {k: torch.zeros(n, d, device=device) for k, d in
            (("obs", env.obs_dim), ("critic_obs", env.critic_obs_dim), ("action", env.action_dim))}

    def tick():
        nonlocal obs
        action = learner.act(obs)
        slot["obs"].copy_(obs)
        slot["action"].copy_(action)
        obs, critic, *_ = env.step(action)
        slot["critic_obs"].copy_(critic)

    tick_ms = _timed(tick, args.iters * 4)
    if args.profile:
        _profile_cycle(algo, env, device, learner, args.profile)
    result = {"algo": args.algo, "task": args.task, "num_envs": n, "batch_size": algo.batch_size,
              "updates_per_step": algo.updates_per_step, "cuda_graph": getattr(algo, "cuda_graph", None),
              "learner_update_cycle_ms": update_ms, "collector_tick_ms": tick_ms,
              "collector_steps_per_s_alone": n / tick_ms * 1e3, "gpu": torch.cuda.get_device_name(),
              "date": time.strftime("%Y-%m-%d")}
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()

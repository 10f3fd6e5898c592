"""Env steps/s of the MJWarp G1 tasks: physics only vs the full env step (GPU benchmark).

    python benchmarks/env_throughput.py --tasks g1_walk_flat g1_motion_tracking --envs 1024 4096 8192

Physics only = the backend's decimated step (one captured CUDA graph). Full = `env.step`
(actions -> PD targets, physics, observations, rewards, terminations, masked resets).
Prints a markdown table and writes JSON with --json PATH.
"""

from __future__ import annotations

import argparse
import json
import platform
import time


def _time(fn, iters: int, sync) -> float:
    for _ in range(10):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t0) / iters


def bench(task: str, num_envs: int, device: str, iters: int, task_graph: bool = True) -> dict:
    import torch

    from unilab.registry import instantiate
    from unilab.tasks import make_env

    task_cfg = instantiate("task", {"name": task, "num_envs": num_envs})
    env = make_env(task_cfg, instantiate("sim", {"task_cuda_graph": task_graph}), device, seed=0)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    actions = torch.zeros(num_envs, env.action_dim, device=device)
    env.reset()
    physics_s = _time(env.backend.step, iters, sync)
    full_s = _time(lambda: env.step(actions), iters, sync)
    return {
        "task": task, "num_envs": num_envs, "task_cuda_graph": task_graph,
        "physics_ms": physics_s * 1e3, "full_ms": full_s * 1e3,
        "physics_steps_per_s": num_envs / physics_s, "full_steps_per_s": num_envs / full_s,
        "full_over_physics": physics_s / full_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["g1_walk_flat", "g1_motion_tracking"])
    ap.add_argument("--envs", nargs="+", type=int, default=[1024, 4096, 8192])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-task-graph", action="store_true", help="sim.task_cuda_graph=false (eager task step)")
    args = ap.parse_args()
    import torch

    rows = [bench(t, n, args.device, args.iters, not args.no_task_graph) for t in args.tasks for n in args.envs]
    host = {"gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor(),
            "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__}
    print(f"host: {host}")
    print(f"task step captured as a CUDA graph: {not args.no_task_graph}")
    print("| task | envs | physics ms | physics steps/s | full ms | full steps/s | full/physics |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['task']} | {r['num_envs']} | {r['physics_ms']:.2f} | {r['physics_steps_per_s']:,.0f} | "
              f"{r['full_ms']:.2f} | {r['full_steps_per_s']:,.0f} | {r['full_over_physics']:.0%} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"host": host, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()

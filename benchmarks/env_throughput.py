"""Env steps/s of the MJWarp G1 tasks: physics only vs the full env step (GPU benchmark).

    python benchmarks/env_throughput.py --tasks g1_walk_flat g1_motion_tracking --envs 1024 4096 8192
    python benchmarks/env_throughput.py --tasks g1_motion_tracking --envs 2048 \
        --variant stand:action_offset=stand --variant no_self_collision:self_collisions=false

Each --variant NAME:KEY=VALUE[,KEY=VALUE...] adds rows of the task with those task overrides (dotted
keys, YAML values: `randomization.friction_range=null`, lists in brackets: `randomization.kp_scale=[0.85,1.15]`; keys under `sim.` set the simulation instead:
`sim.iterations=6`) beside the rows of its defaults, to see what a setting costs. Physics only = the
backend's decimated step (one captured CUDA graph). Full = `env.step` (actions -> PD targets, physics,
observations, rewards, terminations, masked resets).
Prints a markdown table and writes JSON with --json PATH.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
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


def parse_variant(text: str) -> tuple[str, dict]:
    """`NAME:KEY=VALUE[,KEY=VALUE...]` -> (NAME, nested overrides); ValueError on a malformed one."""
    from omegaconf import OmegaConf

    name, sep, body = text.partition(":")
    # A comma inside brackets belongs to a list value: `added_mass_kg=[-1.0,3.0]`.
    pairs = [p for p in re.split(r",(?![^\[]*\])", body) if p]
    if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or not pairs or any("=" not in p for p in pairs):
        raise ValueError(f"--variant {text!r}: expected NAME:KEY=VALUE[,KEY=VALUE...]")
    return name, OmegaConf.to_container(OmegaConf.from_dotlist(pairs))


def task_config(task: str, num_envs: int, overrides: dict | None = None):
    """The typed task config (a variant's `sim` keys left out); ValueError or OmegaConf's key error on a
    bad override."""
    from omegaconf import OmegaConf

    from unilab.registry import instantiate

    task_overrides = {k: v for k, v in (overrides or {}).items() if k != "sim"}
    return instantiate("task", OmegaConf.merge({"name": task, "num_envs": num_envs}, task_overrides))


def sim_config(task_graph: bool = True, overrides: dict | None = None):
    """The typed sim config with a variant's `sim` keys; errors as `task_config`."""
    from unilab.registry import instantiate

    return instantiate("sim", {**(overrides or {}).get("sim", {}), "task_cuda_graph": task_graph})


def bench(task: str, num_envs: int, device: str, iters: int, task_graph: bool = True,
          overrides: dict | None = None, variant: str = "defaults") -> dict:
    import torch

    from unilab.tasks import make_env

    task_cfg = task_config(task, num_envs, overrides)
    env = make_env(task_cfg, sim_config(task_graph, overrides), device, seed=0)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    actions = torch.zeros(num_envs, env.action_dim, device=device)
    env.reset()
    physics_s = _time(env.backend.step, iters, sync)
    full_s = _time(lambda: env.step(actions), iters, sync)
    niter_mean, niter_max = solver_iterations(env, actions)
    return {
        "task": task, "variant": variant, "overrides": overrides or {}, "num_envs": num_envs,
        "task_cuda_graph": task_graph,
        "physics_ms": physics_s * 1e3, "full_ms": full_s * 1e3,
        "physics_steps_per_s": num_envs / physics_s, "full_steps_per_s": num_envs / full_s,
        "full_over_physics": physics_s / full_s,
        "solver_iterations_mean": niter_mean, "solver_iterations_max": niter_max,
    }


def solver_iterations(env, actions, steps: int = 50) -> tuple[float, float]:
    """Constraint-solver iterations of the last substep of each of `steps` env steps (after the timing):
    the mean over worlds and the largest world's, averaged over the steps. A captured solver loop runs
    until its slowest world converges, so the largest is what the physics pays for."""
    import warp as wp

    niter = wp.to_torch(env.backend.data.solver_niter)
    total_mean = total_max = 0.0
    for _ in range(steps):
        env.step(actions)
        n = niter.float()
        total_mean += float(n.mean())
        total_max += float(n.max())
    return total_mean / steps, total_max / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["g1_walk_flat", "g1_motion_tracking"])
    ap.add_argument("--envs", nargs="+", type=int, default=[1024, 4096, 8192])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-task-graph", action="store_true", help="sim.task_cuda_graph=false (eager task step)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:KEY=VALUE[,KEY=VALUE...]",
                    help="also time the tasks with these task overrides (repeatable)")
    args = ap.parse_args()
    try:
        variants = [("defaults", {})] + [parse_variant(v) for v in args.variant]
        for t in args.tasks:  # every config is checked before the first env is built
            for v, o in variants:
                task_config(t, args.envs[0], o)
                sim_config(True, o)
    except Exception as e:  # a malformed variant, an unknown key, a value its check rejects
        ap.error(str(e).splitlines()[0])  # exit 2, nothing built
    import torch

    rows = [bench(t, n, args.device, args.iters, not args.no_task_graph, o, v)
            for t in args.tasks for n in args.envs for v, o in variants]
    host = {"gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor(),
            "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__}
    print(f"host: {host}")
    print(f"task step captured as a CUDA graph: {not args.no_task_graph}")
    print("| task | variant | envs | physics ms | physics steps/s | full ms | full steps/s | full/physics "
          "| solver iterations (mean / largest world) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['task']} | {r['variant']} | {r['num_envs']} | {r['physics_ms']:.2f} | {r['physics_steps_per_s']:,.0f} | "
              f"{r['full_ms']:.2f} | {r['full_steps_per_s']:,.0f} | {r['full_over_physics']:.0%} "
              f"| {r['solver_iterations_mean']:.1f} / {r['solver_iterations_max']:.1f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"host": host, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()

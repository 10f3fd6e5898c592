"""Each role measured alone on the GPU: the learner's update cycle, and the collector's tick.

    python benchmarks/roles_alone.py --algo fastsac --task g1_walk_flat --envs 2048
    python benchmarks/roles_alone.py --algo flashsac --task g1_motion_tracking --envs 2048

learner: `updates_per_step` gradient steps (one update cycle, captured as a CUDA graph when the
algo config says so) on a replay filled with random transitions.
collector: one env step + actor inference + the replay-slot write, in one process.
Overrides: --set algo.batch_size=4096 (dotted keys into the algo/task configs).

Side by side: two processes (one --role learner, one --role collector, the same --side-by-side DIR) build
everything, meet at a file barrier in DIR, then run their loop flat out, uncoupled, for --seconds and
write DIR/<role>.json (ms per cycle or tick while sharing the GPU). Run them as MPS clients to measure how
much of each role's solo rate MPS keeps when both want the whole GPU; `--bound DIR` then turns that and
the solo times into the shortest coupled iteration the GPU allows (see `coupled_bound`).
"""

from __future__ import annotations

import argparse
import json
import time


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


def fill_until_ready(learner, n: int) -> None:
    """Add chunks of `n` random transitions until the learner may update."""
    import torch

    device = learner.device
    while not learner.ready():
        learner.add({
            "obs": torch.randn(n, learner.obs_dim, device=device),
            "critic_obs": torch.randn(n, learner.critic_obs_dim, device=device),
            "action": torch.rand(n, learner.action_dim, device=device) * 2 - 1,
            "reward": torch.randn(n, device=device),
            "next_obs": torch.randn(n, learner.obs_dim, device=device),
            "next_critic_obs": torch.randn(n, learner.critic_obs_dim, device=device),
            "terminated": torch.zeros(n, device=device),
        })


def _profile_cycle(algo, dims, device, trained, path: str) -> None:
    """Kernel table of a few update cycles: the same sizes and config, compiled as the graph's cycle
    is, but launched without the graph so that every kernel is visible. `path` gets the table,
    `path`.json every kernel's total GPU time per cycle."""
    import dataclasses

    import torch
    from torch.profiler import ProfilerActivity, profile

    from unilab.algos.base import make_learner

    cycles = 3
    plain_cfg = dataclasses.replace(algo, cuda_graph=False, compile=trained.compiled)
    learner = make_learner(plain_cfg, *dims, device, seed=0)
    learner.replay = trained.replay  # already full
    for _ in range(2):
        learner.update()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(cycles):
            learner.update()
        torch.cuda.synchronize()
    averages = prof.key_averages()
    with open(path, "w") as f:
        f.write(averages.table(sort_by="cuda_time_total", row_limit=60))
    kernels = sorted(
        ({"name": e.key, "ms_per_cycle": e.device_time_total / 1e3 / cycles, "calls_per_cycle": e.count / cycles}
         for e in averages if e.device_time_total > 0),
        key=lambda k: -k["ms_per_cycle"])
    with open(path + ".json", "w") as f:
        json.dump(kernels, f, indent=1)


def _side_by_side(fn, role: str, folder: str, seconds: float, timeout_s: float = 900.0) -> dict:
    """Barrier with the other role's process, then `fn` flat out for `seconds`."""
    import pathlib

    import torch

    here = pathlib.Path(folder)
    (here / f"{role}.ready").touch()
    other = "collector" if role == "learner" else "learner"
    deadline = time.monotonic() + timeout_s
    while not (here / f"{other}.ready").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"side by side: no {other} process reached the barrier in {folder}")
        time.sleep(0.05)
    torch.cuda.synchronize()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        n += 10
    ms = (time.perf_counter() - t0) / n * 1e3
    result = {"role": role, "count": n, "ms_while_sharing": ms}
    (here / f"{role}.json").write_text(json.dumps(result))
    return result


def coupled_bound(learner_ms: float, collector_ms: float, learner_shared_ms: float, collector_shared_ms: float) -> float:
    """Shortest iteration (one learner cycle and one collector tick) the GPU allows, in a linear model.

    Alone each role runs at rate 1 (of its own solo rate); flat out side by side they keep r_l and r_c.
    Any mix of those three operating points, (1, 0), (0, 1) and (r_l, r_c), is reachable by sharing time
    between them. An iteration of T ms needs the rates (L / T, C / T): T is shortest where that ray leaves
    the hull's upper boundary.
    """
    r_l, r_c = learner_ms / learner_shared_ms, collector_ms / collector_shared_ms
    best = 0.0  # largest s with s * (L, C) on a boundary segment; T = 1 / s
    for (x1, y1), (x2, y2) in (((1.0, 0.0), (r_l, r_c)), ((r_l, r_c), (0.0, 1.0))):
        # s * L = x1 + u (x2 - x1), s * C = y1 + u (y2 - y1)  ->  solve for u, then s
        den = collector_ms * (x2 - x1) - learner_ms * (y2 - y1)
        if abs(den) < 1e-12:
            continue
        u = (learner_ms * y1 - collector_ms * x1) / den
        if -1e-9 <= u <= 1 + 1e-9:
            best = max(best, (x1 + u * (x2 - x1)) / learner_ms if learner_ms else 0.0)
    return 1.0 / best if best > 0 else float("inf")


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
    ap.add_argument("--dims", default=None, metavar="OBS,CRITIC_OBS,ACTION", help="learner only: no env "
                    "(no Warp), these observation/action widths (walk flat 98,106,29; tracking 160,286,29)")
    ap.add_argument("--role", choices=("learner", "collector"), help="side by side: which loop this process runs")
    ap.add_argument("--side-by-side", default=None, metavar="DIR", help="barrier and results folder")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--bound", default=None, metavar="DIR", help="print the coupled bound from DIR's results and "
                    "--alone JSON (a solo run's --json file), then exit")
    ap.add_argument("--alone", default=None, metavar="JSON")
    args = ap.parse_args()
    if args.side_by_side and not args.role:
        ap.error("--side-by-side needs --role learner or --role collector")
    if args.bound and not args.alone:
        ap.error("--bound needs --alone (the solo run's --json file)")
    if args.bound:
        _print_bound(args.bound, args.alone)
        return
    import torch

    from unilab.algos.base import make_learner
    from unilab.registry import instantiate

    over = {"algo": {"name": args.algo}, "task": {"name": args.task, "num_envs": args.envs}, "sim": {}}
    for item in args.set:
        key, value = item.split("=", 1)
        group, _, field = key.partition(".")
        over[group][field] = json.loads(value) if value[:1] in "0123456789-[{tfn" else value
    algo, task, sim = (instantiate(group, values) for group, values in over.items())
    device = torch.device("cuda:0")
    env = None
    if args.dims:
        dims = tuple(int(d) for d in args.dims.split(","))
    else:
        from unilab.tasks import make_env

        env = make_env(task, sim, str(device), seed=0)
        dims = (env.obs_dim, env.critic_obs_dim, env.action_dim)
    obs_dim, critic_obs_dim, action_dim = dims
    n = task.num_envs
    learner = make_learner(algo, *dims, device, seed=0, num_envs=n)

    fill_until_ready(learner, n)
    learner.update()  # captures the graph (if enabled)
    learner.publish_policy()
    if args.side_by_side and args.role == "learner":
        print(json.dumps(_side_by_side(learner.update, "learner", args.side_by_side, args.seconds)))
        return
    update_ms = _timed(learner.update, args.iters)
    if args.profile:
        _profile_cycle(algo, dims, device, learner, args.profile)
    result = {"algo": args.algo, "task": args.task, "num_envs": n, "batch_size": algo.batch_size,
              "updates_per_step": algo.updates_per_step, "cuda_graph": getattr(algo, "cuda_graph", None),
              "learner_update_cycle_ms": update_ms, "gpu": torch.cuda.get_device_name(),
              "date": time.strftime("%Y-%m-%d")}
    if env is None:
        _report(result, args.json)
        return

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

    if args.side_by_side:
        print(json.dumps(_side_by_side(tick, "collector", args.side_by_side, args.seconds)))
        return
    tick_ms = _timed(tick, args.iters * 4)
    result.update(collector_tick_ms=tick_ms, collector_steps_per_s_alone=n / tick_ms * 1e3)
    _report(result, args.json)


def _report(result: dict, path: str | None) -> None:
    print(json.dumps(result, indent=2))
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=2)


def _print_bound(folder: str, alone_json: str) -> None:
    import pathlib

    alone = json.loads(pathlib.Path(alone_json).read_text())
    shared = {r: json.loads((pathlib.Path(folder) / f"{r}.json").read_text()) for r in ("learner", "collector")}
    learner_ms, collector_ms = alone["learner_update_cycle_ms"], alone["collector_tick_ms"]
    lp, cp = shared["learner"]["ms_while_sharing"], shared["collector"]["ms_while_sharing"]
    bound = coupled_bound(learner_ms, collector_ms, lp, cp)
    result = {"learner_alone_ms": learner_ms, "collector_alone_ms": collector_ms,
              "learner_while_sharing_ms": lp, "collector_while_sharing_ms": cp,
              "learner_rate_kept": learner_ms / lp, "collector_rate_kept": collector_ms / cp,
              "coupled_bound_ms": bound, "bound_over_max_alone": bound / max(learner_ms, collector_ms)}
    print(json.dumps(result, indent=2))
    (pathlib.Path(folder) / "bound.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

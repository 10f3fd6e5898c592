"""What a lower constraint-solver cap changes in one env step (GPU or CPU benchmark).

    python benchmarks/solver_cap_error.py --task g1_motion_tracking --envs 2048 --caps 8 6 4
    python benchmarks/solver_cap_error.py --device cpu --envs 256 --caps 6

The env runs with zero actions (for the tracking task: PD targets on the clip) at the reference cap
(--reference, 10 by default: the G1 model's). Every --every env steps its state is saved and stepped
once more (one env step of `decimation` physics substeps) at the reference cap and at each of --caps,
from the same saved state. A row compares the joint velocities after that step with the reference
cap's: the mean absolute difference, the largest, and the share of worlds whose largest joint
differs by more than --tol rad/s; beside them the mean joint-velocity change of the step itself, for
scale, and the reference solve's own iterations (its largest world's, last substep). Prints a markdown
table and writes JSON with --json PATH.
"""

from __future__ import annotations

import argparse
import json
import platform
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="g1_motion_tracking")
    ap.add_argument("--envs", type=int, default=2048)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--caps", nargs="+", type=int, default=[8, 6, 4])
    ap.add_argument("--reference", type=int, default=10)
    ap.add_argument("--states", type=int, default=5, help="saved states compared (default 5)")
    ap.add_argument("--every", type=int, default=10, help="env steps between saved states (default 10)")
    ap.add_argument("--tol", type=float, default=1e-3, help="rad/s: a world differs above this (default 1e-3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    try:
        from unilab.registry import instantiate

        task_cfg = instantiate("task", {"name": args.task, "num_envs": args.envs})
        sim_cfg = instantiate("sim", {"iterations": args.reference})
        for name in ("states", "every", "reference"):
            if getattr(args, name) < 1:
                raise ValueError(f"--{name} {getattr(args, name)}: expected an integer >= 1")
        if not args.caps or min(args.caps) < 1:
            raise ValueError(f"--caps {args.caps}: expected integers >= 1")
    except Exception as e:  # an unknown task, a value a check rejects
        ap.error(str(e).splitlines()[0])  # exit 2, nothing built

    import torch
    import warp as wp

    from unilab.tasks import make_env

    env = make_env(task_cfg, sim_cfg, args.device, seed=args.seed)
    backend = env.backend
    niter = wp.to_torch(backend.data.solver_niter)
    joints = slice(backend.qvel.shape[1] - env.action_dim, None)
    actions = torch.zeros(args.envs, env.action_dim, device=args.device)
    sums = {cap: {"mean": 0.0, "max": 0.0, "share": 0.0} for cap in args.caps}
    change = ref_iters = 0.0
    env.reset()
    for _ in range(args.states):
        for _ in range(args.every):
            env.step(actions)
        state = backend.save_state()
        backend.step()
        reference = backend.qvel[:, joints].clone()
        change += float((reference - state["qvel"][:, joints]).abs().mean())
        ref_iters += float(niter.max())
        for cap in args.caps:
            backend.set_solver_iterations(cap)
            backend.load_state(state)
            backend.step()
            diff = (backend.qvel[:, joints] - reference).abs()
            sums[cap]["mean"] += float(diff.mean())
            sums[cap]["max"] = max(sums[cap]["max"], float(diff.max()))
            sums[cap]["share"] += float((diff.amax(dim=1) > args.tol).float().mean())
        backend.set_solver_iterations(args.reference)
        backend.load_state(state)
    n = args.states
    rows = [{"cap": cap, "mean_abs_diff": s["mean"] / n, "max_abs_diff": s["max"], "share_above_tol": s["share"] / n}
            for cap, s in sums.items()]
    out = {"task": args.task, "num_envs": args.envs, "reference": args.reference, "states": n, "every": args.every,
           "tol": args.tol, "mean_abs_change": change / n, "reference_iterations_max": ref_iters / n, "rows": rows,
           "host": {"device": torch.cuda.get_device_name() if args.device.startswith("cuda")
                    else platform.processor() or platform.machine(),
                    "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__}}
    print(f"host: {out['host']}")
    print(f"{args.task}, {args.envs} envs, {n} states {args.every} env steps apart; reference cap {args.reference} "
          f"(its largest world: {out['reference_iterations_max']:.1f} iterations); mean joint-velocity change of "
          f"one step {out['mean_abs_change']:.3g} rad/s")
    print(f"| cap | mean abs difference (rad/s) | largest (rad/s) | worlds above {args.tol:g} rad/s |")
    print("|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['cap']} | {r['mean_abs_diff']:.2e} | {r['max_abs_diff']:.2e} | {r['share_above_tol']:.1%} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()

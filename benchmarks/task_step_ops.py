"""Tensor operations of one env step outside the physics, per task method (a CPU count; no GPU needed).

    python benchmarks/task_step_ops.py --task g1_motion_tracking --envs 64

On CUDA the task part of a step (everything after the physics) is one captured graph of small
kernels, so its time follows the number of kernels more than their size. This counts the torch
operations that launch one (views such as slicing and reshapes are left out) during one step after
a few warm-up steps, attributed to the innermost task method running, and prints the total and the
methods that run the most. MJWarp's own launches (forward kinematics) are not torch operations and
are not counted. `--json PATH` writes the counts.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys

# Aten operations that only make a view (no kernel on CUDA).
VIEW_OPS = {"alias", "as_strided", "detach", "expand", "lift_fresh", "narrow", "permute", "select", "slice",
            "split", "split_with_sizes", "squeeze", "t", "transpose", "unbind", "unsqueeze", "view",
            "_reshape_alias", "_unsafe_view"}


def count_step_ops(task: str, num_envs: int, warmup: int = 3) -> dict[str, int]:
    """{task method (or "step" for the base's own work): kernel-launching torch ops} of one env step."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from unilab.registry import instantiate
    from unilab.tasks import make_env

    env = make_env(instantiate("task", {"name": task, "num_envs": num_envs}), instantiate("sim", {}), "cpu", seed=0)
    running: list[str] = []
    counts: collections.Counter = collections.Counter()

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.__name__.split(".")[0] not in VIEW_OPS:
                counts[running[-1] if running else "step"] += 1
            return func(*args, **(kwargs or {}))

    skip = {"step", "reset", "critic_obs", "timing"}
    for name in dir(type(env)):
        member = getattr(type(env), name, None)
        if name.startswith("__") or name in skip or not callable(member) or isinstance(member, (type, property)):
            continue

        def wrapped(*a, _f=getattr(env, name), _n=name, **k):
            running.append(_n)
            try:
                return _f(*a, **k)
            finally:
                running.pop()

        setattr(env, name, wrapped)
    actions = torch.zeros(num_envs, env.action_dim)
    for _ in range(warmup):
        env.step(actions)
    with Count():
        env.step(actions)
    return dict(counts)


def main() -> None:
    from unilab.registry import entry

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="g1_motion_tracking")
    ap.add_argument("--envs", type=int, default=64)
    ap.add_argument("--top", type=int, default=12, help="methods listed (default 12)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    try:
        entry("task", args.task)
    except ValueError as e:
        ap.error(str(e))  # exit 2, nothing built
    if args.envs < 1:
        ap.error("--envs must be >= 1")
    counts = count_step_ops(args.task, args.envs)
    total = sum(counts.values())
    print(f"{args.task}, {args.envs} envs: {total} kernel-launching torch ops in one env step outside the physics")
    print("| method | ops |\n|---|---:|")
    for name, n in sorted(counts.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"| {name} | {n} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"task": args.task, "num_envs": args.envs, "total": total, "per_method": counts}, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())

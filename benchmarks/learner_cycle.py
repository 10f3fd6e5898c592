"""The learner's update cycle alone on the GPU, and where its time goes, for one or more variants.

    python benchmarks/learner_cycle.py --algo fastsac --dims 98,106,29
    python benchmarks/learner_cycle.py --algo flashsac --dims 160,286,29 --envs 2048
    python benchmarks/learner_cycle.py --algo fastsac --dims 98,106,29 \
        --variant base --variant combo:inductor.combo_kernels=true --json cycle.json

Each variant runs in its own process (a fresh compile, its own settings): the learner is built without
an env (no Warp) from `--dims`, its replay filled with random transitions, the cycle captured as the run
captures it (one CUDA graph), then timed over `--iters` replays. The profiler then records a few graph
replays: kernels per cycle, their summed GPU time, the share of matrix multiplies, optimiser steps and
fused (Triton) kernels, and the busy fraction (summed kernel time over the cycle's wall time: what is
left is the gaps between kernels).

A variant is `NAME[:KEY=VALUE,...]` with KEY one of `algo.FIELD` (the algo config), `inductor.ATTR`
(torch._inductor.config, set before anything compiles) or `env.VAR` (an environment variable of the
variant's process). Variants compile at the same time (each its own process) and are timed one at a time
(a lock file shared by every invocation, `--lock`), so no timing shares the GPU with another's, not even
with that of a second invocation running at the same time.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time

# Kernel name fragments -> category (first match wins).
CATEGORIES = (
    ("gemm", ("gemm", "cutlass", "nvjet", "xmma", "cublas", "sm90_", "sm80_", "ampere_", "hopper")),
    ("optimizer", ("adam", "multi_tensor")),
    ("fused (triton)", ("triton",)),
)


def category(name: str) -> str:
    low = name.lower()
    for label, keys in CATEGORIES:
        if any(k in low for k in keys):
            return label
    return "other"


def parse_variant(text: str) -> tuple[str, dict[str, object]]:
    """`NAME[:KEY=VALUE,...]` -> (name, {key: value}); values are JSON where they parse as JSON."""
    name, _, rest = text.partition(":")
    if not name:
        raise ValueError(f"variant {text!r}: a name comes first")
    settings: dict[str, object] = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or key.split(".", 1)[0] not in ("algo", "inductor", "env") or "." not in key:
            raise ValueError(f"variant {text!r}: {item!r} is not algo.FIELD=V, inductor.ATTR=V or env.VAR=V")
        try:
            settings[key] = json.loads(value)
        except json.JSONDecodeError:
            settings[key] = value
    return name, settings


def summarize_kernels(events: list[tuple[str, float]], cycles: int, cycle_ms: float) -> dict:
    """(kernel name, GPU microseconds) of `cycles` cycles -> per-cycle counts and times by category."""
    by_cat: dict[str, dict[str, float]] = {}
    by_name: dict[str, list[float]] = {}
    for name, us in events:
        c = by_cat.setdefault(category(name), {"kernels": 0.0, "ms": 0.0})
        c["kernels"] += 1 / cycles
        c["ms"] += us / 1e3 / cycles
        by_name.setdefault(name, []).append(us)
    kernel_ms = sum(c["ms"] for c in by_cat.values())
    top = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:25]
    return {
        "kernels_per_cycle": len(events) / cycles,
        "kernel_ms_per_cycle": kernel_ms,
        "busy_fraction": kernel_ms / cycle_ms if cycle_ms else None,
        "by_category": {k: {"kernels": round(v["kernels"], 1), "ms": round(v["ms"], 4)} for k, v in by_cat.items()},
        "top_kernels": [{"name": n[:140], "category": category(n), "calls_per_cycle": len(t) / cycles,
                         "ms_per_cycle": sum(t) / 1e3 / cycles, "mean_us": sum(t) / len(t)} for n, t in top],
    }


def _measure(args, settings: dict[str, object]) -> dict:
    """In the variant's own process: build, fill, capture, time, profile."""
    import torch

    if any(k.startswith("inductor.") for k in settings):
        import torch._inductor.config as inductor_config

        for key, value in settings.items():
            if key.startswith("inductor."):
                setattr(inductor_config, key.split(".", 1)[1], value)
    from roles_alone import fill_until_ready  # this script's folder

    from unilab.algos.base import make_learner
    from unilab.registry import instantiate

    algo_values = {"name": args.algo, **{k.split(".", 1)[1]: v for k, v in settings.items() if k.startswith("algo.")}}
    algo = instantiate("algo", algo_values)
    obs_dim, critic_obs_dim, action_dim = (int(d) for d in args.dims.split(","))
    device = torch.device("cuda:0")
    n = args.envs
    t0 = time.monotonic()
    learner = make_learner(algo, obs_dim, critic_obs_dim, action_dim, device, seed=0, num_envs=n)
    fill_until_ready(learner, n)
    learner.update()  # compiles, captures
    torch.cuda.synchronize()
    first_update_s = time.monotonic() - t0
    with open(args.lock, "a") as lock:  # time alone on the GPU
        fcntl.flock(lock, fcntl.LOCK_EX)
        for _ in range(10):
            learner.update()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.iters):
            learner.update()
        torch.cuda.synchronize()
        cycle_ms = (time.perf_counter() - start) / args.iters * 1e3
        from torch.profiler import ProfilerActivity, profile

        cycles = 5
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(cycles):
                learner.update()
            torch.cuda.synchronize()
        fcntl.flock(lock, fcntl.LOCK_UN)
    events = [(e.name, e.device_time) for e in prof.events()
              if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time > 0
              and not e.name.startswith("Memcpy") and not e.name.startswith("Memset")]
    return {"cycle_ms": cycle_ms, "first_update_s": first_update_s, "algo": args.algo, "dims": args.dims,
            "num_envs": n, "batch_size": algo.batch_size, "updates_per_step": algo.updates_per_step,
            "settings": settings, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%d"), **summarize_kernels(events, cycles, cycle_ms)}


def _print_table(results: dict[str, dict]) -> None:
    print(f"{'variant':<22} {'cycle ms':>9} {'kernels':>8} {'kernel ms':>9} {'busy':>6} {'gemm ms':>8} "
          f"{'first update s':>14}")
    for name, r in results.items():
        if "error" in r:
            print(f"{name:<22} failed: {r['error'][-300:]}")
            continue
        gemm = r["by_category"].get("gemm", {}).get("ms", 0.0)
        print(f"{name:<22} {r['cycle_ms']:>9.3f} {r['kernels_per_cycle']:>8.0f} {r['kernel_ms_per_cycle']:>9.3f} "
              f"{r['busy_fraction']:>6.2f} {gemm:>8.3f} {r['first_update_s']:>14.1f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algo", default="fastsac")
    ap.add_argument("--dims", required=True, metavar="OBS,CRITIC_OBS,ACTION",
                    help="walk flat 98,106,29; motion tracking 160,286,29")
    ap.add_argument("--envs", type=int, default=2048, help="envs per env step (FlashSAC's return normaliser)")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--variant", action="append", default=[], help="NAME[:KEY=VALUE,...] (repeatable; "
                    "default: one variant, base)")
    ap.add_argument("--json", default=None, help="write every variant's result here")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: measure this variant
    ap.add_argument("--lock", default=os.path.join(tempfile.gettempdir(), "unilab-learner-cycle.lock"),
                    help="the lock file that serialises timings (default: one per machine, in the temp dir)")
    args = ap.parse_args(argv)
    try:
        variants = dict(parse_variant(v) for v in (args.variant or ["base"]))
    except ValueError as exc:
        ap.error(str(exc))
    if args.one is not None:
        print("RESULT " + json.dumps(_measure(args, variants[args.one])), flush=True)
        return 0

    results: dict[str, dict] = {}
    lock = args.lock
    procs = {}
    for name, settings in variants.items():
        env = dict(os.environ)
        env.update({k.split(".", 1)[1]: str(v) for k, v in settings.items() if k.startswith("env.")})
        cmd = [sys.executable, os.path.abspath(__file__), "--algo", args.algo, "--dims", args.dims,
               "--envs", str(args.envs), "--iters", str(args.iters), "--one", name, "--lock", lock,
               *(x for v in args.variant for x in ("--variant", v))]
        procs[name] = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for name, proc in procs.items():
        out, _ = proc.communicate()
        line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
        results[name] = json.loads(line[7:]) if line else {"error": out}
    _print_table(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

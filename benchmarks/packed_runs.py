"""Many runs on one GPU: the same seeds run one after the other, packed under MPS, and packed time-sliced.

    python benchmarks/packed_runs.py --out /tmp/packed                      # FastSAC walk flat, 1024 envs, seeds 1-4
    python benchmarks/packed_runs.py --out /tmp/packed --dry-run            # the commands, nothing run
    python benchmarks/packed_runs.py --out /tmp/packed --seeds 1 2 --iterations 2000 -- --algo flashsac --task g1_walk_flat

First `unilab warmup` with the training's overrides (the kernels compiled once, so that no arm pays for a cold
start), then three arms, each one `train -m` over the seeds with the same overrides and `algo.max_iterations`:

  sequential         +execution=mps, the basic launcher: one run at a time
  packed_mps         +execution=mps, hydra/launcher=unilab_packed with max_parallel = the number of seeds
  packed_timesliced  +execution=default training.mps.block_ambient_mps=true, packed the same way: no run is an MPS
                     client, the driver time-slices their CUDA contexts

The MPS arms need a daemon for the GPU (`unilab mps start`, then `eval "$(unilab mps env)"`); without one they are
refused (exit 2) before anything runs. Per arm: its wall time from the command to the last run's end, the env steps
of all its runs, their aggregate rate (env steps / wall time), and each run's mean env_steps_per_s and status
(run_summary.json). The report goes to OUT/packed_runs.json and as a table to the console. Exit status 0 when every
run completed, 1 otherwise, 2 on bad input (nothing created).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from unilab.exit_codes import EXIT_INTERRUPTED
from unilab.jobs.runner import JobProcess, interrupts, read_summary

DEFAULT_TRAIN = ["--algo", "fastsac", "--task", "g1_walk_flat", "task.num_envs=1024", "training.run.device=cuda:0"]
ARMS = {
    "sequential": ["+execution=mps"],
    "packed_mps": ["+execution=mps", "hydra/launcher=unilab_packed"],
    "packed_timesliced": ["+execution=default", "training.mps.block_ambient_mps=true", "hydra/launcher=unilab_packed"],
}
TRAIN = [sys.executable, "-m", "unilab.cli.train"]
WARMUP = [sys.executable, "-m", "unilab.cli.tools", "warmup"]
SWEEP_STOP_GRACE_S = 300.0  # a stopped sweep ends its runs (a packed one waits up to 180 s for its jobs), or is killed


def commands(out: Path, seeds: list[int], iterations: int, train_args: list[str]) -> dict[str, list[str]]:
    """The warm-up's and each arm's command line."""
    same = [*train_args, f"algo.max_iterations={iterations}", "algo.save_interval=100000000",
            "training.outputs.no_play=true", "training.outputs.logger=[]"]  # no checkpoint, play or logger I/O inside the timed runs
    cmds = {"warmup": [*WARMUP, *train_args]}  # the same kernels in every mode: no daemon needed
    for arm, mode in ARMS.items():
        packed = [f"hydra.launcher.max_parallel={len(seeds)}"] if "hydra/launcher=unilab_packed" in mode else []
        cmds[arm] = [*TRAIN, "-m", *same, *mode, *packed, "training.run.seed=" + ",".join(map(str, seeds)),
                     f"training.run.log_dir={out / arm}"]
    return cmds


def arm_report(log_dir: Path, wall_s: float, exit_code: int) -> dict:
    runs = []
    for run in sorted(p for p in log_dir.iterdir() if p.is_dir() and p.name != "multirun") if log_dir.is_dir() else []:
        summary = read_summary(run) or {"status": "no run_summary.json"}
        runs.append({"run": run.name, "status": summary.get("status"), "env_steps": summary.get("env_steps"),
                     "mean_env_steps_per_s": summary.get("mean_env_steps_per_s"), "wall_s": summary.get("wall_s")})
    env_steps = sum(r["env_steps"] or 0 for r in runs)
    return {"exit": exit_code, "wall_s": round(wall_s, 1), "env_steps": env_steps,
            "aggregate_env_steps_per_s": round(env_steps / wall_s, 1) if wall_s > 0 else None, "runs": runs}


def table(report: dict) -> str:
    lines = [f"{'arm':<18} {'exit':>4} {'wall s':>8} {'env steps':>12} {'aggregate env-steps/s':>22}  "
             "per-run mean env-steps/s"]
    for arm, r in report["arms"].items():
        rates = ", ".join(f"{x['mean_env_steps_per_s']:.0f}" if x["mean_env_steps_per_s"] else "-" for x in r["runs"])
        lines.append(f"{arm:<18} {r['exit']:>4} {r['wall_s']:>8.1f} {r['env_steps']:>12} "
                     f"{r['aggregate_env_steps_per_s'] or 0:>22.1f}  {rates}")
    return "\n".join(lines)


def run(cmd: list[str]) -> int:
    """One command on this console, as a job: Ctrl-C or SIGTERM here stops it (SIGINT to its process group, then a
    bounded end) and goes on as KeyboardInterrupt."""
    with interrupts(), JobProcess(cmd, grace_s=SWEEP_STOP_GRACE_S) as job:
        return job.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="a new or empty folder for the runs and the report")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--iterations", type=int, default=5000, help="algo.max_iterations of every run")
    parser.add_argument("--dry-run", action="store_true", help="print the commands; run and create nothing")
    parser.add_argument("train", nargs=argparse.REMAINDER, help="-- then the training's overrides "
                        f"(default: {' '.join(DEFAULT_TRAIN)})")
    args = parser.parse_args(argv)
    train_args = (args.train[1:] if args.train[:1] == ["--"] else args.train) or DEFAULT_TRAIN
    if args.iterations < 1 or len(set(args.seeds)) != len(args.seeds):
        parser.error("--iterations must be >= 1 and --seeds distinct")
    if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        parser.error(f"--out {args.out}: not a new or empty folder")
    cmds = commands(args.out.resolve(), args.seeds, args.iterations, train_args)
    if args.dry_run:
        print("\n".join(shlex.join(cmd) for cmd in cmds.values()))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"train": train_args, "seeds": args.seeds, "iterations": args.iterations, "arms": {}}
    try:
        warm = run(cmds.pop("warmup"))
    except KeyboardInterrupt:
        print("packed_runs: interrupted in the warm-up", file=sys.stderr)
        return EXIT_INTERRUPTED
    if warm:
        print(f"packed_runs: the warm-up failed (exit {warm})", file=sys.stderr)
        return warm
    for arm, cmd in cmds.items():
        print(f"packed_runs: {arm}: {shlex.join(cmd)}", file=sys.stderr, flush=True)
        started = time.monotonic()
        try:
            code, interrupted = run(cmd), False
        except KeyboardInterrupt:  # the arm's sweep was stopped
            code, interrupted = EXIT_INTERRUPTED, True
        report["arms"][arm] = arm_report(args.out / arm, time.monotonic() - started, code)
        (args.out / "packed_runs.json").write_text(json.dumps(report, indent=2) + "\n")
        if interrupted:
            print(f"packed_runs: interrupted in {arm}; the arms so far are in {args.out / 'packed_runs.json'}",
                  file=sys.stderr)
            return EXIT_INTERRUPTED
        if code == 2:
            print(f"packed_runs: {arm} was refused (exit 2; an MPS arm needs a daemon: unilab mps start, then "
                  'eval "$(unilab mps env)")', file=sys.stderr)
            return 2
    print(table(report))
    ok = all(r["exit"] == 0 and all(x["status"] == "completed" for x in r["runs"]) for r in report["arms"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

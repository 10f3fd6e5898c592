"""Time to a walking policy: each seed one `train` run alone on the GPU from a cold start, stopped after a
wall-clock budget, then its checkpoints evaluated with `unilab eval` against the walk targets.

    python benchmarks/time_to_walk.py --seconds 178 --seeds 1 2 --out /tmp/ttw/fastsac \
        -- --algo fastsac --task g1_walk_flat +execution=mps
    python benchmarks/time_to_walk.py --seconds 178 --seeds 1 2 --out /tmp/ttw/flashsac \
        -- --algo flashsac --task g1_walk_flat +execution=mps

Each run: `python -m unilab.cli.train OVERRIDES training.run.seed=S algo.max_iterations=10000000
algo.save_interval=K training.outputs.keep_checkpoints=null` (every checkpoint kept for the evaluation; no play,
no loggers), with UNILAB_CACHE_DIR a new empty folder (a cold start:
Warp, Inductor and Triton compile everything; `--warm DIR` uses DIR instead), SIGTERM after `--seconds`
(the run saves a last checkpoint and ends). The runs go one after the other, so each has the GPU alone.
Recorded per run: seconds from the command to the first metrics row, every checkpoint with the seconds
from the command to the moment it was written, and the console's start-up lines with their times.

Then every checkpoint is evaluated (`unilab eval RUN --checkpoint F --suite nominal --envs-per-command E`,
`--eval-jobs` at a time, after all runs: evaluation never shares the GPU with a timed run). A checkpoint
walks when its nominal suite has mean linear error <= 0.10 m/s, yaw-rate error <= 0.15 rad/s and no falls;
the report gives, per run, the first one that does and when it was written. OUT/time_to_walk.json is written
after each run (`"evaluated": false`, the timings so far) and again after the evaluations. Runs and evaluations
start in OUT (a path in an override is relative to OUT), never in the folder the benchmark was started from,
which may go away while they run.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from unilab.jobs.runner import JobProcess, interrupts, summary_status

TARGETS = {"lin_error": 0.10, "yaw_error": 0.15, "fall_fraction": 0.0}
CHECKPOINT = re.compile(r"iter_(\d+)\.pt$")
REPO = Path(__file__).resolve().parents[1]  # the checkout whose unilab the runs and evaluations load
TRAIN = [sys.executable, "-m", "unilab.cli.train"]
EVAL = [sys.executable, "-m", "unilab.cli.tools", "eval"]


def child_options(out: Path, env: dict[str, str] | None = None) -> dict:
    """Where a run or an evaluation starts: in OUT, with this checkout first on PYTHONPATH.

    Not in the folder the benchmark was started from: that folder can be removed or replaced while the runs and
    evaluations go on (a copy of the tree sent again to the machine, a temporary folder cleaned up), and a child
    started there then has no working directory: torch fails at import, in os.getcwd() inside its compile
    config or with "Intel oneMKL FATAL ERROR: Cannot load .../libtorch_cpu.so". `python -m` found unilab in
    that folder; PYTHONPATH keeps finding this checkout's.
    """
    env = {**os.environ, **(env or {})}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return {"cwd": str(out), "env": env}


def walks(overall: dict) -> bool:
    """The walk targets on a suite's overall means (a grid where every env fell has no errors: not walking)."""
    return all(overall.get(k) is not None and overall[k] <= limit for k, limit in TARGETS.items())


def checkpoint_times(run: Path, started_wall: float) -> list[dict]:
    """Every `iter_N.pt` of the run with the seconds from the command's start to the file's last write."""
    out = []
    for path in sorted((run / "checkpoints").glob("iter_*.pt")):
        match = CHECKPOINT.search(path.name)
        if match:
            out.append({"checkpoint": str(path), "iteration": int(match.group(1)),
                        "written_s": round(path.stat().st_mtime - started_wall, 1)})
    return sorted(out, key=lambda c: c["iteration"])


def timed_run(overrides: list[str], seed: int, out: Path, cache: Path, seconds: float, save_interval: int) -> dict:
    name = f"seed{seed}"
    cmd = [*TRAIN, *overrides, f"training.run.seed={seed}",
           "algo.max_iterations=10000000", f"algo.save_interval={save_interval}",
           "training.outputs.keep_checkpoints=null", "training.outputs.no_play=true", "training.outputs.logger=[]",
           f"training.run.log_dir={out}", f"training.run.run_name={name}"]
    options = child_options(out, {"UNILAB_CACHE_DIR": str(cache), "PYTHONUNBUFFERED": "1"})
    started_wall, started = time.time(), time.monotonic()
    first_row = None
    metrics = out / name / "metrics.jsonl"
    # Ctrl-C or SIGTERM here stops the run (SIGINT to its process group, then a bounded end) and goes on
    with interrupts(), JobProcess(cmd, log=out / f"{name}.console.log", **options) as proc:
        while proc.poll() is None and time.monotonic() - started < seconds:
            if first_row is None and metrics.exists() and metrics.stat().st_size:
                first_row = round(time.monotonic() - started, 1)
            time.sleep(0.2)
        stopped_s = round(time.monotonic() - started, 1)
        proc.stop(signal.SIGTERM)  # the launcher stops its children and saves a checkpoint; killed 120 s later
    status = summary_status(out / name)
    lines = (out / f"{name}.console.log").read_text(errors="replace").splitlines()
    startup = [line for line in lines if line.startswith("unilab:") and "[it " not in line][:30]
    return {"run": str(out / name), "seed": seed, "command": cmd[2:], "exit": proc.returncode, "status": status,
            "first_row_s": first_row, "stopped_s": stopped_s, "startup_lines": startup,
            "checkpoints": checkpoint_times(out / name, started_wall)}


def evaluate(run: str, ckpt: dict, envs_per_command: int) -> dict:
    report = Path(run) / f"eval_nominal_iter_{ckpt['iteration']:07d}.json"
    cmd = [*EVAL, run, "--checkpoint", ckpt["checkpoint"],
           "--suite", "nominal", "--envs-per-command", str(envs_per_command), "--out", str(report)]
    done = subprocess.run(cmd, capture_output=True, text=True, **child_options(Path(run).parent))
    if done.returncode or not report.exists():
        return {**ckpt, "eval_error": done.stderr[-1500:]}
    overall = json.loads(report.read_text())["suites"]["nominal"]["overall"]
    return {**ckpt, "nominal": overall, "walks": walks(overall)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--seconds", type=float, default=178.0, help="wall-clock budget of each run from its command")
    ap.add_argument("--save-interval", type=int, default=500, help="iterations between checkpoints")
    ap.add_argument("--warm", type=Path, help="use this kernel cache root for every run (default: a new empty one "
                    "per run, removed after)")
    ap.add_argument("--clear-driver-cache", action="store_true", help="remove the CUDA driver's JIT cache "
                    "(~/.nv/ComputeCache) before each run too, as on a fresh machine")
    ap.add_argument("--envs-per-command", type=int, default=16)
    ap.add_argument("--eval-jobs", type=int, default=4)
    ap.add_argument("--out", type=Path, required=True, help="run folders, logs, evaluations and time_to_walk.json")
    ap.add_argument("overrides", nargs="*", help="train overrides, after --")
    args = ap.parse_args(argv)
    if args.seconds <= 0 or args.save_interval < 1 or args.eval_jobs < 1:
        ap.error("--seconds must be > 0, --save-interval and --eval-jobs >= 1")
    # the children start in OUT (child_options): every path they get is absolute
    args.out, args.warm = args.out.resolve(), args.warm and args.warm.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []

    def write(evaluated: bool) -> None:  # after each run too: a machine taken back keeps the timings made so far
        result = {"command": ["train", *args.overrides], "seconds": args.seconds, "targets": TARGETS,
                  "cache": str(args.warm or "fresh per run"), "date": time.strftime("%Y-%m-%d"),
                  "evaluated": evaluated, "runs": runs}
        (args.out / "time_to_walk.json").write_text(json.dumps(result, indent=1))

    for seed in args.seeds:
        cache = args.warm or Path(tempfile.mkdtemp(prefix="unilab-ttw-cache-"))
        if args.clear_driver_cache:
            shutil.rmtree(Path.home() / ".nv" / "ComputeCache", ignore_errors=True)
        try:
            runs.append(timed_run(args.overrides, seed, args.out, cache, args.seconds, args.save_interval))
        finally:
            if args.warm is None:
                shutil.rmtree(cache, ignore_errors=True)
        print(f"seed {seed}: first metrics row {runs[-1]['first_row_s']} s, stopped at {runs[-1]['stopped_s']} s, "
              f"{len(runs[-1]['checkpoints'])} checkpoints, status {runs[-1]['status']}", flush=True)
        write(evaluated=False)
    with concurrent.futures.ThreadPoolExecutor(args.eval_jobs) as pool:
        for run in runs:
            run["checkpoints"] = list(pool.map(lambda c, r=run: evaluate(r["run"], c, args.envs_per_command),
                                               run["checkpoints"]))
    for run in runs:
        first = next((c for c in run["checkpoints"] if c.get("walks")), None)
        run["first_walking"] = first
        print(f"\nseed {run['seed']} ({run['run']}): first metrics row {run['first_row_s']} s")
        print(f"  {'iteration':>9} {'written s':>9} {'lin m/s':>8} {'yaw rad/s':>9} {'falls':>6}  walks")
        for c in run["checkpoints"]:
            n = c.get("nominal")
            if n is None:
                print(f"  {c['iteration']:>9} {c['written_s']:>9.1f}  eval failed: {c.get('eval_error', '')[-200:]}")
                continue
            fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
            print(f"  {c['iteration']:>9} {c['written_s']:>9.1f} {fmt(n['lin_error']):>8} {fmt(n['yaw_error']):>9} "
                  f"{n['fall_fraction']:>6.1%}  {'yes' if c['walks'] else 'no'}")
        print(f"  first walking checkpoint: {'none' if first is None else str(first['written_s']) + ' s'}")
    write(evaluated=True)
    return 0 if all(r["exit"] is not None for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())

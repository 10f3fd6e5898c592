"""Walk ablation: several variants of a walk recipe trained side by side on one GPU for the same wall time, then
their checkpoints evaluated against the walk targets, by env steps and by gradient samples.

    unilab mps start --gpu 0 && eval "$(unilab mps env --gpu 0)"
    python benchmarks/walk_ablation.py --seconds 420 --seeds 1 --out /tmp/ablation \
        --variant "base=--algo flashsac" --variant "gamma97=--algo flashsac algo.gamma=0.97" \
        -- --task g1_walk_flat +execution=mps

Each variant is NAME=OVERRIDES (space-separated train overrides, put before the shared ones after `--`). Every
variant x seed is one `train` run (`time_to_walk.py`'s settings: every checkpoint kept, no play, no loggers), all
started together, each with a new empty kernel cache, all stopped by SIGTERM `--seconds` after the start. Runs that
share a GPU slow each other down, so the wall-clock seconds here are not a time to walk alone: compare variants by
the env steps and the gradient samples (iterations x updates_per_step x batch_size, from run_config.json) of
their first walking checkpoint; `time_to_walk.py` then measures the chosen one alone.

Every `--eval-every`-th checkpoint and the last are evaluated (`unilab eval --suite nominal`), `--eval-jobs` at a
time, after all runs have ended. The report: OUT/walk_ablation.json and a table per run on the console.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

from time_to_walk import TRAIN, checkpoint_times, child_options, evaluate

from unilab.jobs.runner import JobProcess, end_all, interrupts, summary_status


def variant(text: str) -> tuple[str, list[str]]:
    name, sep, overrides = text.partition("=")
    if not sep or not name.isidentifier() or not overrides.strip():
        raise argparse.ArgumentTypeError(f"a variant is NAME=OVERRIDES (NAME a plain word), not {text!r}")
    return name, shlex.split(overrides)


def run_facts(run: Path) -> dict:
    """Env steps and gradient samples per iteration, and the mean env-steps/s, from the run's own records."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()] \
        if (run / "metrics.jsonl").exists() else []
    last = rows[-1] if rows else {}
    algo = json.loads((run / "run_config.json").read_text()).get("algo", {}) \
        if (run / "run_config.json").exists() else {}
    rates = [r["env_steps_per_s"] for r in rows if r.get("env_steps_per_s")]
    return {"env_steps_per_iteration": last["env_steps"] / last["iteration"] if last.get("iteration") else None,
            "samples_per_iteration": algo.get("updates_per_step", 0) * algo.get("batch_size", 0) or None,
            "env_steps_per_s": sum(rates) / len(rates) if rates else None, "iterations": last.get("iteration")}


def to_evaluate(checkpoints: list[dict], every: int) -> list[dict]:
    """Every `every`-th checkpoint and the last one."""
    return [c for i, c in enumerate(checkpoints) if (i + 1) % every == 0 or i == len(checkpoints) - 1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", type=variant, action="append", required=True, help="NAME=OVERRIDES, repeated")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1])
    ap.add_argument("--seconds", type=float, default=420.0, help="wall-clock budget of all runs together")
    ap.add_argument("--save-interval", type=int, default=1000, help="iterations between checkpoints")
    ap.add_argument("--eval-every", type=int, default=1, help="evaluate every N-th checkpoint (and the last)")
    ap.add_argument("--envs-per-command", type=int, default=16)
    ap.add_argument("--eval-jobs", type=int, default=4)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("overrides", nargs="*", help="train overrides shared by every variant, after --")
    args = ap.parse_args(argv)
    names = [name for name, _ in args.variant]
    if len(set(names)) != len(names):
        ap.error(f"variant names repeat: {names}")
    if args.seconds <= 0 or min(args.save_interval, args.eval_every, args.eval_jobs) < 1:
        ap.error("--seconds must be > 0, --save-interval, --eval-every and --eval-jobs >= 1")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    runs, jobs, caches = [], [], []
    started_wall, started = time.time(), time.monotonic()
    try:
        with interrupts():
            for name, overrides in args.variant:
                for seed in args.seeds:
                    run_name = f"{name}_s{seed}"
                    caches.append(Path(tempfile.mkdtemp(prefix="unilab-ablation-cache-")))
                    cmd = [*TRAIN, *overrides, *args.overrides, f"training.run.seed={seed}",
                           "algo.max_iterations=10000000", f"algo.save_interval={args.save_interval}",
                           "training.outputs.keep_checkpoints=null", "training.outputs.no_play=true",
                           "training.outputs.logger=[]", f"training.run.log_dir={out}",
                           f"training.run.run_name={run_name}"]
                    options = child_options(out, {"UNILAB_CACHE_DIR": str(caches[-1]), "PYTHONUNBUFFERED": "1"})
                    jobs.append(JobProcess(cmd, log=out / f"{run_name}.console.log", **options))
                    runs.append({"variant": name, "seed": seed, "run": str(out / run_name), "command": cmd[2:]})
            while any(j.poll() is None for j in jobs) and time.monotonic() - started < args.seconds:
                time.sleep(0.5)
    finally:
        end_all(jobs)  # SIGTERM to every run still going: each saves a last checkpoint and ends
        for job in jobs:
            job.close()
        for cache in caches:
            shutil.rmtree(cache, ignore_errors=True)
    for run, job in zip(runs, jobs):
        run.update(exit=job.returncode, status=summary_status(run["run"]), **run_facts(Path(run["run"])),
                   checkpoints=to_evaluate(checkpoint_times(Path(run["run"]), started_wall), args.eval_every))
    with concurrent.futures.ThreadPoolExecutor(args.eval_jobs) as pool:
        for run in runs:
            run["checkpoints"] = list(pool.map(lambda c, r=run: evaluate(r["run"], c, args.envs_per_command),
                                               run["checkpoints"]))
    for run in runs:
        per_it, samples = run["env_steps_per_iteration"] or 0, run["samples_per_iteration"] or 0
        for c in run["checkpoints"]:
            c["env_steps"], c["gradient_samples"] = c["iteration"] * per_it, c["iteration"] * samples
        run["first_walking"] = next((c for c in run["checkpoints"] if c.get("walks")), None)
        rate = run["env_steps_per_s"]
        print(f"\n{run['variant']} seed {run['seed']}: {run['iterations']} iterations, "
              f"{'-' if rate is None else f'{rate / 1e3:.0f} k'} env-steps/s, status {run['status']}")
        print(f"  {'iteration':>9} {'env steps':>10} {'samples':>9} {'lin m/s':>8} {'yaw rad/s':>9} {'falls':>6}  walks")
        for c in run["checkpoints"]:
            n, head = c.get("nominal"), f"  {c['iteration']:>9} {c['env_steps'] / 1e6:>9.1f}M {c['gradient_samples'] / 1e6:>8.1f}M"
            if n is None:
                print(f"{head}  eval failed: {c.get('eval_error', '')[-200:]}")
                continue
            fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
            print(f"{head} {fmt(n['lin_error']):>8} {fmt(n['yaw_error']):>9} {n['fall_fraction']:>6.1%}  "
                  f"{'yes' if c['walks'] else 'no'}")
    report = {"command": ["train", *args.overrides], "variants": {n: o for n, o in args.variant},
              "seconds": args.seconds, "date": time.strftime("%Y-%m-%d"), "runs": runs}
    (out / "walk_ablation.json").write_text(json.dumps(report, indent=1))
    return 0 if all(r["exit"] is not None for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())

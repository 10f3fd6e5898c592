"""Seconds from a `train` command to its first metrics row: cold (an empty kernel cache) and then warm (the
cache the cold run filled), one run at a time, each alone on the machine.

    python benchmarks/cold_start.py --out /tmp/session/cold_start.json -- --algo fastsac --task g1_walk_flat training.run.device=cuda:0
    python benchmarks/cold_start.py --cache ~/.cache/unilab -- --algo flashsac --task g1_motion_tracking training.run.device=cuda:0

Each run is `python -m unilab.cli.train OVERRIDES algo.max_iterations=N` (no play, no loggers) in a scratch
log directory, with UNILAB_CACHE_DIR pointing at the cache (a new empty one unless --cache names one: then
the first run is only as cold as that cache). The first row is the moment `metrics.jsonl` first holds a
line; the console's start-up lines ("worlds built in", "first update launched after", ...) are kept with
their times since the command. What is not in the cache root stays warm between the runs (the driver's
own JIT cache, the OS's file cache), so run this on a fresh machine for a true cold start.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from unilab.exit_codes import EXIT_INTERRUPTED
from unilab.jobs.runner import JobProcess, interrupts

# The console's lines kept with their times: every start-up phase, and of the progress lines only the first.
PROGRESS = "[it "


def timed_run(overrides: list[str], cache: Path, log_dir: Path, name: str, iterations: int,
              timeout_s: float) -> dict:
    """One training run: seconds to its first metrics row and to its end, and its phase lines with times."""
    cmd = [sys.executable, "-m", "unilab.cli.train", *overrides, f"algo.max_iterations={iterations}",
           "training.outputs.no_play=true", "training.outputs.export_onnx=false", "training.outputs.logger=[]",
           f"training.run.log_dir={log_dir}", f"training.run.run_name={name}"]
    env = {**os.environ, "UNILAB_CACHE_DIR": str(cache), "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    phases: list[tuple[float, str]] = []
    progress_seen = False

    def read(line: str) -> None:
        nonlocal progress_seen
        if not line.startswith("unilab:") or (PROGRESS in line and progress_seen):
            return
        progress_seen = progress_seen or PROGRESS in line
        phases.append((round(time.monotonic() - started, 2), line.strip()))

    first_row = None
    # Ctrl-C or SIGTERM here stops the run (SIGINT to its process group, then a bounded end) and goes on
    with interrupts(), JobProcess(cmd, env=env, on_line=read) as proc:
        while proc.poll() is None and time.monotonic() - started < timeout_s:
            if first_row is None and any(p.stat().st_size for p in (log_dir / name).glob("**/metrics.jsonl")):
                first_row = round(time.monotonic() - started, 2)
            time.sleep(0.1)
        proc.stop(signal.SIGKILL)  # past its timeout: nothing of it is measured any more
    if first_row is None and any(p.stat().st_size for p in (log_dir / name).glob("**/metrics.jsonl")):
        first_row = round(time.monotonic() - started, 2)  # it ended between two looks
    return {"run": name, "exit": proc.returncode, "first_row_s": first_row,
            "end_s": round(time.monotonic() - started, 2), "phases": phases}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, help="the cache root (default: a new empty one, removed after)")
    parser.add_argument("--iterations", type=int, default=30, help="iterations per run (default 30)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds a run may take (default 900)")
    parser.add_argument("--out", type=Path, help="write the result as JSON here")
    parser.add_argument("overrides", nargs="*", help="train overrides, after --")
    args = parser.parse_args(argv)
    cache = args.cache or Path(tempfile.mkdtemp(prefix="unilab-cold-cache-"))
    scratch = Path(tempfile.mkdtemp(prefix="unilab-cold-runs-"))
    try:
        runs = [timed_run(args.overrides, cache, scratch, name, args.iterations, args.timeout)
                for name in ("cold", "warm")]
    except KeyboardInterrupt:  # the run in progress was stopped
        print("cold_start: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if args.cache is None:
            shutil.rmtree(cache, ignore_errors=True)
    result = {"command": ["train", *args.overrides], "cache": str(args.cache or "fresh"), "runs": runs}
    for run in runs:
        print(f"{run['run']}: first metrics row {run['first_row_s']} s, end {run['end_s']} s (exit {run['exit']})")
        for at, line in run["phases"]:
            print(f"  {at:7.1f} s  {line}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
    return 1 if any(run["exit"] for run in runs) else 0


if __name__ == "__main__":
    sys.exit(main())

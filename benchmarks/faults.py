"""Faults of runs under one MPS daemon: a run whose learner or MPS server is killed, and a run whose neighbour is
stopped. `bash benchmarks/gpu_session.sh faults` runs all three under a GPU's daemon.

    python3 benchmarks/faults.py kill learner --log-dir DIR -- TRAIN...
    python3 benchmarks/faults.py kill server --log-dir DIR -- TRAIN...
    python3 benchmarks/faults.py neighbours NAME_A NAME_B --log-dir DIR -- TRAIN...

TRAIN is a whole `train` command (`train ...` or `python3 -m unilab.cli.train ...`) with its training.run.log_dir; each
run is a job of unilab.jobs (its own process group, Ctrl-C here stops it), its console in DIR/RUN_NAME.log.

kill: once the run (TRAIN's training.run.run_name) has 3 metrics rows, kill -9 of its learner (ranks[0].learner_pid of
its runtime_manifest.json) or of the MPS server (`get_server_list` of nvidia-cuda-mps-control); then the seconds
from the kill to the launcher's exit, its exit status, and run_summary.json's cause and fix.

neighbours: two runs side by side (TRAIN training.run.run_name=NAME_A, and NAME_B); once each has 3 metrics rows,
SIGINT to A; when it has ended, B's rows must grow in the next 30 s; then SIGINT to B, and both summaries' status,
cause and exit codes.

Exit status 1 when a run ended before its third metrics row, else 0.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from unilab.exit_codes import EXIT_INTERRUPTED
from unilab.jobs.runner import JobProcess, interrupts, read_summary
from unilab.rundir.renamed import upgrade_overrides

ROWS = 3  # the metrics rows a run has written before its fault
GO_ON_S = 30.0  # how long the neighbour of a stopped run must keep writing rows


def _value(cmd: list[str], key: str) -> str | None:
    """The last `key=value` of a command line."""
    values = [word.split("=", 1)[1] for word in cmd if word.startswith(f"{key}=")]
    return values[-1] if values else None


def _run_dir(cmd: list[str]) -> Path:
    return Path(_value(cmd, "training.run.log_dir") or "runs") / (_value(cmd, "training.run.run_name") or "")


def rows(run: Path) -> int:
    """Its metrics rows so far."""
    try:
        return (run / "metrics.jsonl").read_bytes().count(b"\n")
    except OSError:
        return 0


def _tail(path: Path, n: int) -> None:
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    print("\n".join(lines[-n:]))


def _rc(code: int) -> int:
    """An exit status as a shell reports it (128 + N: killed by signal N)."""
    return code if code >= 0 else 128 - code


def _until_rows(jobs: dict[Path, JobProcess]) -> bool:
    """Waits until each run has ROWS metrics rows; False when one of them ended first."""
    while any(rows(run) < ROWS for run in jobs):
        if any(job.poll() is not None for job in jobs.values()):
            return False
        time.sleep(1)
    return True


def _victim_pid(victim: str, run: Path) -> int:
    if victim == "learner":
        return json.loads((run / "runtime_manifest.json").read_text())["ranks"][0]["learner_pid"]
    servers = subprocess.run(["nvidia-cuda-mps-control"], input="get_server_list\n", capture_output=True, text=True)
    return int(servers.stdout.split()[0])


def kill(victim: str, cmd: list[str], log_dir: Path) -> int:
    run = _run_dir(cmd)
    log = log_dir / f"{run.name}.log"
    with JobProcess(cmd, log=log) as job:
        if not _until_rows({run: job}):
            print("the run ended before its third metrics row")
            _tail(log, 20)
            return 1
        pid = _victim_pid(victim, run)
        t0 = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        code = job.wait()
    print(f"faults {victim}: kill -9 of pid {pid}; the launcher exited {time.monotonic() - t0:.1f} s later, "
          f"rc={_rc(code)}")
    summary = read_summary(run) or {}
    print("cause:", summary.get("cause"))
    print("fix:", summary.get("fix"))
    print("console (last lines):")
    _tail(log, 8)
    return 0


def neighbours(names: list[str], cmd: list[str], log_dir: Path) -> int:
    (a, b), base = names, _value(cmd, "training.run.log_dir") or "runs"
    runs = {name: Path(base) / name for name in names}
    with JobProcess([*cmd, f"training.run.run_name={a}"], log=log_dir / f"{a}.log") as job_a, \
            JobProcess([*cmd, f"training.run.run_name={b}"], log=log_dir / f"{b}.log") as job_b:
        if not _until_rows({runs[a]: job_a, runs[b]: job_b}):
            print("a run ended before its third metrics row")
            return 1
        code = job_a.stop(signal.SIGINT)
        n0 = rows(runs[b])
        time.sleep(GO_ON_S)
        n1 = rows(runs[b])
        if job_b.poll() is None and n1 > n0:
            print(f"faults stop: {a} stopped (rc={_rc(code)}); {b} went on: {n0} -> {n1} rows in the {GO_ON_S:g} s "
                  "after")
        else:
            print(f"faults stop: {a} stopped (rc={_rc(code)}); {b} did NOT go on ({n0} -> {n1} rows); its console:")
            _tail(log_dir / f"{b}.log", 8)
        job_b.stop(signal.SIGINT)
    for name in names:
        summary = read_summary(runs[name]) or {}
        print(name, summary.get("status"), summary.get("cause"), summary.get("exit_codes"))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="fault", required=True)
    killing = sub.add_parser("kill", help="kill -9 of a run's learner or of the MPS server mid-run")
    killing.add_argument("victim", choices=["learner", "server"])
    stopping = sub.add_parser("neighbours", help="two runs side by side; SIGINT to the first, the second goes on")
    stopping.add_argument("names", nargs=2, metavar="NAME")
    for p in (killing, stopping):
        p.add_argument("--log-dir", type=Path, required=True, help="where each run's console goes (RUN_NAME.log)")
    argv = sys.argv[1:] if argv is None else argv
    cmd = argv[argv.index("--") + 1:] if "--" in argv else []  # the whole train command
    args = parser.parse_args(argv[:len(argv) - len(cmd) - 1] if "--" in argv else argv)
    cmd = upgrade_overrides(cmd)  # old key spellings (training.run_name) read as today's
    if not cmd:
        parser.error("the train command goes after --")
    if args.fault == "kill" and _value(cmd, "training.run.run_name") is None:
        parser.error("kill: the train command needs its training.run.run_name")
    args.log_dir.mkdir(parents=True, exist_ok=True)
    try:
        with interrupts():  # Ctrl-C or SIGTERM here stops the runs (SIGINT to each, then a bounded end)
            if args.fault == "kill":
                return kill(args.victim, cmd, args.log_dir)
            return neighbours(args.names, cmd, args.log_dir)
    except KeyboardInterrupt:
        print("faults: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())

"""`python -m unilab.jobs [--log FILE] [--timeout S] [--env KEY=VALUE ...] -- CMD ...`: one job through the runner
(unilab.jobs.runner), for scripts that start `train` (benchmarks/gpu_session.sh): CMD in a session of its own, its
console to FILE (or to this one), Ctrl-C or SIGTERM to this process passed on to the job's process group, and
after S seconds the job stopped as SIGTERM stops a run (it ends and writes its summary; killed after the runner's
grace). With --log, `rc=N (FILE's name)` is printed at the end; the exit status is the job's."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

from unilab.exit_codes import EXIT_INTERRUPTED, EXIT_USAGE

from .runner import JobProcess, interrupts


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m unilab.jobs", description=__doc__.split(":", 1)[1].strip())
    p.add_argument("--log", type=Path, help="the job's console (stdout and stderr) goes to this file")
    p.add_argument("--timeout", type=float, metavar="S", help="stop the job (SIGTERM) after S seconds")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="set in the job's environment")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        parser.print_usage(sys.stderr)
        print("python -m unilab.jobs: give the job's command after --", file=sys.stderr)
        return EXIT_USAGE
    split = argv.index("--")
    args, cmd = parser.parse_args(argv[:split]), argv[split + 1:]
    if any("=" not in kv for kv in args.env):
        parser.error(f"--env takes KEY=VALUE: {' '.join(kv for kv in args.env if '=' not in kv)}")
    env = {**os.environ, **dict(kv.split("=", 1) for kv in args.env)}
    with interrupts():
        try:
            with JobProcess(cmd, env=env, log=args.log) as job:
                try:
                    code = job.wait(timeout=args.timeout)
                except subprocess.TimeoutExpired:
                    print(f"unilab.jobs: {args.timeout:g} s passed: the job is stopped (SIGTERM)", file=sys.stderr)
                    code = job.stop(signal.SIGTERM)
        except KeyboardInterrupt:  # the job was stopped on the way out of its block
            code = EXIT_INTERRUPTED
    code = 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell says
    if args.log is not None:
        print(f"rc={code} ({args.log.name})", flush=True)
    return code


if __name__ == "__main__":
    raise SystemExit(main())

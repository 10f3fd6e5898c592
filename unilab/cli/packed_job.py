"""One job of a packed sweep, as the packed launcher (unilab.jobs.packed) starts it: `train` with the job's
overrides, in a process of its own, run as the sweep's job N would run in turn (validated at its start, its run name
carrying its swept values). Exit status: the job's (0 completed, 1 failed, 2 refused, 130 interrupted).

    python -m unilab.cli.packed_job --index N --parent PID --swept KEYS --result FILE -- OVERRIDES...

--result gets {"run_dir": ...} when the job ends, for the sweep's summary. The process ends with its parent.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from unilab.processes import exit_with_parent

from . import sweep as sweeps


def command(index: int, overrides: list[str], swept_keys: set[str], result: Path) -> list[str]:
    """The command line that runs job `index` of this process's sweep (`main` reads it)."""
    return [sys.executable, "-m", "unilab.cli.packed_job", "--index", str(index), "--parent", str(os.getpid()),
            "--swept", ",".join(sorted(swept_keys)), "--result", str(result), "--", *overrides]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m unilab.cli.packed_job")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True, help="the packed launcher's pid")
    parser.add_argument("--swept", default="", help="the sweep's swept keys, comma-separated")
    parser.add_argument("--result", required=True)
    parser.add_argument("overrides", nargs=argparse.REMAINDER)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    overrides = args.overrides[1:] if args.overrides[:1] == ["--"] else args.overrides
    exit_with_parent(args.parent)  # a packed launcher killed outright takes its jobs along
    from .train import run_packed_job

    sweep = sweeps.Sweep(swept_keys={k for k in args.swept.split(",") if k}, job_index=args.index)
    try:
        code = run_packed_job(overrides, sweep)
    finally:
        run_dir = sweep.jobs[0].run_dir if sweep.jobs else None
        with open(args.result, "w") as f:
            json.dump({"run_dir": run_dir}, f)
    raise SystemExit(code)


if __name__ == "__main__":
    main()

"""A fake `train` for unilab.jobs' tests: `python tests/fake_job.py RUN_DIR [options]`, or with
`training.run.log_dir=D training.run.run_name=N` among its words `python tests/fake_job.py [options] OVERRIDES` (RUN_DIR is
then D/N, as `train` names it).

It makes RUN_DIR, starts a child of its own in its process group (as the launcher starts a learner) unless
--alone, records both pids in RUN_DIR/pids.json and every signal it receives in RUN_DIR/signals, prints a line to
stdout and one to stderr, and writes RUN_DIR/ready. Then:
  --end STATUS CODE   writes run_summary.json with STATUS (unless STATUS is "none"), ends its child (as a
                      launcher stops its roles before it exits) and exits CODE
  (default)           waits; SIGINT or SIGTERM writes run_summary.json {"status": "interrupted"} and exits 130
  --ignore            waits, ignoring SIGINT and SIGTERM (recorded all the same): only SIGKILL ends it
  --launcher          as a launcher: holds RUN_DIR/run.lock, names its child the learner in runtime_manifest.json,
                      writes a metrics row every 0.1 s; when the learner dies it writes run_summary.json (failed,
                      with a cause) and exits 1
The child waits with Python's default handlers: SIGINT or SIGTERM to it ends it. Other words are ignored.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    args = sys.argv[1:]
    named = dict(word.split("=", 1) for word in args if word.startswith(("training.run.log_dir=", "training.run.run_name=")))
    run = Path(named["training.run.log_dir"], named["training.run.run_name"]) if len(named) == 2 else Path(args.pop(0))
    run.mkdir(parents=True, exist_ok=True)

    def record(signum, _frame):
        with open(run / "signals", "a") as f:
            f.write(signal.Signals(signum).name + "\n")
        if "--ignore" not in args:
            (run / "run_summary.json").write_text(json.dumps({"status": "interrupted"}))
            os._exit(130)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, record)
    child = None
    if "--alone" not in args:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    (run / "pids.json").write_text(json.dumps({"job": os.getpid(), "child": child.pid if child else None}))
    print("a line on stdout", flush=True)
    print("a line on stderr", file=sys.stderr, flush=True)
    (run / "ready").write_text("")
    if "--end" in args:
        status, code = args[args.index("--end") + 1:args.index("--end") + 3]
        if status != "none":
            (run / "run_summary.json").write_text(json.dumps({"status": status}) if status != "garbled" else "{")
        if child:
            child.kill()
            child.wait()
        sys.exit(int(code))
    if "--launcher" in args:
        (run / "run.lock").write_text(f"{os.getpid()}\n")
        (run / "runtime_manifest.json").write_text(json.dumps({"ranks": [{"rank": 0, "learner_pid": child.pid}]}))
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if "--launcher" in args:
            if child.poll() is not None:
                (run / "run_summary.json").write_text(json.dumps(
                    {"status": "failed", "cause": f"learner_died: exit code {child.returncode}", "fix": None}))
                sys.exit(1)
            with open(run / "metrics.jsonl", "a") as f:
                f.write(json.dumps({"iteration": 0}) + "\n")


if __name__ == "__main__":
    main()

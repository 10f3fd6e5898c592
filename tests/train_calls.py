"""`train` called in-process (the `spies` fixture of tests/conftest.py stands in for what it would start), and a real
sweep interrupted: shared by the tests of the command line."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from unilab.cli.train import main as train_main


class Spy:
    def __init__(self, result=0):
        self.calls = []
        self.result = result

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self.result


def run_train(*args) -> int:
    try:
        train_main(list(args))
    except SystemExit as exc:
        return exc.code or 0
    return 0


def run_dirs(log_dir: Path) -> list[Path]:
    return sorted(p for p in log_dir.iterdir() if p.is_dir() and p.name != "multirun") if log_dir.exists() else []


def tree_digest(root: Path, contents_of_lock: bool = True) -> dict[str, str]:
    """Every path under `root` (relative) -> its file's sha256, its link's target or "dir": equal digests, an
    untouched tree. contents_of_lock=False: run.lock counts by name only (whoever takes the lock, a refused
    resume too, writes its pid there)."""
    digest = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            digest[name] = "-> " + os.readlink(path)
        elif path.is_dir():
            digest[name] = "dir"
        elif path.name == "run.lock" and not contents_of_lock:
            digest[name] = "lock"
        else:
            digest[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest


def interrupt_real_sweep(args: list[str], log_dir: Path, scratch: Path, training: int = 1) -> tuple[int, str]:
    """`train -m ARGS` in a process group of its own, SIGINT to that group (Ctrl-C) once `training` of its runs have
    written metrics rows: (its exit status, its stderr)."""
    proc = subprocess.Popen([sys.executable, "-m", "unilab.cli.train", "-m", *args, f"training.run.log_dir={log_dir}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(scratch / "none")))
    try:
        deadline = time.monotonic() + 300
        while sum((r / "metrics.jsonl").is_file() for r in run_dirs(log_dir)) < training:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-4000:]
            time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
    return proc.returncode, err

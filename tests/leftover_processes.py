"""Processes a test session started and did not stop. Each process the tests start inherits a mark in its
environment (the session's controller pid); whatever still carries it when the session ends outlived its test:
`unilab` stops what it starts, and so must its tests."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

MARK = "UNILAB_TEST_SESSION"


def mark_this_session() -> None:
    """Mark the processes started from here on; a worker of `-n 2` keeps its controller's mark."""
    os.environ.setdefault(MARK, str(os.getpid()))


def marked_processes(mark: str, proc: Path = Path("/proc")) -> dict[int, str]:
    """pid -> command line of every process but this one whose environment holds MARK=mark (Linux's /proc; none
    where it is missing). A process that ends while it is read, or that belongs to another user, is left out."""
    needle = f"{MARK}={mark}".encode()
    found = {}
    for entry in proc.glob("[0-9]*") if proc.is_dir() else ():
        pid = int(entry.name)
        if pid == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found[pid] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
    return found


def stop_leftovers(mark: str, settle_s: float = 5.0) -> dict[int, str]:
    """The marked processes still running after `settle_s` (time for the ones on their way out: xdist's workers,
    resource trackers), each then killed. Returns pid -> command line of those killed."""
    deadline = time.monotonic() + settle_s
    while (left := marked_processes(mark)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return left

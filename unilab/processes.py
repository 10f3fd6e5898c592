"""Ending a child process that did not end by itself: SIGTERM, then SIGKILL after a grace period."""

from __future__ import annotations

import subprocess


def end_child(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=grace_s)

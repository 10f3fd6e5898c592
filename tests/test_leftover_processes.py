"""The session's guard against processes the tests leave running (tests/leftover_processes.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from leftover_processes import MARK, marked_processes, stop_leftovers

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_a_marked_process_left_running_is_found_and_killed():
    mine = subprocess.Popen(SLEEP, env={**os.environ, MARK: "leftover-test"})
    other = subprocess.Popen(SLEEP, env={**os.environ, MARK: "another-session"})
    try:
        deadline = time.monotonic() + 10
        while mine.pid not in (found := marked_processes("leftover-test")):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert "time.sleep(60)" in found[mine.pid] and other.pid not in found
        assert set(stop_leftovers("leftover-test", settle_s=0.2)) == {mine.pid}
        assert mine.wait(timeout=10) == -9 and other.poll() is None
    finally:
        for proc in (mine, other):
            proc.kill()
            proc.wait()


def test_a_process_that_ends_in_the_settling_time_is_not_a_leftover():
    quick = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"],
                             env={**os.environ, MARK: "quick-test"})
    try:
        assert stop_leftovers("quick-test", settle_s=30) == {}
        assert quick.wait(timeout=10) == 0
    finally:
        quick.kill()
        quick.wait()

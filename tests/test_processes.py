"""unilab.processes: reading /proc/<pid>/stat and the process tree, ending a child."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from unilab.mps.host import HostFacts
from unilab.processes import descendants, end_child, stat_fields

FAKE_JOB = [sys.executable, str(Path(__file__).resolve().parent / "fake_job.py")]


def test_stat_fields_start_after_a_command_name_with_blanks_and_parentheses(tmp_path):
    (tmp_path / "42").mkdir()
    fields_3_to_22 = ["S", "7", *map(str, range(5, 22)), "98765"]  # state, ppid, ..., starttime (field 22)
    (tmp_path / "42" / "stat").write_text("42 (a) (b c) " + " ".join(fields_3_to_22) + " 0 0\n")
    fields = stat_fields(42, tmp_path)
    assert fields[0] == "S" and fields[4 - 3] == "7"
    assert HostFacts(proc=tmp_path).start_time(42) == 98765
    assert stat_fields(43, tmp_path) is None and HostFacts(proc=tmp_path).start_time(43) is None


def test_a_zombie_has_no_start_time(tmp_path):
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "stat").write_text("42 (x) Z 1 " + " ".join(["0"] * 20) + "\n")
    assert HostFacts(proc=tmp_path).start_time(42) is None


def test_descendants_lists_a_child_below_this_process():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        tree = descendants(os.getpid())
        assert tree[0] == os.getpid() and child.pid in tree
        assert stat_fields(child.pid)[4 - 3] == str(os.getpid())
    finally:
        child.kill()
        child.wait()


def test_end_child_of_a_group_ends_its_children_too(tmp_path):
    """group=True: the SIGTERM goes to the child's whole process group; tests/fake_job.py's own child, which the
    fake never signals, ends of it."""
    run = tmp_path / "run"
    proc = subprocess.Popen([*FAKE_JOB, str(run)], start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (run / "ready").exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    grandchild = json.loads((run / "pids.json").read_text())["child"]
    try:
        end_child(proc, grace_s=60, group=True)
        assert proc.returncode == 130 and (run / "signals").read_text() == "SIGTERM\n"
        while (fields := stat_fields(grandchild)) is not None and fields[0] not in ("Z", "X"):
            assert time.monotonic() < deadline, "the fake's child outlived the group's SIGTERM"
            time.sleep(0.02)
    finally:
        if stat_fields(grandchild) is not None:
            os.kill(grandchild, 9)

"""unilab.processes: reading /proc/<pid>/stat and the process tree."""

from __future__ import annotations

import os
import subprocess
import sys

from unilab.mps.host import HostFacts
from unilab.processes import descendants, stat_fields


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

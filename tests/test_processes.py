"""unilab.processes: reading /proc/<pid>/stat and the process tree, ending a child."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

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


# A socket where multiprocessing puts it (its temporary directory), as passing a CPU tensor through a queue does.
_BIND = "from multiprocessing.connection import Listener; Listener(family='AF_UNIX').close(); print('bound')"


def _long_temp_dir(short_tmp: Path) -> Path:
    """A temporary directory whose sockets would pass the AF_UNIX limit (TMPDIR on a cluster's scratch disk)."""
    from unilab.processes import SOCKET_PATH_MAX, SOCKET_TAIL

    long_dir = short_tmp / ("d" * (SOCKET_PATH_MAX - SOCKET_TAIL - len(str(short_tmp))))
    long_dir.mkdir()
    assert len(str(long_dir)) + SOCKET_TAIL > SOCKET_PATH_MAX
    return long_dir


def test_a_child_binds_its_sockets_however_long_tmpdir_is(short_tmp):
    """With TMPDIR too long for a socket, multiprocessing's sockets go under a short directory (the children call
    use_short_socket_dir as they start), removed again by remove_short_socket_dir; other temporary files stay in
    TMPDIR."""
    long_dir = _long_temp_dir(short_tmp)
    env = dict(os.environ, TMPDIR=str(long_dir))
    plain = subprocess.run([sys.executable, "-c", _BIND], capture_output=True, text=True, env=env, timeout=60)
    assert plain.returncode != 0 and "AF_UNIX path too long" in plain.stderr  # what the collector once met
    code = ("import multiprocessing.util, os, tempfile\n"
            "from unilab.processes import remove_short_socket_dir, use_short_socket_dir\n"
            "use_short_socket_dir()\n"
            f"{_BIND}\n"
            "print(multiprocessing.util.get_temp_dir()); print(tempfile.gettempdir())\n"
            "remove_short_socket_dir(); print(os.path.exists(multiprocessing.util.get_temp_dir()))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    bound, sockets, temp, left = done.stdout.split()
    assert bound == "bound" and not sockets.startswith(str(long_dir)) and temp == str(long_dir) and left == "False"


def test_the_socket_directory_is_tmpdir_when_it_fits(short_tmp, monkeypatch):
    import unilab.processes as processes

    long_dir = _long_temp_dir(short_tmp)
    assert processes.socket_temp_dir(str(short_tmp)) == str(short_tmp)
    assert processes.socket_temp_dir(str(long_dir)) == "/tmp"
    monkeypatch.setattr(processes, "SHORT_TEMP_DIRS", ())
    assert processes.socket_temp_dir(str(long_dir)) is None


_SEMAPHORE_CHILD = """
import multiprocessing as mp, os, sys

def child(queue):
    lock = mp.RLock()  # as a library makes one in a child (tqdm's write lock on first use)
    queue.put(lock._semlock.name)
    from unilab.runtime import child_log
    if sys.argv[1] == "control":  # leave as it was before it unlinked them
        child_log.unlink_own_semaphores = lambda: None
    child_log.leave(queue, 0)

if __name__ == "__main__":
    queue = mp.get_context("spawn").Queue()
    proc = mp.get_context("spawn").Process(target=child, args=(queue,))
    proc.start()
    name = queue.get(timeout=60)
    proc.join(60)
    print(os.path.exists("/dev/shm/sem." + name.lstrip("/")))
"""


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="named semaphores are not files in /dev/shm here")
@pytest.mark.parametrize("how", ["leave", "control"])
def test_a_child_that_leaves_unlinks_the_semaphores_it_made(tmp_path, how):
    """A child ends with os._exit (leave), which skips multiprocessing's unlinking of the semaphores it made: left
    linked, the launcher's resource tracker warns of "leaked semaphore objects" when the run ends. leave unlinks
    them; without that step (the control) the file and the warning stay."""
    script = tmp_path / "semaphore_child.py"
    script.write_text(_SEMAPHORE_CHILD)
    done = subprocess.run([sys.executable, str(script), how], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    if how == "leave":
        assert done.stdout.split() == ["False"] and "leaked semaphore" not in done.stderr
    else:
        assert done.stdout.split() == ["True"] and "leaked semaphore" in done.stderr

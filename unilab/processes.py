"""Child processes: ending one that did not end by itself (SIGTERM, then SIGKILL after a grace period), ending
with the parent, and finding every process below one (from /proc)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path


def end_child(proc: subprocess.Popen, grace_s: float = 5.0, first: int = signal.SIGTERM, group: bool = False) -> None:
    """The one bounded end of a child: `first` (SIGTERM unless told), then SIGKILL where it has not ended `grace_s`
    later. `group`: both go to its process group (a child started in a session of its own, with its children)."""
    _send(proc, first, group)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        _send(proc, signal.SIGKILL, group)
        proc.wait(timeout=grace_s)


def _send(proc: subprocess.Popen, signum: int, group: bool) -> None:
    if not group:
        proc.send_signal(signum)  # nothing once it has been waited for
        return
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:  # the group has ended
        pass


def exit_with_parent(parent_pid: int) -> None:
    """This process gets SIGTERM when its parent dies (Linux's PDEATHSIG); exits at once if the parent, `parent_pid`,
    died before that was armed."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:  # not Linux: the caller's own waits notice a vanished parent
        pass
    if os.getppid() != parent_pid:
        os._exit(1)


def stat_fields(pid: int, proc: Path = Path("/proc")) -> list[str] | None:
    """/proc/<pid>/stat from its third field (the state) on; None when the pid is gone. Field n of proc(5) is
    item n - 3."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()  # after the command name, which may hold blanks and parentheses


def _parent(pid: int) -> int | None:
    fields = stat_fields(pid)
    return int(fields[4 - 3]) if fields else None


def descendants(root: int) -> list[int]:
    """`root` and every process below it (from /proc), root first."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (ppid := _parent(int(entry))) is not None:
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        out.append(pid)
        todo.extend(sorted(children.get(pid, [])))
    return out

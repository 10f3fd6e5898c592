"""Child processes: ending one that did not end by itself (SIGTERM, then SIGKILL after a grace period), ending
with the parent, finding every process below one (from /proc), a temporary directory short enough for the
Unix sockets through which they pass file descriptors, and what a child ending with os._exit must clean up itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

# The longest path an AF_UNIX socket binds to, in bytes: sun_path less its NUL (108 on Linux, 104 elsewhere).
SOCKET_PATH_MAX = 107 if sys.platform.startswith("linux") else 103
# What multiprocessing adds below the temporary directory for a socket: /pymp-XXXXXXXX/listener-XXXXXXXX. Sharing
# a CPU tensor through a queue passes its file descriptor over such a socket.
SOCKET_TAIL = len("/pymp-XXXXXXXX/listener-XXXXXXXX")
SHORT_TEMP_DIRS = ("/tmp", "/var/tmp")  # where the sockets go when the temporary directory is too long for them


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


def socket_temp_dir(temp_dir: str | None = None) -> str | None:
    """The directory for multiprocessing's sockets: the temporary directory (`temp_dir`, default TMPDIR's) when its
    sockets fit SOCKET_PATH_MAX, else the first writable one of SHORT_TEMP_DIRS; None when none fits."""
    for candidate in (temp_dir or tempfile.gettempdir(), *SHORT_TEMP_DIRS):
        if (len(os.fsencode(os.path.abspath(candidate))) + SOCKET_TAIL <= SOCKET_PATH_MAX
                and os.path.isdir(candidate) and os.access(candidate, os.W_OK | os.X_OK)):
            return candidate
    return None


_short_socket_dir: str | None = None  # what use_short_socket_dir made


def use_short_socket_dir() -> None:
    """Make this process's multiprocessing sockets fit (TMPDIR may be too long for them: `AF_UNIX path too long`
    as the first CPU tensor is queued): when the temporary directory is too long, multiprocessing's own
    directory is made under a short one now (remove_short_socket_dir removes it). Other temporary files stay where
    TMPDIR says."""
    global _short_socket_dir
    import multiprocessing.util

    temp_dir = tempfile.gettempdir()
    short = socket_temp_dir(temp_dir)
    if short is None or short == temp_dir:
        return
    saved = tempfile.tempdir
    tempfile.tempdir = short
    try:
        made = multiprocessing.util.get_temp_dir()  # kept for this process: its sockets go there
    finally:
        tempfile.tempdir = saved
    if os.path.dirname(made) == short:  # not one this process was handed (its parent's, which is not ours to remove)
        _short_socket_dir = made


def remove_short_socket_dir() -> None:
    """Remove what use_short_socket_dir made, for a process that ends with os._exit (multiprocessing's own
    clean-up runs at a normal exit only)."""
    import shutil

    if _short_socket_dir is not None:
        shutil.rmtree(_short_socket_dir, ignore_errors=True)


def unlink_own_semaphores() -> None:
    """Unlink the named semaphores this process created, for a process that ends with os._exit. multiprocessing
    unlinks them in its exit finalizers, which os._exit skips; left linked, the launcher's resource tracker (the
    children share it) reports them at its shutdown as "leaked semaphore objects". A library's lock made in a
    child (tqdm's, on first use) is one. Those handed down by the launcher (the queues' and events' locks) are
    the launcher's to unlink and have no finalizer here."""
    from multiprocessing import synchronize, util

    for finalizer in list(getattr(util, "_finalizer_registry", {}).values()):  # no public way to run only these
        if getattr(finalizer, "_callback", None) is synchronize.SemLock._cleanup:
            try:
                finalizer()
            except OSError:  # already unlinked: an error here must not keep the process from its exit
                pass

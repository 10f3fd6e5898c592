"""A child's standard error goes to a file in the run directory; only its `unilab:` lines reach the console.
And its exit, once everything is reported: at once, without the interpreter's teardown.

A child that dies in native code (an MPS server gone, a CUDA abort) prints pages of C++ frames on its
file descriptor 2; the launcher names the fault on the console and points at this file instead. The
file descriptor itself is redirected (the CUDA driver, Warp and torch's C++ write there, not through
`sys.stderr`); Python's `sys.stderr` writes every line to the file as well and forwards the lines that
start with CONSOLE_PREFIX (the package's own messages) to the console the child started with.
"""

from __future__ import annotations

import errno
import faulthandler
import io
import os
import signal
import sys
from pathlib import Path

from unilab.processes import remove_short_socket_dir, unlink_own_semaphores

LOG_DIR = "logs"
CONSOLE_PREFIX = "unilab:"


def stderr_log_name(name: str) -> str:
    """The run-directory path of a child's stderr: `learner[0]` -> logs/learner.stderr, rank r > 0 ->
    logs/learner_rank<r>.stderr."""
    role, _, rank = name.partition("[")
    rank = rank.rstrip("]")
    return f"{LOG_DIR}/{role}{'' if rank in ('', '0') else f'_rank{rank}'}.stderr"


class HangUpSafe(io.TextIOBase):
    """A console stream whose failed write (a terminal hung up: EIO; a pipe whose reader is gone: EPIPE) points
    its descriptor at /dev/null and drops the text: an ssh connection that closes mid-run would otherwise turn the
    next console line of a stopping process into a traceback, before its checkpoint or summary is written.
    Later writes (native code's, the interpreter's at exit) then go nowhere instead of failing too."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            self.stream.write(text)
        except OSError as exc:
            self._gone(exc)
        return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as exc:
            self._gone(exc)

    def _gone(self, exc: OSError) -> None:
        if exc.errno not in (errno.EIO, errno.EPIPE, errno.ENXIO):
            raise exc
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, self.stream.fileno())
        finally:
            os.close(null)
        try:  # what the stream still buffers goes there too
            self.stream.flush()
        except OSError:
            pass

    def fileno(self) -> int:
        return self.stream.fileno()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self):
        return getattr(self.stream, "encoding", None)

    def __getattr__(self, name: str):  # the rest of a text stream's interface (`buffer`, ...): the stream's
        if name == "stream":  # not set yet (a copy being made)
            raise AttributeError(name)
        return getattr(self.stream, name)


class _ConsoleLines(io.TextIOBase):
    """Every write into the log; the complete lines that start with CONSOLE_PREFIX onto the console too."""

    def __init__(self, log, console):
        self._log, self._console, self._partial = log, console, ""

    def write(self, text: str) -> int:
        self._log.write(text)
        self._partial += text
        *lines, self._partial = self._partial.split("\n")
        for line in lines:
            if line.startswith(CONSOLE_PREFIX):
                self._console.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self._log.flush()
        self._console.flush()

    def writable(self) -> bool:
        return True


def log_stderr(run_dir: str, name: str) -> Path:
    """Redirect this process's stderr (descriptor and `sys.stderr`) into the run directory's log of `name`."""
    path = Path(run_dir) / stderr_log_name(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    console = HangUpSafe(os.fdopen(os.dup(2), "w", buffering=1))
    log = open(path, "a", buffering=1)
    os.dup2(log.fileno(), 2)
    sys.stderr = _ConsoleLines(log, console)
    # a native crash leaves the Python stacks in the log too; SIGUSR1 dumps them on demand (a hang)
    faulthandler.enable(file=log, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=log, all_threads=True)
    return path


def leave(to_launcher, code: int) -> None:
    """End the child once its report is queued: flush the launcher queue, then exit without the interpreter's
    teardown. That teardown (garbage-collecting torch and Warp state) took seconds on a loaded host, and with
    NCCL collectives captured in CUDA graphs it hung; a child whose peer was killed must be gone within the
    launcher's DEAD_CHILD_GRACE_S."""
    to_launcher.close()
    to_launcher.join_thread()
    remove_short_socket_dir()
    unlink_own_semaphores()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

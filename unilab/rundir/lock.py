"""run.lock: the one launcher that owns a run directory.

The launcher takes an exclusive `flock` on <run dir>/run.lock before it touches anything else
there and holds it for the run's life (the kernel drops it when the process exits, however it
exits). A second `train` on the same directory (a resume of a run still training, or two resumes
at once) is refused, naming the holder's pid, which the holder writes into the file.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from .layout import LOCK_FILE


class RunDirLocked(RuntimeError):
    """Another process holds the run directory."""

    def __init__(self, run_dir: Path, pid: int | None):
        self.run_dir, self.pid = run_dir, pid
        holder = f"pid {pid}" if pid else "another process"
        super().__init__(f"{run_dir} is in use by {holder} (a run training there, or another resume of it): "
                         f"wait for it to end or stop it (kill -INT {pid or '<pid>'}) before starting it again")


class RunDirLock:
    """Held while the object lives (or until `release`); the file descriptor is not inherited by children."""

    def __init__(self, run_dir: str | os.PathLike):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._fd: int | None = None
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = holder_pid(self.path)
            os.close(fd)
            raise RunDirLocked(self.run_dir, pid) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __del__(self):
        self.release()


def holder_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None

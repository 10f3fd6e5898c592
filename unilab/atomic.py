"""Atomic file writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from pathlib import Path
from typing import Any


PROC_STATUS = "/proc/self/status"  # Linux (4.7 and later) shows the umask there


def _umask(folder: Path) -> int:
    """The process's umask, read without changing it: os.umask can only be read by setting it, and a file
    another thread creates before it is put back would get the wrong mode. From /proc where it is; else from
    the mode a probe file in `folder` is given."""
    try:
        with open(PROC_STATUS) as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    probe = Path(folder) / f".umask.{os.getpid()}.{secrets.token_hex(8)}"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o777)  # the kernel applies the umask
    try:
        return 0o777 & ~os.fstat(fd).st_mode
    finally:
        os.close(fd)
        probe.unlink()


def write_json_atomic(path: str | os.PathLike, payload: Any) -> Path:
    path = Path(path)
    # The temporary file sits next to the target, so the rename stays on one file system (atomic);
    # fsync first, so a crash right after the rename cannot leave an empty file under the new name.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        # mkstemp creates 0600; evidence files follow the umask like metrics and checkpoints (another
        # user may read them, e.g. `unilab config diff`).
        os.fchmod(fd, 0o666 & ~_umask(path.parent))
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=2, sort_keys=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path

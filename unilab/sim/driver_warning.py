"""Warp's "no CUDA driver" warning, dropped where no CUDA is wanted.

`wp.init()` always looks for the NVIDIA driver, and on a host without one its native code prints
"Warp CUDA warning: Could not find or load the NVIDIA CUDA driver. GPU execution will not be available." to the
process's standard error (C `fprintf`, not Python's warnings, so no Python filter reaches it). A process that
simulates on the CPU does not need the driver, and the line only alarms. Warp has no setting that skips the
look-up, so for a CPU device the standard error of `wp.init()` goes through a file and comes back without that
one line; every other line (a real error) is written back as it was. A CUDA device keeps the warning: there it
is the reason the run cannot start.
"""

from __future__ import annotations

import os
import sys
import tempfile
from contextlib import contextmanager

DRIVER_WARNING = "Warp CUDA warning: Could not find or load the NVIDIA CUDA driver"


@contextmanager
def without_driver_warning(cpu: bool):
    """Inside: what the process writes to file descriptor 2 is held back, then written without the warning.
    `cpu` False: nothing changes."""
    if not cpu:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as held:
            os.dup2(held.fileno(), 2)
            try:
                yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                held.seek(0)
                kept = [line for line in held.read().splitlines(keepends=True) if DRIVER_WARNING.encode() not in line]
                if kept:
                    os.write(2, b"".join(kept))
    finally:
        os.close(saved)

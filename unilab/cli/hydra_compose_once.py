"""Where Hydra composes the same config twice, `train` has it compose once.

- The run mode. Before it runs an app, Hydra composes the entire config once only to read `hydra.mode`, then
  composes it again to run. `train`'s config files never set `hydra.mode` (conf/train.yaml), so only an override
  can: reading it from the overrides gives Hydra the same answer.
- A sweep's jobs. Before it launches a batch, Hydra's sweeper composes every job to catch composition errors
  early, and the launcher then composes each again. `train -m` already composes and validates every job in its
  check pass before it launches any (unilab/cli/train.py), so that early look is done once there.

Where Hydra no longer has a method these replace, it is left alone.
"""

from __future__ import annotations

import importlib
from contextlib import contextmanager
from typing import Iterator, Optional

MODE_KEY = "hydra.mode"


def mode_in(overrides: list[str]) -> Optional[str]:
    """The run mode the last `hydra.mode=` override names (RUN or MULTIRUN), None where none does or it is not
    a mode: what Hydra's own look-up returns then (a bad value fails in the composition that runs)."""
    mode = None
    for arg in overrides:
        key, eq, value = arg.lstrip("+").partition("=")
        if eq and key == MODE_KEY:
            named = value.strip().upper()
            mode = named if named in ("RUN", "MULTIRUN") else None
    return mode


@contextmanager
def mode_from_overrides() -> Iterator[None]:
    """While the app starts, Hydra's mode look-up reads the overrides it is given rather than composing."""

    def get_mode(self, config_name, overrides):  # noqa: ARG001 (Hydra's signature)
        from hydra.types import RunMode

        mode = mode_in(list(overrides))
        return None if mode is None else RunMode[mode]

    with _replaced("hydra._internal.hydra", "Hydra", "get_mode", get_mode):
        yield


@contextmanager
def jobs_composed_by_the_launcher() -> Iterator[None]:
    """While a sweep runs, the sweeper leaves the composition of its jobs to the launcher: a job that does not
    compose fails there, before the check pass launches anything."""
    with _replaced("hydra.plugins.sweeper", "Sweeper", "validate_batch_is_legal", lambda self, batch: None):
        yield


@contextmanager
def _replaced(module: str, owner: str, method: str, replacement) -> Iterator[None]:
    """`owner.method` of Hydra's `module` replaced while the block runs; left alone where Hydra lacks it."""
    try:
        cls = getattr(importlib.import_module(module), owner)
    except (ImportError, AttributeError):
        cls = None
    original = getattr(cls, method, None)
    if original is None:
        yield
        return
    setattr(cls, method, replacement)
    try:
        yield
    finally:
        setattr(cls, method, original)

"""Hydra's run mode read from the command line, instead of from a whole composed config.

Before it runs an app, Hydra composes the entire config once only to read `hydra.mode`, then composes it again
to run. `train`'s config files never set `hydra.mode` (conf/train.yaml), so only an override can: reading it
from the overrides gives Hydra the same answer and spares one of the two compositions of every `train`. Where
Hydra no longer has the method this replaces, it is left alone.
"""

from __future__ import annotations

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
    try:
        from hydra._internal.hydra import Hydra
        from hydra.types import RunMode
    except ImportError:
        yield
        return
    original = getattr(Hydra, "get_mode", None)
    if original is None:
        yield
        return

    def get_mode(self, config_name, overrides):  # noqa: ARG001 (Hydra's signature)
        mode = mode_in(list(overrides))
        return None if mode is None else RunMode[mode]

    Hydra.get_mode = get_mode
    try:
        yield
    finally:
        Hydra.get_mode = original

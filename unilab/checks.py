"""Range checks the config schemas run in their `__post_init__` (plain Python: the schemas stay importable
without torch, warp or mujoco). A failed check raises ValueError naming the key, its value and what is
allowed; `train` prints it and exits 2 before anything is created."""

from __future__ import annotations

import math
from typing import Any, Iterable


def require(ok: bool, key: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ValueError(f"{key}={value!r}: expected {allowed}")


def at_least_one(prefix: str, cfg: Any, names: Iterable[str]) -> None:
    """Each of `names` (integer fields of `cfg`) is >= 1."""
    for name in names:
        value = getattr(cfg, name)
        require(isinstance(value, int) and value >= 1, f"{prefix}.{name}", value, "an integer >= 1")


def positive_finite(key: str, value: float) -> None:
    require(math.isfinite(value) and value > 0, key, value, "a finite number > 0")


def one_of(key: str, value: Any, allowed: Iterable[str]) -> None:
    allowed = tuple(allowed)
    require(value in allowed, key, value, "one of " + ", ".join(allowed))

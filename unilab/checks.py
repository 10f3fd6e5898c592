"""Range checks the config schemas run in their `__post_init__` (plain Python: the schemas stay importable
without torch, warp or mujoco). A failed check raises ValueError naming the key, its value and what is
allowed; `train` prints it and exits 2 before anything is created.

Every number a schema takes has a range here, upper bounds included: a value past them (1e300, a huge
integer) is no setting anyone means, and it would fail late, in a child, or not at all (an overflowing
float32 reward turns the run's numbers into NaN)."""

from __future__ import annotations

import math
from typing import Any, Iterable

# A week: waits longer than that are no timeout anyone means, and Python's waits refuse timeouts past
# threading.TIMEOUT_MAX (OverflowError) where torch's would overflow their own clocks.
MAX_WAIT_S = 7 * 24 * 3600.0


def require(ok: bool, key: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ValueError(f"{key}={value!r}: expected {allowed}")


def is_number(value: Any) -> bool:
    """An int or float, not a bool (OmegaConf keeps True a bool; a bool is no count or size)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def at_least_one(prefix: str, cfg: Any, names: Iterable[str]) -> None:
    """Each of `names` (integer fields of `cfg`) is >= 1."""
    for name in names:
        value = getattr(cfg, name)
        require(is_integer(value) and value >= 1, f"{prefix}.{name}", value, "an integer >= 1")


def integer_in(key: str, value: Any, low: int, high: int, what: str = "") -> None:
    """An integer in [low, high]; `what` says what it counts."""
    require(is_integer(value) and low <= value <= high, key, value,
            f"an integer in [{low}, {high}]" + (f" ({what})" if what else ""))


def number_in(key: str, value: Any, low: float, high: float, what: str = "", *, low_open: bool = False) -> None:
    """A finite number in [low, high] ((low, high] with `low_open`); NaN and inf never pass."""
    ok = is_number(value) and math.isfinite(value) and (low < value if low_open else low <= value) and value <= high
    bounds = f"{'(' if low_open else '['}{low:g}, {high:g}]"
    require(ok, key, value, f"a number in {bounds}" + (f" ({what})" if what else ""))


def positive_finite(key: str, value: float) -> None:
    require(is_number(value) and math.isfinite(value) and value > 0, key, value, "a finite number > 0")


def non_negative(key: str, value: float, high: float = math.inf) -> None:
    ok = is_number(value) and math.isfinite(value) and 0 <= value <= high
    require(ok, key, value, "a finite number >= 0" + (f" and <= {high:g}" if math.isfinite(high) else ""))


def ordered_pair(key: str, pair: Any, low: float, high: float, *, low_open: bool = False) -> None:
    """[a, b] with low <= a <= b <= high (low < a with `low_open`), both finite."""
    ok = pair is not None and len(pair) == 2 and all(is_number(v) and math.isfinite(v) for v in pair)
    ok = ok and (low < pair[0] if low_open else low <= pair[0]) and pair[0] <= pair[1] <= high
    require(ok, key, None if pair is None else list(pair),
            f"[low, high] with {low:g} {'<' if low_open else '<='} low <= high <= {high:g}")


def text(key: str, value: Any, *, what: str = "a non-empty name") -> None:
    """A non-empty string without control characters (a NUL cannot be in a path, a newline breaks logs)."""
    ok = isinstance(value, str) and value.strip() != "" and all(ch.isprintable() for ch in value)
    require(ok, key, value, f"{what}, without control characters")


def one_of(key: str, value: Any, allowed: Iterable[str]) -> None:
    allowed = tuple(allowed)
    require(value in allowed, key, value, "one of " + ", ".join(allowed))


def fields_in(prefix: str, cfg: Any, low: float, high: float, what: str = "") -> None:
    """number_in for every field of the dataclass `cfg` (reward weights, noise widths)."""
    import dataclasses

    for f in dataclasses.fields(cfg):
        number_in(f"{prefix}.{f.name}", getattr(cfg, f.name), low, high, what)

"""`train -m ... hydra/launcher=unilab_packed`: the packed launcher's options, and what `train` checks about a packed
sweep before anything is created.

The options are Hydra's `hydra.launcher.*` keys (the launcher's node in the `hydra/launcher` group). Refused with
exit 2 before the check pass: a bad option, and a bench preset (`+bench=offpolicy_gate`), whose A/B gate runs its
arms one at a time so that it measures the execution mode and not the packing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from unilab.checks import require

LAUNCHER = "unilab_packed"
LAUNCHER_GROUP = "hydra/launcher"
OPTION_PREFIX = "hydra.launcher."


@dataclass
class PackedLauncherConf:
    """The node `hydra/launcher=unilab_packed` selects (Hydra instantiates `_target_` with the other fields)."""

    _target_: str = "hydra_plugins.unilab_packed_launcher.UnilabPackedLauncher"
    max_parallel: int = 2  # P: jobs running at once
    # MiB a job is expected to need on its GPU: the memory guard's floor, raised by the peaks it measures; the
    # default is a small walk run's measured peak with a margin (docs/en/many-runs.md)
    job_memory_mib: int = 4608
    # how long a job that does not fit waits for GPU memory before it fails (0: fail at once)
    memory_wait_s: float = 600.0


OPTIONS = tuple(name for name in PackedLauncherConf.__dataclass_fields__ if not name.startswith("_"))


def check_options(max_parallel: Any, job_memory_mib: Any, memory_wait_s: Any) -> None:
    """ValueError naming the key, its value and what is allowed."""
    require(_is_int(max_parallel) and max_parallel >= 1, f"{OPTION_PREFIX}max_parallel", max_parallel,
            "an integer >= 1")
    require(_is_int(job_memory_mib) and job_memory_mib >= 0, f"{OPTION_PREFIX}job_memory_mib", job_memory_mib,
            "an integer >= 0 (MiB)")
    require(isinstance(memory_wait_s, (int, float)) and not isinstance(memory_wait_s, bool)
            and math.isfinite(memory_wait_s) and memory_wait_s >= 0, f"{OPTION_PREFIX}memory_wait_s",
            memory_wait_s, "a finite number of seconds >= 0")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parsed(overrides: list[str]) -> list[tuple[str, Any, bool]]:
    """(key or group, value, is a sweep) of each override Hydra can parse (a sweep's value as written); the others
    are left to Hydra."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser, out = OverridesParser.create(), []
    for override in overrides:
        if override.startswith("-"):
            continue
        try:
            (o,) = parser.parse_overrides([override])
        except Exception:  # noqa: BLE001 - Hydra's own parse reports it with its context
            continue
        sweep = o.is_sweep_override()
        out.append((o.key_or_group, override.partition("=")[2] if sweep else o.value(), sweep))
    return out


def packed_options(overrides: list[str]) -> PackedLauncherConf | None:
    """The options of a packed sweep (None: the sweep is not packed). ValueError: an option is bad, or a bench
    preset is packed."""
    parsed = _parsed(overrides)
    if not any(key == LAUNCHER_GROUP and value == LAUNCHER for key, value, _ in parsed):
        ours = [f"{key}={value}" for key, value, _ in parsed if key in {OPTION_PREFIX + name for name in OPTIONS}]
        if ours and not any(key == LAUNCHER_GROUP for key, _, _ in parsed):  # Hydra's basic launcher has no such key
            raise ValueError(f"{ours[0]}: an option of the packed launcher; add {LAUNCHER_GROUP}={LAUNCHER}")
        return None
    options = PackedLauncherConf()
    for key, value, sweep in parsed:
        if key == "bench":
            raise ValueError(
                f"+bench={value}: the A/B gate runs its arms one at a time; packed beside each other they would "
                f"measure the packing, not the execution mode. Run it without hydra/launcher={LAUNCHER}")
        if not key.startswith(OPTION_PREFIX):
            continue
        name = key[len(OPTION_PREFIX):]
        require(name in OPTIONS, key, value, f"an option of {LAUNCHER}: " + ", ".join(OPTIONS))
        require(not sweep, key, value, "one value (a launcher option is not swept)")
        setattr(options, name, value)
    check_options(options.max_parallel, options.job_memory_mib, options.memory_wait_s)
    return options


def without_launcher(overrides: list[str]) -> list[str]:
    """The overrides less the launcher's: the check pass validates every job in this process, one after the
    other, whatever launcher runs them after."""
    kept = []
    for override in overrides:
        key = override.lstrip("+~").partition("=")[0]
        if key != LAUNCHER_GROUP and not key.startswith(OPTION_PREFIX):
            kept.append(override)
    return kept

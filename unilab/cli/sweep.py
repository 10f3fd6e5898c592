"""`train -m`: every job runs and is recorded; the sweep ends with a line per job and the worst job's status.

Hydra's basic sweeper and launcher stay in charge of expanding and running the jobs; the task function of a
sweep job returns an exit status instead of raising, so a failed job does not end the sweep (Hydra's launcher
stops at the first exception or SystemExit). An interrupted job (SIGINT/SIGTERM: exit 130) stops the sweep.

The exit status of `train -m` is 130 if the sweep was interrupted, otherwise the largest of its jobs'
(2: a job's configuration was refused, 1: a run failed, 0: every job completed).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field

from unilab.exit_codes import EXIT_COMPLETED, EXIT_INTERRUPTED, STATUS

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")  # `=`, `,` and `/` would not survive a later `training.run.resume=...`
MAX_SUFFIX = 120


@dataclass
class Job:
    index: int
    overrides: list[str]
    code: int | None = None
    run_dir: str | None = None
    refusal: str | None = None  # why its validation refused it (the message `train` prints)

    def line(self) -> str:
        status = STATUS.get(self.code, f"exit {self.code}") if self.code is not None else "not finished"
        where = self.run_dir or "no run directory"
        return f"  #{self.index} {' '.join(self.overrides) or '(no overrides)'} -> {status}, {where}"


@dataclass
class Sweep:
    """What one `train -m` ran. `swept_keys`: keys given several values on the command line; `dry_run`: the
    jobs are listed, not run."""

    swept_keys: set[str] = field(default_factory=set)
    dry_run: bool = False
    job_index: int | None = None  # a packed job's number in its sweep (its process runs it as a single run)
    jobs: list[Job] = field(default_factory=list)
    interrupted: bool = False

    def exit_code(self) -> int:
        if self.interrupted:
            return EXIT_INTERRUPTED
        return max((job.code or 0 for job in self.jobs), default=EXIT_COMPLETED)

    def summary(self) -> str:
        jobs = sorted(self.jobs, key=lambda job: job.index)  # a packed sweep records them as they end
        counts: dict[str, int] = {}
        for job in jobs:
            status = STATUS.get(job.code, "failed") if job.code is not None else "not finished"
            counts[status] = counts.get(status, 0) + 1
        head = f"unilab: sweep {'interrupted' if self.interrupted else 'done'}: " + ", ".join(
            f"{n} {status}" for status, n in counts.items())
        if self.interrupted:
            head += " (the jobs after the last one listed did not run)"
        return "\n".join([head, *(job.line() for job in jobs)])


_current: Sweep | None = None


def set_current(sweep: Sweep | None) -> None:
    global _current
    _current = sweep


def current() -> Sweep | None:
    """The sweep `train -m` is running: a launcher that runs its jobs in other processes records them here."""
    return _current


def sweep_keys(overrides: list[str]) -> set[str]:
    """Keys of the sweep overrides among command-line overrides (`a=1,2` -> {"a"}); {} if they do not parse
    (Hydra reports that itself)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides([o for o in overrides if not o.startswith("-")])
    except Exception:  # noqa: BLE001 - Hydra's own parse reports the error with its context
        return set()
    return {o.key_or_group for o in parsed if o.is_sweep_override()}


def swept_values(job_overrides: list[str], swept: set[str], params: dict | None) -> list[tuple[str, str]]:
    """(key, value) of this job for every swept key: the command line's and the sweeper's params' sweeps
    (e.g. `training.run.seed: 1,2` from +bench=offpolicy_gate), in the job's override order."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    keys = set(swept)
    for key, value in (params or {}).items():
        try:
            (o,) = parser.parse_overrides([f"{key}={value}"])
        except Exception:  # noqa: BLE001
            continue
        if o.is_sweep_override():
            keys.add(o.key_or_group)
    out = []
    for o in parser.parse_overrides(job_overrides):
        if o.key_or_group in keys and not o.is_sweep_override():
            out.append((o.key_or_group, o.get_value_element_as_str()))
    return out


def run_name_suffix(values: list[tuple[str, str]]) -> str:
    """`_execution-mps_seed-2`: the last part of each key (the whole key where two would clash), its value,
    characters a path or a later Hydra override would trip on replaced by `-`."""
    shorts = [key.rsplit(".", 1)[-1] for key, _ in values]
    parts = [f"{short if shorts.count(short) == 1 else key}-{value}" for (key, value), short in zip(values, shorts)]
    suffix = _UNSAFE.sub("-", "_".join(parts))[:MAX_SUFFIX]
    return f"_{suffix}" if suffix else ""


def print_summary(sweep: Sweep) -> None:
    if sweep.jobs or sweep.interrupted:
        print(sweep.summary(), file=sys.stderr)

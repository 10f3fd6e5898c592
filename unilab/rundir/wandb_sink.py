"""The Weights & Biases sink of the metrics rows (training.outputs.logger includes wandb; rank 0 only).

W&B is a side channel: metrics.jsonl stays the record, so any failure of wandb (import, init, log,
finish) prints one warning and turns the sink off instead of ending the run."""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Row keys that are not curves: the step is the iteration, and wall_clock_s stands in for the time stamp.
NOT_LOGGED = ("schema_version", "iteration", "time")
MAX_ID_LEN = 64


@dataclass(frozen=True)
class WandbSettings:
    project: str
    mode: str  # offline | online
    config: dict[str, Any]  # the resolved run config, shown with the run in W&B


def run_id(run_dir: str | Path) -> str:
    """A W&B run id from the run directory's name alone, so that a resumed run (the same directory)
    continues the same W&B run. W&B ids may not hold / \\ # ? % : and are at most 64 characters."""
    name = Path(run_dir).resolve().name
    safe = re.sub(r"[^A-Za-z0-9_.-]", "-", name) or "run"
    if len(safe) <= MAX_ID_LEN:
        return safe
    digest = hashlib.sha1(name.encode()).hexdigest()[:8]  # long names that share a prefix stay apart
    return f"{safe[:MAX_ID_LEN - 9]}-{digest}"


def numeric_fields(row: dict) -> dict[str, float | int]:
    """The curves of a metrics row: its numbers (nulls and text left out), env_steps included."""
    return {k: v for k, v in row.items()
            if k not in NOT_LOGGED and isinstance(v, (int, float)) and not isinstance(v, bool)}


class WandbSink:
    def __init__(self, run_dir: str | Path, settings: WandbSettings):
        self._run = None
        try:
            import wandb

            self._run = wandb.init(project=settings.project, name=Path(run_dir).resolve().name, dir=str(run_dir),
                                   mode=settings.mode, config=settings.config, id=run_id(run_dir),
                                   resume="allow")
        except Exception as exc:  # noqa: BLE001 - any wandb failure only turns the sink off
            self._off("init", exc)

    @property
    def active(self) -> bool:
        return self._run is not None

    def log(self, row: dict, wall_clock_s: float) -> None:
        if self._run is None:
            return
        try:
            self._run.log({**numeric_fields(row), "wall_clock_s": wall_clock_s}, step=int(row["iteration"]))
        except Exception as exc:  # noqa: BLE001
            self._off("log", exc)

    def close(self) -> None:
        if self._run is None:
            return
        run, self._run = self._run, None
        try:
            run.finish()
        except Exception as exc:  # noqa: BLE001
            self._off("finish", exc)

    def _off(self, what: str, exc: Exception) -> None:
        run, self._run = self._run, None
        print(f"unilab: warning: W&B logging off for the rest of the run (wandb {what} failed: "
              f"{type(exc).__name__}: {exc}); metrics.jsonl is still written", file=sys.stderr, flush=True)
        if run is not None and what == "log":
            try:  # release wandb's service process; its own failure is not worth a second line
                run.finish()
            except Exception:  # noqa: BLE001
                pass


def wandb_settings(spec: Any) -> WandbSettings:
    """The W&B settings of a run from its RoleSpec (training.outputs.wandb_project, training.outputs.wandb_mode)."""
    return WandbSettings(project=spec.training.outputs.wandb_project, mode=spec.training.outputs.wandb_mode,
                         config=spec.config.values)

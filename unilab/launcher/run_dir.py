"""Run directories under training.log_dir, created only after the execution probe passed."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path


def new_run_dir(log_dir: str, run_name: str | None, algo: str, task: str) -> Path:
    base = Path(log_dir).expanduser().resolve()
    name = run_name or f"{datetime.now():%Y-%m-%d_%H-%M-%S}_{algo}_{task}"
    for suffix in ("", *(f"_{i}" for i in range(1, 1000))):
        candidate = base / f"{name}{suffix}"
        try:
            candidate.mkdir(parents=True, exist_ok=False)
            return candidate
        except FileExistsError:
            continue
    raise FileExistsError(f"{base / name}: too many runs with this name")

"""Checkpoints under <run dir>/checkpoints; `training.resume` accepts a run dir or a file."""

from __future__ import annotations

import os
from pathlib import Path

CHECKPOINT_DIR = "checkpoints"
LATEST = "latest.pt"


def save_checkpoint(run_dir: str | Path, iteration: int, env_steps: int, learner_state: dict) -> Path:
    import torch

    folder = Path(run_dir) / CHECKPOINT_DIR
    folder.mkdir(exist_ok=True)
    path = folder / f"iter_{iteration:07d}.pt"
    tmp = path.with_suffix(".tmp")
    torch.save({"iteration": iteration, "env_steps": env_steps, "learner": learner_state}, tmp)
    os.replace(tmp, path)
    latest_tmp = folder / (LATEST + ".tmp")
    latest_tmp.unlink(missing_ok=True)
    os.symlink(path.name, latest_tmp)
    os.replace(latest_tmp, folder / LATEST)
    return path


def find_checkpoint(resume: str) -> Path:
    """A checkpoint file, or the latest checkpoint of a run directory."""
    path = Path(resume).expanduser()
    if path.is_dir():
        latest = path / CHECKPOINT_DIR / LATEST
        if latest.exists():
            return latest.resolve()
        found = sorted((path / CHECKPOINT_DIR).glob("iter_*.pt"))
        if not found:
            raise FileNotFoundError(f"training.resume={resume}: no checkpoint in {path / CHECKPOINT_DIR}")
        return found[-1]
    if path.is_file():
        return path
    raise FileNotFoundError(f"training.resume={resume}: no such run directory or checkpoint")


def run_dir_of(checkpoint: Path) -> Path:
    return checkpoint.resolve().parent.parent


def load_checkpoint(path: str | Path, device) -> dict:
    import torch

    return torch.load(path, map_location=device, weights_only=False)

"""Checkpoints under <run dir>/checkpoints; `training.resume` accepts a run dir or a file."""

from __future__ import annotations

import os
from pathlib import Path

from .layout import CHECKPOINT_DIR, CHECKPOINT_GLOB, LATEST_CHECKPOINT, checkpoint_name


def save_checkpoint(run_dir: str | Path, iteration: int, env_steps: int, learner_state: dict) -> Path:
    import torch

    folder = Path(run_dir) / CHECKPOINT_DIR
    folder.mkdir(exist_ok=True)
    path = folder / checkpoint_name(iteration)
    # Saved under a temporary name and renamed, and latest.pt re-pointed by renaming a new link over
    # it: a run killed mid-save still resumes from a whole checkpoint.
    tmp = path.with_suffix(".tmp")
    torch.save({"iteration": iteration, "env_steps": env_steps, "learner": learner_state}, tmp)
    os.replace(tmp, path)
    latest_tmp = folder / (LATEST_CHECKPOINT + ".tmp")
    latest_tmp.unlink(missing_ok=True)
    os.symlink(path.name, latest_tmp)
    os.replace(latest_tmp, folder / LATEST_CHECKPOINT)
    return path


def find_checkpoint(resume: str) -> Path:
    """A checkpoint file, or the latest checkpoint of a run directory."""
    path = Path(resume).expanduser()
    if path.is_dir():
        latest = path / CHECKPOINT_DIR / LATEST_CHECKPOINT
        if latest.exists():
            return latest.resolve()
        found = sorted((path / CHECKPOINT_DIR).glob(CHECKPOINT_GLOB))
        if not found:
            raise FileNotFoundError(f"training.resume={resume}: no checkpoint in {path / CHECKPOINT_DIR}")
        return found[-1]
    if path.is_file():
        return path
    raise FileNotFoundError(f"training.resume={resume}: no such run directory or checkpoint")


def run_dir_of(checkpoint: Path) -> Path:
    """<run dir>/checkpoints/<file> -> <run dir> (through the latest.pt link)."""
    return checkpoint.resolve().parent.parent


def load_checkpoint(path: str | Path, device) -> dict:
    import torch

    return torch.load(path, map_location=device, weights_only=False)

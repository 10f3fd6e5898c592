"""Checkpoints under <run dir>/checkpoints; `training.resume` accepts a run dir or a file."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .layout import CHECKPOINT_DIR, CHECKPOINT_GLOB, LATEST_CHECKPOINT, checkpoint_name


def save_checkpoint(run_dir: str | Path, iteration: int, env_steps: int, learner_state: dict,
                    meta: dict | None = None) -> Path:
    """meta: what the checkpoint was trained with ({"config": the structural keys, "dims": the sizes}),
    for the checks of a resume."""
    import torch

    folder = Path(run_dir) / CHECKPOINT_DIR
    folder.mkdir(exist_ok=True)
    path = folder / checkpoint_name(iteration)
    # Saved under a temporary name and renamed, and latest.pt re-pointed by renaming a new link over
    # it: a run killed mid-save still resumes from a whole checkpoint.
    tmp = path.with_suffix(".tmp")
    torch.save({"iteration": iteration, "env_steps": env_steps, "learner": learner_state, **(meta or {})}, tmp)
    os.replace(tmp, path)
    latest_tmp = folder / (LATEST_CHECKPOINT + ".tmp")
    latest_tmp.unlink(missing_ok=True)
    os.symlink(path.name, latest_tmp)
    os.replace(latest_tmp, folder / LATEST_CHECKPOINT)
    return path


@dataclass
class FoundCheckpoint:
    path: Path
    state: dict[str, Any]  # loaded on the CPU
    notes: list[str] = field(default_factory=list)  # e.g. a corrupt latest.pt passed over

    @property
    def iteration(self) -> int:
        return int(self.state["iteration"])


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint loaded on the CPU; ValueError when it is not a whole checkpoint."""
    try:
        state = load_checkpoint(path, "cpu")
        if not isinstance(state, dict) or not {"iteration", "env_steps", "learner"} <= set(state):
            raise ValueError("not a unilab checkpoint (iteration, env_steps, learner)")
        int(state["iteration"])
    except Exception as exc:  # torch raises RuntimeError, EOFError, pickle and zip errors for a torn file
        raise ValueError(f"{path}: unreadable checkpoint ({type(exc).__name__}: {exc})") from None
    return state


def find_checkpoint(resume: str) -> Path:
    """A checkpoint file, or the latest checkpoint of a run directory (not loaded: see find_intact_checkpoint)."""
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


def find_intact_checkpoint(resume: str) -> FoundCheckpoint:
    """A checkpoint file, or the latest intact checkpoint of a run directory: latest.pt, else the newest
    iter_*.pt that loads (with a note naming what was passed over). FileNotFoundError: none; ValueError:
    a named file that does not load."""
    path = Path(resume).expanduser()
    if path.is_file():
        return FoundCheckpoint(path.resolve(), read_checkpoint(path))
    if not path.is_dir():
        raise FileNotFoundError(f"training.resume={resume}: no such run directory or checkpoint")
    folder = path / CHECKPOINT_DIR
    candidates = []
    latest = folder / LATEST_CHECKPOINT
    if latest.exists():
        candidates.append(latest.resolve())
    candidates += [p for p in sorted(folder.glob(CHECKPOINT_GLOB), reverse=True) if p not in candidates]
    if not candidates:
        raise FileNotFoundError(f"training.resume={resume}: no checkpoint in {folder}")
    skipped = []
    for candidate in candidates:
        try:
            state = read_checkpoint(candidate)
        except ValueError as exc:
            skipped.append(str(exc))
            continue
        notes = [f"{reason}; resuming from {candidate.name} instead" for reason in skipped]
        return FoundCheckpoint(candidate, state, notes)
    raise FileNotFoundError(f"training.resume={resume}: no intact checkpoint in {folder}:\n  " + "\n  ".join(skipped))


def run_dir_of(checkpoint: Path) -> Path:
    """<run dir>/checkpoints/<file> -> <run dir> (through the latest.pt link)."""
    return checkpoint.resolve().parent.parent


def load_checkpoint(path: str | Path, device) -> dict:
    import torch

    return torch.load(path, map_location=device, weights_only=False)

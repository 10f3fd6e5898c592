"""Checkpoints under <run dir>/checkpoints; `training.resume` accepts a run dir or a file."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .layout import CHECKPOINT_DIR, CHECKPOINT_GLOB, LATEST_CHECKPOINT, checkpoint_name


class CheckpointNotWritten(OSError):
    """A checkpoint that could not be written for want of room (a full disk or quota): says where."""

    def __init__(self, errno_: int, message: str):
        super().__init__(message)  # one argument: str() is the message alone, without "[Errno N]"
        self.errno = errno_


def save_checkpoint(run_dir: str | Path, iteration: int, env_steps: int, learner_state: dict,
                    meta: dict | None = None) -> Path:
    """meta: what the checkpoint was trained with ({"config": the structural keys, "dims": the sizes}),
    for the checks of a resume. A save that fails leaves no partial file and the previous checkpoints as
    they were; for want of room it raises CheckpointNotWritten naming the file system."""
    import torch

    folder = Path(run_dir) / CHECKPOINT_DIR
    folder.mkdir(exist_ok=True)
    path = folder / checkpoint_name(iteration)
    # Saved under a temporary name and renamed, and latest.pt re-pointed by renaming a new link over
    # it: a run killed mid-save still resumes from a whole checkpoint.
    tmp = path.with_suffix(".tmp")
    try:
        # Into a file object, not a path: a failed write then raises its OSError (ENOSPC), where torch's own
        # writer would only say "inline_container.cc ... unexpected pos".
        with open(tmp, "wb") as f:
            torch.save({"iteration": iteration, "env_steps": env_steps, "learner": learner_state, **(meta or {})}, f)
            f.flush()
            os.fsync(f.fileno())  # a full disk may only say so here; and no empty file after a crash
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)  # the partial file would hold the room run_summary.json needs
        _raise_if_no_room(exc, folder, f"checkpoint {path.stem} not written")
        raise
    latest_tmp = folder / (LATEST_CHECKPOINT + ".tmp")
    try:
        latest_tmp.unlink(missing_ok=True)
        os.symlink(path.name, latest_tmp)
        os.replace(latest_tmp, folder / LATEST_CHECKPOINT)
    except OSError as exc:
        latest_tmp.unlink(missing_ok=True)
        _raise_if_no_room(exc, folder, f"checkpoint {path.stem} written, but {LATEST_CHECKPOINT} still names the "
                                       "one before it")
        raise
    return path


_NO_ROOM = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}


def _raise_if_no_room(exc: BaseException, folder: Path, what: str) -> None:
    """A failed save for want of room (the OSError itself, or what torch raised with it as its context):
    CheckpointNotWritten naming the file system that is full."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _NO_ROOM:
            raise CheckpointNotWritten(exc.errno, f"{_NO_ROOM[exc.errno]} on {mount_point(folder)}: {what}") from exc
        exc = exc.__cause__ or exc.__context__


def mount_point(path: Path) -> Path:
    """The mount point of the file system that holds `path` (an existing path)."""
    path = path.resolve()
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
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

"""Checkpoints under <run dir>/checkpoints; `training.run.resume` accepts a run dir or a file.

A checkpoint is read with torch's weights-only unpickler: tensors, numbers, strings, lists, tuples and
dicts, which is all unilab writes. A file that names any other Python global (a class, or a function such
as os.system that a crafted pickle would call) is refused before anything in it runs (docs/en/trust-model.md).
"""

from __future__ import annotations

import errno
import os
import re
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


class UnsafeCheckpoint(ValueError):
    """A checkpoint that names Python globals besides tensors and plain data: refused, never loaded."""


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint loaded on the CPU; ValueError when it is not a whole checkpoint (UnsafeCheckpoint
    when it holds more than data)."""
    try:
        state = load_checkpoint(path, "cpu")
        if not isinstance(state, dict) or not {"iteration", "env_steps", "learner"} <= set(state):
            raise ValueError("not a unilab checkpoint (iteration, env_steps, learner)")
        int(state["iteration"])
    except UnsafeCheckpoint:
        raise
    except Exception as exc:  # torch raises RuntimeError, EOFError, pickle and zip errors for a torn file
        raise ValueError(f"{path}: unreadable checkpoint ({type(exc).__name__}: {exc})") from None
    return state


def find_checkpoint(resume: str) -> Path:
    """A checkpoint file, or the latest checkpoint of a run directory (not loaded: see find_intact_checkpoint)."""
    path = Path(resume).expanduser()
    if path.is_dir():
        latest = latest_target(path / CHECKPOINT_DIR)
        if latest is not None:
            return latest
        found = sorted((path / CHECKPOINT_DIR).glob(CHECKPOINT_GLOB))
        if not found:
            raise FileNotFoundError(f"training.run.resume={resume}: no checkpoint in {path / CHECKPOINT_DIR}")
        return found[-1]
    if path.is_file():
        return path
    raise FileNotFoundError(f"training.run.resume={resume}: no such run directory or checkpoint")


def latest_target(folder: Path) -> Path | None:
    """The file latest.pt in `folder` links to, None without one. ValueError for a link that leads out of the
    folder: unilab links it to a file beside it, and a run directory's latest.pt that named another run's
    checkpoint would have a resume continue, or play, eval and export read, that other run."""
    latest = folder / LATEST_CHECKPOINT
    if not latest.exists():
        return None
    target = latest.resolve()
    if target.parent != folder.resolve():
        raise ValueError(f"{latest} leads out of {folder} (to {target}): unilab links it to a checkpoint beside "
                         "it; remove it to use the newest iter_*.pt there")
    return target


def find_intact_checkpoint(resume: str) -> FoundCheckpoint:
    """A checkpoint file, or the latest intact checkpoint of a run directory: latest.pt, else the newest
    iter_*.pt that loads (with a note naming what was passed over). FileNotFoundError: none; ValueError:
    a named file that does not load."""
    path = Path(resume).expanduser()
    if path.is_file():
        return FoundCheckpoint(path.resolve(), read_checkpoint(path))
    if not path.is_dir():
        raise FileNotFoundError(f"training.run.resume={resume}: no such run directory or checkpoint")
    folder = path / CHECKPOINT_DIR
    candidates = []
    latest = latest_target(folder)
    if latest is not None:
        candidates.append(latest)
    candidates += [p for p in sorted(folder.glob(CHECKPOINT_GLOB), reverse=True) if p not in candidates]
    if not candidates:
        raise FileNotFoundError(f"training.run.resume={resume}: no checkpoint in {folder}")
    skipped = []
    for candidate in candidates:
        try:
            state = read_checkpoint(candidate)
        except UnsafeCheckpoint:
            raise  # not a torn save to step over: someone put it there
        except ValueError as exc:
            skipped.append(str(exc))
            continue
        notes = [f"{reason}; resuming from {candidate.name} instead" for reason in skipped]
        return FoundCheckpoint(candidate, state, notes)
    raise FileNotFoundError(f"training.run.resume={resume}: no intact checkpoint in {folder}:\n  "
                            + "\n  ".join(skipped))


def prune_checkpoints(run_dir: str | Path, keep: int | None, newest: Path) -> list[str]:
    """training.outputs.keep_checkpoints: once `newest` is saved (latest.pt points to it), remove the iter_N.pt files
    beyond the `keep` newest at or below its iteration (None: keep every one); their names. latest.pt's file
    always stays; files of later iterations (from before a resume from an earlier checkpoint, which overwrites
    them as it reaches them) are left alone."""
    if not keep:
        return []
    folder = Path(run_dir) / CHECKPOINT_DIR
    latest = folder / LATEST_CHECKPOINT
    kept = {newest.name, latest.resolve().name if latest.exists() else newest.name}
    limit = _iteration(newest.name)
    saved = sorted((n, p) for p in folder.glob(CHECKPOINT_GLOB) if (n := _iteration(p.name)) is not None and n <= limit)
    removed = []
    for _, path in saved[:max(len(saved) - keep, 0)]:
        if path.name not in kept:
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed


def _iteration(name: str) -> int | None:
    match = re.fullmatch(r"iter_(\d+)\.pt", name)
    return int(match.group(1)) if match else None


def remove_partial_saves(run_dir: str | Path) -> list[str]:
    """Remove what saves cut short left in checkpoints/ (an iter_N.tmp or latest.pt.tmp, from a run killed
    between the write and the rename: it would stay until that iteration is saved again); their names.
    A resume calls it, under the run directory's lock."""
    removed = []
    for tmp in sorted((Path(run_dir) / CHECKPOINT_DIR).glob("*.tmp")):
        if tmp.is_symlink() or tmp.is_file():
            tmp.unlink()
            removed.append(tmp.name)
    return removed


def run_dir_of(checkpoint: Path) -> Path:
    """<run dir>/checkpoints/<file> -> <run dir> (through the latest.pt link)."""
    return checkpoint.resolve().parent.parent


def load_checkpoint(path: str | Path, device) -> dict:
    """The checkpoint on `device`, read by torch's weights-only unpickler. UnsafeCheckpoint, naming the
    globals found, for a file that names any beyond tensors and plain data (nothing in it has run);
    torch's own errors for a file that is torn or no checkpoint at all."""
    import pickle

    import torch

    try:
        return torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as exc:
        if "Weights only load failed" not in str(exc):
            raise
        found = _foreign_globals(path, str(exc))
        if not found:  # torn, or no pickle at all: torch's reason, without its advice to load it unsafely
            reason = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", str(exc))
            raise pickle.UnpicklingError(reason.group(1) if reason else "not a pickle of plain data") from None
        named = ("the Python global " if len(found) == 1 else "the Python globals ") + ", ".join(found)
        raise UnsafeCheckpoint(
            f"{path}: refused: it names {named}; a unilab checkpoint holds only tensors and plain data "
            "(numbers, strings, lists, dicts). Nothing in the file was run") from None


def _foreign_globals(path: str | Path, error: str) -> list[str]:
    """The Python globals the file names beyond those the weights-only unpickler allows, read from the
    pickle's opcodes (nothing is run); else those torch's error names."""
    from torch.serialization import get_unsafe_globals_in_checkpoint

    try:
        found = get_unsafe_globals_in_checkpoint(path)
    except Exception:  # noqa: BLE001  (a legacy or torn file: torch's error still names the global it met)
        found = re.findall(r"GLOBAL ([\w.]+)", error)
    return sorted(set(found))

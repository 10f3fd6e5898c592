"""Resuming a run, in one place: the checks the launcher makes before it touches the run directory
(`resume_target`, run under the directory's lock), what it notes and clears once they passed (`lost_rows`,
`clear_partial_saves`), the point it hands both roles (`ResumePoint`), what each
checkpoint records for those checks (`weights_record`) and the learner's side (`restore`, `refill_target`).

ResumePoint is read once by the launcher, after every check, and handed to both roles, so that the learner's
restore, the metrics' truncation and the collector's clip numbering agree on one iteration. The checks that
need the config or the learner's code stay with their callers: the config's validation, and the fit of the
weights into this config's learner (launcher.prepare, passed in as `fits`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .checkpoint import (FoundCheckpoint, find_checkpoint, find_intact_checkpoint, load_checkpoint,
                         remove_partial_saves, run_dir_of)
from .layout import CHECKPOINT_DIR, METRICS_FILE, is_run_dir
from .metrics import MetricsError, read_metrics, rows_lost_before
from .run_config import load_run_config, structure_diff, structure_of

# The sizes a checkpoint's weights were built for (the collector's Dims names them alike).
DIMS = ("obs_dim", "critic_obs_dim", "action_dim")


class ResumeRefused(ValueError):
    """A resume this run cannot make: the message names the setting (training.run.resume=...), why, and what to do."""


@dataclass(frozen=True)
class ResumePoint:
    checkpoint: str  # the intact checkpoint the learner restores
    iteration: int  # the iteration it was saved at: the run goes on from here


@dataclass
class ResumeTarget:
    """A checked resume: the run directory it continues and the checkpoint it goes on from."""

    run_dir: Path
    checkpoint: str
    iteration: int
    notes: list[str]  # e.g. a corrupt latest.pt passed over


def resume_dir(resume: str) -> Path:
    """The run directory a resume continues (the checkpoints are not read yet): ResumeRefused otherwise."""
    try:
        checkpoint = find_checkpoint(resume)
    except (FileNotFoundError, ValueError) as exc:  # ValueError: a latest.pt leading out of checkpoints/
        raise ResumeRefused(str(exc)) from exc
    return _run_dir(resume, checkpoint)


def resume_target(resume: str, config_values: dict[str, Any], max_iterations: int,
                  fits: Callable[[FoundCheckpoint], None]) -> ResumeTarget:
    """Everything a resume needs, checked in this order before the run directory is touched (ResumeRefused
    otherwise): an intact checkpoint in a unilab run directory, trained with this config's network and task;
    `fits` (the caller's check that the weights load into this config's learner); an iteration below
    `max_iterations`; and every rank's metrics.jsonl readable."""
    try:
        found = find_intact_checkpoint(resume)
    except (FileNotFoundError, ValueError) as exc:
        raise ResumeRefused(str(exc)) from exc
    run_dir = _run_dir(resume, found.path)
    _check_structure(resume, found, run_dir, config_values)
    fits(found)
    if max_iterations <= found.iteration:
        raise ResumeRefused(f"training.run.resume={resume}: algo.max_iterations={max_iterations} but {found.path.name} "
                            f"is at iteration {found.iteration}: set algo.max_iterations above {found.iteration}")
    _check_metrics(run_dir, resume)
    return ResumeTarget(run_dir, str(found.path), found.iteration, found.notes)


def _run_dir(resume: str, checkpoint: Path) -> Path:
    run_dir = run_dir_of(checkpoint)
    if not is_run_dir(run_dir):
        raise ResumeRefused(f"training.run.resume={resume}: {run_dir} is not a unilab run directory")
    return run_dir


def _check_structure(resume: str, found: FoundCheckpoint, run_dir: Path, config_values: dict[str, Any]) -> None:
    """The checkpoint's own record of what shaped it (a checkpoint from before that record: its run's config)
    must match this config's."""
    try:
        theirs = found.state.get("config") or structure_of(load_run_config(run_dir))
    except ValueError as exc:
        raise ResumeRefused(f"training.run.resume={resume}: {exc}") from exc
    differing = structure_diff(theirs, structure_of(config_values))
    if differing:
        raise ResumeRefused(f"training.run.resume={resume}: {found.path.name} was trained with another network or "
                            "task; resume with the checkpoint's values (or start a new run):\n    "
                            + "\n    ".join(differing))


def _check_metrics(run_dir: Path, resume: str) -> None:
    """Every rank's metrics.jsonl reads (a torn last line, from a run killed mid-write, is dropped at the resume)."""
    for metrics in sorted(run_dir.glob(f"**/{METRICS_FILE}")):
        try:
            read_metrics(metrics.parent, torn_tail_ok=True)
        except (MetricsError, OSError, UnicodeDecodeError) as exc:
            raise ResumeRefused(f"training.run.resume={resume}: {exc}; repair or remove that line to resume") from exc


def lost_rows(target: ResumeTarget) -> list[str]:
    """A note for each rank's metrics.jsonl whose rows stop short of the resumed checkpoint (a torn last line,
    rows not written before a kill, a deleted file): that history is lost, and the resume says so."""
    notes = []
    run_dir = target.run_dir
    for metrics in sorted({run_dir / METRICS_FILE, *run_dir.glob(f"**/{METRICS_FILE}")}):  # rank 0's, even gone
        try:
            lost = rows_lost_before(metrics.parent, target.iteration)
        except (MetricsError, OSError, UnicodeDecodeError):  # refused by _check_metrics already
            continue
        if lost:
            notes.append(f"{metrics.relative_to(run_dir)}: {lost}; resuming from checkpoint "
                         f"{Path(target.checkpoint).name}")
    return notes


def clear_partial_saves(target: ResumeTarget) -> list[str]:
    """Remove the temporary files of saves cut short (under the run directory's lock); a note naming them."""
    removed = remove_partial_saves(target.run_dir)
    if not removed:
        return []
    return [f"removed {', '.join(removed)} from {CHECKPOINT_DIR}/: left by a save that was cut short"]


def weights_record(config_values: dict[str, Any], dims: Any) -> dict:
    """What shaped the weights, saved with every checkpoint for the checks of a resume: the config's structural
    keys (resume_target) and the observation and action sizes (`dims`' DIMS, checked by restore)."""
    return {"config": structure_of(config_values), "dims": {k: getattr(dims, k) for k in DIMS}}


def restore(learner: Any, point: ResumePoint, device: Any, dims: dict[str, int]) -> tuple[int, int]:
    """Load the checkpoint into `learner` (after check_dims): the iteration and env steps it was saved at."""
    state = load_checkpoint(point.checkpoint, device)
    check_dims(state, dims, point.checkpoint)
    learner.load_state_dict(state["learner"])
    return int(state["iteration"]), int(state["env_steps"])


def check_dims(state: dict, dims: dict, path: str) -> None:
    """A checkpoint whose observation or action sizes differ from this run's is refused: loading it would
    zero-pad or crop the weights silently (old checkpoints without the record are checked by load_state_dict)."""
    saved = state.get("dims")
    if not saved:
        return
    differing = [f"{k}: checkpoint {saved.get(k)}, now {v}" for k, v in dims.items() if saved.get(k) != v]
    if differing:
        raise ValueError(f"{path} was trained with other observation/action sizes ({'; '.join(differing)}): "
                         "resume it with the task settings it was trained with, or start a new run")


def refill_target(capacity: int, fraction: float, collectable: int) -> int:
    """Transitions a resumed run collects before its first update: `fraction` of the replay, capped at half
    of what the remaining iterations collect, so the resumed segment trains for at least its second half."""
    return max(0, min(int(capacity * fraction), capacity, collectable // 2))

"""From a validated request to a prepared run: run directory (new, or the one a resume continues),
run_config.json and runtime_manifest.json. Under torchrun or srun this launcher is one rank's: rank 0 takes the
run directory, rank r > 0 its rank_<r>/ in it (unilab.rundir.ranks).

Every check of the request ran while the config was composed (unilab.config.validation), so a request that
cannot be honoured never gets here. What is checked here needs the run directory: a resume's checkpoint
and metrics, read under the directory's lock; a log_dir that cannot be written.
"""

from __future__ import annotations

import errno
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unilab.config.run import RunConfig
from unilab.config.validation import ConfigError, ValidatedRequest
from unilab.mps.record import CudaProcessSharingEvidence
from unilab.rundir.create import archive_segment, new_run_dir
from unilab.rundir.layout import is_run_dir, rank_dir
from unilab.rundir.manifest import RuntimeManifest
from unilab.rundir.provenance import source_evidence, version_evidence
from unilab.rundir.resume import (ResumePoint, ResumeRefused, ResumeTarget, clear_partial_saves, lost_rows,
                                  resume_dir, resume_target)
from unilab.rundir.run_config import write_run_config
from unilab.world import DistributedContext


@dataclass
class PreparedRun:
    run_dir: Path
    config: RunConfig
    manifest: RuntimeManifest
    resume: ResumePoint | None = None  # a resumed run: the checkpoint it goes on from
    rank_devices: list[str] | None = None
    rank_evidence: list[CudaProcessSharingEvidence] | None = None
    role_mps_env: dict[str, dict[str, str]] = field(default_factory=dict)  # role -> CUDA_MPS_* variables
    lock: Any = None  # the RunDirLock on run.lock: held while this object lives (the launcher's life)
    notes: list[str] = field(default_factory=list)  # for run_summary.json (e.g. a corrupt latest.pt passed over)
    world: DistributedContext | None = None  # torchrun or srun: the one rank this launcher starts
    own_dir: Path | None = None  # where this launcher writes its manifest, summary and lock (default: run_dir)

    def __post_init__(self) -> None:
        self.own_dir = self.own_dir or self.run_dir


def _check_fit(found, config: RunConfig, resume: str) -> None:
    """The checkpoint's learner state loads into this config's learner, built on the CPU for the sizes the
    checkpoint records: the check of play, eval and export, here before segments/ is archived rather than
    in the learner after. A checkpoint from before that record is left to the learner's own load."""
    import dataclasses

    from unilab.runtime.play import fitted_learner

    dims = found.state.get("dims")
    if not dims:
        return
    # Loading is all it does: a one-row replay, nothing compiled.
    algo = dataclasses.replace(config.algo, replay_capacity=1, compile=False)
    try:
        sizes = (int(dims["obs_dim"]), int(dims["critic_obs_dim"]), int(dims["action_dim"]))
        fitted_learner(algo, sizes, found.state, found.path, config.task.name, "cpu", 0)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"training.run.resume={resume}: {exc}; resume from a checkpoint of this run "
                          "(or start a new run)") from None


def _resume_target(resume: str, config: RunConfig) -> ResumeTarget:
    """Everything a resume needs, checked before the run directory is touched (ConfigError otherwise): the checks
    of unilab.rundir.resume, with this config's learner's fit in their order."""
    try:
        return resume_target(resume, config.values, config.algo.max_iterations,
                             fits=lambda found: _check_fit(found, config, resume))
    except ResumeRefused as exc:
        raise ConfigError(str(exc)) from exc


def _lock(run_dir: Path):
    from unilab.rundir.lock import RunDirLock, RunDirLocked

    try:
        return RunDirLock(run_dir)
    except RunDirLocked as exc:
        raise ConfigError(str(exc)) from exc


def _new_run_dir(config: RunConfig, name_suffix: str = "") -> Path:
    """A new run directory; a log_dir that is a file or cannot be written is a usage error (exit 2)."""
    training = config.training
    try:
        return new_run_dir(training.run.log_dir, training.run.run_name, config.algo.name, config.task.name, name_suffix)
    except OSError as exc:
        fix = ("choose a shorter training.run.run_name (this file system takes shorter names)"
               if exc.errno == errno.ENAMETOOLONG else "set training.run.log_dir to a writable directory")
        raise ConfigError(f"training.run.log_dir={training.run.log_dir}: {exc.strerror or exc}; {fix}") from None


def prepare_run(request: ValidatedRequest, name_suffix: str = "") -> PreparedRun:
    """The run directory and its evidence files for a request every check passed (unilab.config.validation).
    `name_suffix`: appended to the default run name (a sweep job's swept values), not to training.run.run_name."""
    config, world = request.config, request.world
    if world is not None:
        run_dir, own_dir, lock = _claim_rank_dir(config, world)
        target = None
    else:
        run_dir, lock, target = _claim_run_dir(config, name_suffix)
        own_dir = run_dir
    try:
        if target is not None:
            target.notes += lost_rows(target)
            _say(target.notes)
            archive_segment(run_dir)
            cleared = clear_partial_saves(target)
            _say(cleared)
            target.notes += cleared
        write_run_config(own_dir, config.values)
        manifest = RuntimeManifest(
            run_dir=str(run_dir),
            algo=config.algo.name,
            task=config.task.name,
            backend=config.sim.backend,
            world_size=world.world_size if world else len(request.rank_devices),
            launched_by=world.launched_by if world else "train",
            source=source_evidence(),
            versions=version_evidence(),
            cuda_process_sharing=request.evidence,
        )
        manifest.write(own_dir)
    except BaseException:
        lock.release()
        raise
    notes = list(target.notes) if target else []
    if world is None or world.rank == 0:  # rank 0's collector records the clips
        clip = _no_clip_note(config, target.iteration if target else 0)
        _say([clip] if clip else [])
        notes += [clip] if clip else []
    return PreparedRun(run_dir=run_dir, config=config, manifest=manifest,
                       resume=ResumePoint(target.checkpoint, target.iteration) if target else None,
                       rank_devices=request.rank_devices,
                       rank_evidence=request.rank_evidence, role_mps_env=request.role_mps_env, lock=lock,
                       notes=notes, world=world, own_dir=own_dir)


def _no_clip_note(config: RunConfig, start_iteration: int) -> str | None:
    """A run too short for its training.outputs.video_interval says so before it starts, not by a missing clip."""
    interval = config.training.outputs.video_interval
    if not interval:
        return None
    from unilab.viz.clip import no_clip_note

    return no_clip_note(interval, start_iteration, config.algo.max_iterations,
                        config.training.loop.env_steps_per_sync, config.sim.control_dt)


def _say(notes: list[str]) -> None:
    for note in notes:
        print(f"unilab: note: {note}", file=sys.stderr)


def _claim_rank_dir(config: RunConfig, world: DistributedContext):
    """(run dir, this rank's directory in it, its lock) of a torchrun or srun rank. The name is the same on
    every rank (training.run.run_name, else the run id), so no rank may pick another: rank 0 refuses a directory
    that holds a run, rank r > 0 one whose rank_<r>/ exists (a shared filesystem, or a node's own disk)."""
    training = config.training
    name = training.run.run_name or world.default_run_name(config.algo.name, config.task.name)
    run_dir = Path(training.run.log_dir).expanduser().resolve() / name
    own_dir = rank_dir(run_dir, world.rank)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)  # another rank may have made it first
        if world.rank == 0 and is_run_dir(run_dir):
            raise ConfigError(f"{run_dir} holds a run already: give this run another training.run.run_name (every "
                              "rank the same) or remove it")
        own_dir.mkdir(exist_ok=world.rank == 0)
    except FileExistsError:
        raise ConfigError(f"{own_dir} exists already (an earlier run of this name): give this run another "
                          "training.run.run_name (every rank the same) or remove it") from None
    except OSError as exc:
        raise ConfigError(f"training.run.log_dir={training.run.log_dir}: cannot create {own_dir}: "
                          f"{exc.strerror or exc}; set training.run.log_dir to a writable directory") from None
    return run_dir, own_dir, _lock(own_dir)


def _claim_run_dir(config: RunConfig, name_suffix: str = ""):
    """(run dir, its lock, the checked resume target or None). A resume's directory is locked before it is
    read or touched (a run still training there keeps it), then every check runs; the lock is released if
    one fails (an exception's frames would otherwise keep it alive in this process)."""
    resume = config.training.run.resume
    if not resume:
        run_dir = _new_run_dir(config, name_suffix)
        return run_dir, _lock(run_dir), None
    try:
        run_dir = resume_dir(resume)
    except ResumeRefused as exc:
        raise ConfigError(str(exc)) from exc
    lock = _lock(run_dir)
    try:
        return run_dir, lock, _resume_target(resume, config)
    except BaseException:
        lock.release()
        raise

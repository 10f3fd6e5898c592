"""Typed schema of the `train` config: what Hydra validates every override against."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import PurePath
from typing import Any, List, Optional

from omegaconf import MISSING

from unilab.checks import MAX_WAIT_S, at_least_one, integer_in, number_in, require, text

VALIDATE_RESOLVER = "unilab.validate"

# Resolving this node runs every check of a request (unilab.config.validation) and yields the execution
# probe's evidence: the compose stage's hook for code that composes with Hydra's API and resolves.
EXECUTION_EVIDENCE_INTERPOLATION = "${" + VALIDATE_RESOLVER + ":}"
DEVICE = re.compile(r"cpu|cuda(:\d+)?")
# Where the learner's metrics rows go besides metrics.jsonl (training.outputs.logger).
LOGGERS = ("tensorboard", "wandb")
WANDB_MODES = ("offline", "online")
WANDB_EXTRA_HINT = "pip install 'unilab[wandb]'"
# torch's generators take any int64 seed; each rank adds its offset (unilab.runtime.world.rank_seed) to it.
MAX_ABS_SEED = 2**62
MAX_DEVICE_INDEX = 1023
MAX_INGRESS_SLOTS = 256  # chunks in flight between collector and learner: a few keep both busy
MAX_PLAY_STEPS = 10**7  # control steps of the closing play (more than two days at 50 Hz), iterations per video


class CudaProcessSharing(str, Enum):
    """Accepted spelling is exactly `mps` (lower case, no blanks); null is the default."""

    mps = "mps"


@dataclass
class ExecutionConfig:
    """What the `execution` group sets (it is packaged at `training.mps`)."""

    cuda_process_sharing: Optional[CudaProcessSharing] = None

    @property
    def sharing_mode(self) -> Optional[str]:
        """cuda_process_sharing as the probe and the children take it: "mps" or None."""
        return None if self.cuda_process_sharing is None else CudaProcessSharing(self.cuda_process_sharing).value


@dataclass
class NanGuardConfig:
    enabled: bool = True


@dataclass
class MpsThreadShare:
    """CUDA_MPS_ACTIVE_THREAD_PERCENTAGE per role (1-100; null: unset). An experiment knob for
    `+execution=mps` runs: it caps the SMs a role's kernels may occupy. Refused in null mode."""

    learner: Optional[int] = None
    collector: Optional[int] = None


class MpsPriority(str, Enum):
    """CUDA_MPS_CLIENT_PRIORITY: the MPS server schedules a normal client's pending work before a
    below-normal one's. A hint to the scheduler, not preemption."""

    normal = "normal"
    below_normal = "below_normal"


@dataclass
class MpsClientPriority:
    """CUDA_MPS_CLIENT_PRIORITY per role (null: unset, i.e. normal). For `+execution=mps` runs;
    refused in null mode. A below-normal collector favours the learner's update where it is the
    longer role (measured in docs/history/performance.md)."""

    learner: Optional[MpsPriority] = None
    collector: Optional[MpsPriority] = None


@dataclass
class RunSettings:
    """training.run: which run this is and where it goes: its device(s), seed, directory and what it resumes."""

    # The device of both roles of a rank (learner and collector share it; `devices` adds ranks).
    device: str = "cuda:0"
    devices: Optional[List[int]] = None
    seed: int = 1
    log_dir: str = "runs"
    run_name: Optional[str] = None
    resume: Optional[str] = None
    # Share of the replay capacity refilled (acting with the restored policy) before a resumed run updates.
    # All envs restart at once, so a small refill holds only early-episode states, and a FastSAC walk run
    # has collapsed at such a resume (docs/history/performance.md); a full refill is the default.
    resume_refill_fraction: float = 1.0

    def __post_init__(self) -> None:
        require(DEVICE.fullmatch(str(self.device)) is not None, "training.run.device", self.device,
                "cpu, cuda or cuda:N")
        for index in self.devices or ():
            integer_in("training.run.devices", index, 0, MAX_DEVICE_INDEX, "GPU indices")
        integer_in("training.run.seed", self.seed, -MAX_ABS_SEED, MAX_ABS_SEED)
        number_in("training.run.resume_refill_fraction", self.resume_refill_fraction, 0, 1,
                  "a share of the replay capacity")
        text("training.run.log_dir", self.log_dir, what="a directory")
        if self.resume is not None:
            text("training.run.resume", self.resume, what="a run directory or checkpoint, or null")
        if self.run_name is not None:
            text("training.run.run_name", self.run_name, what="a name, or null")
            check_run_name(self.run_name)


@dataclass
class LoopSettings:
    """training.loop: how the collector and learner step together, and how long each waits for the other."""

    env_steps_per_sync: int = 1
    # true: each update phase samples the replay before the collector's new chunk is added (the chunk
    # follows it), so the update overlaps the chunk's physics instead of the next acting forward pass.
    # false: the chunk first, then the update (the earlier order; the same learning, less MPS overlap).
    update_before_ingest: bool = True
    ingress_slots: int = 4
    nan_guard: NanGuardConfig = field(default_factory=NanGuardConfig)
    stall_timeout_s: float = 120.0
    startup_timeout_s: float = 900.0
    # Data parallel: how long a learner waits for the other ranks, to form their group at the start (a rank or
    # node that never comes) and in any one collective (gradients, weights).
    dist_timeout_s: float = 900.0

    def __post_init__(self) -> None:
        at_least_one("training.loop", self, ("env_steps_per_sync",))  # its upper bound: the replay's memory (sizes)
        integer_in("training.loop.ingress_slots", self.ingress_slots, 1, MAX_INGRESS_SLOTS, "chunks in flight")
        check_timeouts("training.loop", self)


@dataclass
class MpsSettings(ExecutionConfig):
    """training.mps: the execution mode (`+execution=mps` sets it) and the knobs of its MPS clients."""

    # null mode only: point the children at an empty pipe directory, so that a running MPS daemon
    # cannot take them as clients (a clean non-MPS baseline for A/B runs from one shell).
    block_ambient_mps: bool = False
    mps_active_thread_percentage: MpsThreadShare = field(default_factory=MpsThreadShare)
    mps_client_priority: MpsClientPriority = field(default_factory=MpsClientPriority)
    mps_probe_timeout_s: float = 5.0
    mps_attach_timeout_s: float = 15.0

    def __post_init__(self) -> None:
        check_timeouts("training.mps", self)


@dataclass
class OutputSettings:
    """training.outputs: what a run leaves besides its metrics.jsonl: checkpoints kept, logger sinks, clips,
    the closing play and the ONNX export."""

    # Checkpoints kept in checkpoints/: the newest N (latest.pt's file among them), older ones removed after
    # each save; null: every one. Five keep a resume's fallbacks and a look back over the last intervals, where
    # keeping every one of a long run (thousands of saves, tens of MB each) fills the disk.
    keep_checkpoints: Optional[int] = 5
    # Sinks of the metrics rows besides metrics.jsonl: tensorboard, wandb (needs unilab[wandb]); []: none.
    logger: List[str] = field(default_factory=lambda: ["tensorboard"])
    wandb_project: str = "unilab"
    # offline: written under <run dir>/wandb/ (no account, no network; `wandb sync` uploads it later).
    wandb_mode: str = "offline"
    # Every N iterations, a clip of world 0 rendered to videos/iter_<N>.mp4 (needs unilab[video]); null: off.
    video_interval: Optional[int] = None
    no_play: bool = True  # false: after a completed run, play the policy deterministically (play.json)
    play_envs: Optional[int] = None  # envs of that play (null: task.num_envs)
    play_steps: Optional[int] = None  # control steps of that play (null: until every env's first episode ends)
    export_onnx: bool = False

    def __post_init__(self) -> None:
        self._check_loggers()
        require(self.keep_checkpoints is None or self.keep_checkpoints >= 1, "training.outputs.keep_checkpoints",
                self.keep_checkpoints, "null (keep every checkpoint) or a count >= 1 (the newest; latest.pt's "
                "among them)")
        if self.video_interval is not None:
            integer_in("training.outputs.video_interval", self.video_interval, 1, MAX_PLAY_STEPS,
                       "iterations, or null: off")
        if self.play_envs is not None:  # its upper bound: the simulator's sizes (unilab.config.sizes)
            integer_in("training.outputs.play_envs", self.play_envs, 1, 2**31 - 1, "or null: task.num_envs")
        if self.play_steps is not None:
            integer_in("training.outputs.play_steps", self.play_steps, 1, MAX_PLAY_STEPS, "or null: one episode")

    def _check_loggers(self) -> None:
        allowed = "a list of " + ", ".join(LOGGERS) + ", each at most once ([]: metrics.jsonl only)"
        for name in self.logger:
            require(name in LOGGERS, "training.outputs.logger", list(self.logger), allowed)
        require(len(set(self.logger)) == len(self.logger), "training.outputs.logger", list(self.logger), allowed)
        require(self.wandb_mode in WANDB_MODES, "training.outputs.wandb_mode", self.wandb_mode,
                " or ".join(WANDB_MODES))
        text("training.outputs.wandb_project", self.wandb_project, what="a W&B project name")


@dataclass
class TrainingConfig:
    """The `training` group, by concern; each part checks its own values."""

    run: RunSettings = field(default_factory=RunSettings)
    loop: LoopSettings = field(default_factory=LoopSettings)
    mps: MpsSettings = field(default_factory=MpsSettings)
    outputs: OutputSettings = field(default_factory=OutputSettings)


def check_timeouts(prefix: str, settings: Any) -> None:
    """Every `*_timeout_s` of `settings` (seconds): inf would wait for ever, 0 or less never waits."""
    for f in fields(settings):
        if f.name.endswith("_timeout_s"):
            number_in(f"{prefix}.{f.name}", getattr(settings, f.name), 0, MAX_WAIT_S, "seconds, at most a week",
                      low_open=True)


# The longest file name most file systems take (NAME_MAX, in bytes); the run name's last part leaves room for
# the "_999" a taken name gets (unilab.rundir.create).
NAME_MAX_BYTES = 255
TAKEN_NAME_SUFFIX_BYTES = 4


def check_run_name(run_name: str) -> None:
    """training.run.run_name is a name (folders below training.run.log_dir allowed), not a path elsewhere: refused
    before anything is created, with what to do instead."""
    name = PurePath(run_name)
    if name.is_absolute():
        raise ValueError(f"training.run.run_name={run_name!r}: a run name is a name, not a path; give the folder as "
                         f"training.run.log_dir: training.run.log_dir={name.parent} training.run.run_name={name.name}")
    require(".." not in name.parts and name.parts, "training.run.run_name", run_name,
            "a name relative to training.run.log_dir, without '..' (the run directory stays inside it)")
    for i, part in enumerate(name.parts):
        last = i == len(name.parts) - 1
        limit = NAME_MAX_BYTES - (TAKEN_NAME_SUFFIX_BYTES if last else 0)
        size = len(part.encode("utf-8", "surrogateescape"))
        if size > limit:
            room = ", less room for the _N that a taken name gets" if last else ""
            shown = run_name if len(run_name) <= 60 else f"{run_name[:28]}...{run_name[-28:]}"
            raise ValueError(f"training.run.run_name={shown!r}: name too long ({size} bytes in one folder name; at "
                             f"most {limit}: file systems take {NAME_MAX_BYTES} bytes per name{room}); choose a shorter "
                             "training.run.run_name")


@dataclass
class TrainConfig:
    # First: OmegaConf.to_object and OmegaConf.resolve take the fields in order, so the checks behind this
    # node run before any other value is converted.
    execution_evidence: Any = EXECUTION_EVIDENCE_INTERPOLATION
    algo: Any = MISSING
    task: Any = MISSING
    sim: Any = MISSING
    training: TrainingConfig = field(default_factory=TrainingConfig)


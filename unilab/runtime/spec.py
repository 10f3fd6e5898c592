"""What the launcher hands each child process: the typed run config, where it sits, where it resumes (picklable, no
torch objects)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from unilab.config.run import RunConfig
from unilab.config.schema import TrainingConfig
from unilab.rundir.resume import ResumePoint
from unilab.world import ONE_RANK, DistributedContext, rank_seed


@dataclass
class RoleSpec:
    run_dir: str
    config: RunConfig  # the run's config, every group typed (checked before the launcher started)
    device: str  # torch device string as seen inside the child
    world: DistributedContext = ONE_RANK  # this rank's place in the data-parallel run
    resume: ResumePoint | None = None  # a resumed run: the checkpoint and iteration it goes on from

    @property
    def rank(self) -> int:
        """The global rank."""
        return self.world.rank

    @property
    def world_size(self) -> int:
        return self.world.world_size

    def name(self, role: str) -> str:
        """How the launcher and the logs call this process: `learner`, or `learner[1]` for rank 1."""
        return role if self.world_size == 1 else f"{role}[{self.rank}]"

    @property
    def rank_dir(self) -> str:
        """Where this rank writes metrics: the run directory for rank 0, rank_<r>/ below it otherwise."""
        from unilab.rundir.layout import rank_dir

        return str(rank_dir(self.run_dir, self.rank))

    @property
    def start_iteration(self) -> int:
        """The iteration this run segment starts at: 0, or the resumed checkpoint's."""
        return self.resume.iteration if self.resume else 0

    @property
    def training(self) -> TrainingConfig:
        return self.config.training

    @property
    def algo(self) -> Any:
        """The algorithm's schema dataclass; `task` and `sim` likewise."""
        return self.config.algo

    @property
    def task(self) -> Any:
        return self.config.task

    @property
    def sim(self) -> Any:
        return self.config.sim

    @property
    def seed(self) -> int:
        return rank_seed(self.training.run.seed, self.rank)


def report_ready(name: str, device, to_launcher) -> None:
    """Create this process's CUDA context, then tell the launcher which GPU it really sees."""
    import os

    import torch

    from .protocol import Ready

    uuid = None
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.zeros(1, device=device)  # the context exists from here on
        uuid = "GPU-" + str(torch.cuda.get_device_properties(device).uuid)
    to_launcher.put(Ready(name, os.getpid(), device.type, uuid))

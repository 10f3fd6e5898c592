"""What the launcher hands each child process (picklable, no torch objects)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from unilab.world import ONE_RANK, DistributedContext, rank_seed


@dataclass
class RoleSpec:
    run_dir: str
    config: dict[str, Any]  # the resolved run_config
    device: str  # torch device string as seen inside the child
    world: DistributedContext = ONE_RANK  # this rank's place in the data-parallel run
    start_iteration: int = 0
    resume_checkpoint: str | None = None
    stall_timeout_s: float = 120.0
    startup_timeout_s: float = 900.0
    replay_slots: int = 4
    extra: dict[str, Any] = field(default_factory=dict)

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
    def training(self) -> dict[str, Any]:
        return self.config["training"]

    @cached_property
    def algo(self) -> Any:
        """The typed algo config (its schema dataclass); `task` and `sim` likewise."""
        return _typed(self.config, "algo")

    @cached_property
    def task(self) -> Any:
        return _typed(self.config, "task")

    @cached_property
    def sim(self) -> Any:
        return _typed(self.config, "sim")

    @property
    def seed(self) -> int:
        return rank_seed(self.training["seed"], self.rank)


def _typed(config: dict[str, Any], group: str) -> Any:
    from unilab.registry import instantiate

    return instantiate(group, config[group])


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

"""The interface every off-policy learner offers the runtime, and the registry that builds one by name.

Contract shared by all methods: nothing here may synchronise the host with the device (no `.item()`,
no `nonzero`, no Python branch on a tensor value); bookkeeping that the host needs is kept in Python ints.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

if TYPE_CHECKING:
    from unilab.algos.replay import ReplayBuffer

# algo name -> "module:Class"; imported on first use so that an algorithm missing from a build costs nothing.
LEARNERS: dict[str, str] = {
    "fastsac": "unilab.algos.fastsac.learner:FastSACLearner",
    "flashsac": "unilab.algos.flashsac.learner:FlashSACLearner",
}


class OffPolicyLearner(ABC):
    replay: ReplayBuffer

    def __init__(self, cfg: Any, obs_dim: int, critic_obs_dim: int, action_dim: int, device: torch.device, seed: int):
        self.cfg = cfg
        self.obs_dim = obs_dim
        self.critic_obs_dim = critic_obs_dim
        self.action_dim = action_dim
        self.device = torch.device(device)
        self.seed = seed

    @abstractmethod
    def add(self, batch: dict[str, Tensor]) -> None:
        """Append transitions (obs, critic_obs, action, reward, next_obs, next_critic_obs, terminated)
        to the replay and update the observation normalisers."""

    @abstractmethod
    def ready(self) -> bool:
        """Whether the replay holds enough samples to start updating (host-side ints only)."""

    @abstractmethod
    def update(self) -> dict[str, Tensor]:
        """Run one cycle of `updates_per_step` gradient steps; returns device scalars
        (critic_loss, actor_loss, alpha, entropy, q_mean)."""

    @abstractmethod
    def publish_policy(self) -> None:
        """Copy the trained actor and normaliser statistics into the acting copy used by `act`."""

    @abstractmethod
    def act(self, obs: Tensor, deterministic: bool = False) -> Tensor:
        """Actions in [-1, 1] from the acting copy; safe on a different CUDA stream than `update`."""

    @abstractmethod
    def state_dict(self) -> dict:
        """Networks, targets, optimisers, entropy temperature, normalisers, update counter (not the replay)."""

    @abstractmethod
    def load_state_dict(self, sd: dict) -> None: ...

    @abstractmethod
    def export_onnx(self, path: str) -> None:
        """Write the deterministic actor, normaliser included, as an ONNX model."""


def learner_class(name: str) -> type[OffPolicyLearner]:
    if name not in LEARNERS:
        raise ValueError(f"unknown off-policy algorithm {name!r}; known: {', '.join(sorted(LEARNERS))}")
    module, _, attr = LEARNERS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def make_learner(
    algo_cfg: Any, obs_dim: int, critic_obs_dim: int, action_dim: int, device: torch.device | str, seed: int
) -> OffPolicyLearner:
    cls = learner_class(algo_cfg.name)
    return cls(algo_cfg, obs_dim, critic_obs_dim, action_dim, torch.device(device), seed)

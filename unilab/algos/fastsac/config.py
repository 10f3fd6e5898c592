"""FastSAC hyper-parameters (twin C51 critics, LayerNorm MLPs, automatic entropy); the shared ones and
their defaults are in unilab/algos/config.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from unilab.algos.config import OffPolicyAlgoConfig
from unilab.checks import number_in

_ONE_LR = "set algo.lr, the one learning rate of critic, actor and temperature (until removed, it still sets {})"


@dataclass
class FastSACConfig(OffPolicyAlgoConfig):
    name: str = "fastsac"
    # A shorter horizon than the base's 0.99: on the G1 walk task it learned to track commands several
    # times more closely in the same wall time (ablation table in docs/history/walk.md).
    gamma: float = 0.97
    # A plain `train --algo fastsac --task g1_walk_flat` ends with a policy that tracks its commands
    # (docs/en/walk.md), and keeps a checkpoint of every stretch of it for `unilab eval`.
    max_iterations: int = 10000
    save_interval: int = 1000
    # AdamW's decoupled weight decay on actor and critic (never on log alpha: decay would drag alpha towards 1).
    weight_decay: float = 0.1
    # Target entropy = -action_dim * (1 - target_entropy_ratio): 0.0 is SAC's usual -|A|, 1.0 asks for 0 nats.
    target_entropy_ratio: float = 0.0
    # Observations and critic observations are normalised by running statistics, then clipped to +-obs_clip.
    obs_normalization: bool = True
    obs_clip: float = 10.0
    # Left-right symmetry: half of every sampled batch is mirrored with the task's mirror map
    # (unilab.algos.symmetry), for tasks that have one (the walk). Off: the batch as sampled.
    symmetry: bool = False

    # Deprecated: per-optimiser learning rates, superseded by `lr`. Where set (not null), each still sets
    # its optimiser's rate, so that older configs train as they did.
    critic_lr: Optional[float] = None
    actor_lr: Optional[float] = None
    alpha_lr: Optional[float] = None

    DEPRECATED: ClassVar[dict[str, str]] = {
        "critic_lr": _ONE_LR.format("the critic's"),
        "actor_lr": _ONE_LR.format("the actor's"),
        "alpha_lr": _ONE_LR.format("the temperature's"),
    }

    def _check(self) -> None:
        super()._check()
        number_in("algo.weight_decay", self.weight_decay, 0, 1)
        number_in("algo.target_entropy_ratio", self.target_entropy_ratio, -10, 1, "1: a target of 0 nats")
        number_in("algo.obs_clip", self.obs_clip, 0, 1e6, "normalised units", low_open=True)
        for name in ("critic_lr", "actor_lr", "alpha_lr"):
            if getattr(self, name) is not None:
                number_in(f"algo.{name}", getattr(self, name), 0, 1, "a learning rate, or null", low_open=True)

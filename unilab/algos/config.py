"""Settings every off-policy learner shares; each algorithm extends this dataclass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class OffPolicyAlgoConfig:
    name: str = "???"
    max_iterations: int = 1000
    save_interval: int = 100
    batch_size: int = 8192
    updates_per_step: int = 8
    replay_capacity: int = 1_000_000
    gamma: float = 0.99
    learning_starts: int = 10
    # torch.compile the losses (fuses norms, activations, softmaxes and the categorical projection,
    # forward and backward) before the cycle is captured; costs ~1 min at start-up.
    # null: on where the cycle is a CUDA graph (cycle on the H200: FastSAC 28.5 -> 10.7 ms, FlashSAC
    # 11.05 -> 3.12 ms), off on the CPU. The acting policy is compiled with it.
    compile: Optional[bool] = None

"""Settings every off-policy learner shares; each algorithm extends this dataclass."""

from __future__ import annotations

from dataclasses import dataclass


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

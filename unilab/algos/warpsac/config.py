"""WarpSAC hyper-parameters (importable without torch: Hydra registers this dataclass as `warpsac_schema`).
WarpSAC is FlashSAC with its own update order and replay sampling: the FlashSAC settings and their defaults
(unilab/algos/flashsac/config.py) all apply; these are the ones it adds."""

from __future__ import annotations

from dataclasses import dataclass, field

from unilab.algos.flashsac.config import FlashSACConfig
from unilab.checks import integer_in, number_in


@dataclass
class ReplaySampling:
    """Replay rows drawn by the age of their transition (in transitions: the newest has age 1).

    A transition's weight is max(min_weight, 1 - age / decay_step) for a positive decay (the newest
    favoured), min(1, min_weight + age / |decay_step|) for a negative one (the oldest favoured); decay_step 0
    draws uniformly, as FlashSAC does. Weights are taken per bucket: the filled replay is cut into
    `num_buckets` runs of consecutive transitions, a bucket is drawn by the weight at its middle, then a row
    uniformly inside it (at least as many buckets as transitions: exact per transition).
    """

    decay_step: int = 512
    min_weight: float = 0.05
    num_buckets: int = 2000

    def __post_init__(self) -> None:
        integer_in("algo.replay_sampling.decay_step", self.decay_step, -2**62, 2**62, "transitions, 0: uniform")
        number_in("algo.replay_sampling.min_weight", self.min_weight, 0, 1, "a weight")
        integer_in("algo.replay_sampling.num_buckets", self.num_buckets, 1, 10**6)


@dataclass
class WarpSACConfig(FlashSACConfig):
    name: str = "warpsac"
    replay_sampling: ReplaySampling = field(default_factory=ReplaySampling)
    # FlashSAC keeps weights, norm gains and biases on their spheres after every step. False for a network
    # leaves its parameters free: plain orthogonal weights at the start, no projection after a step (for
    # the critic, none after the target's EMA either).
    actor_normalize_parameters: bool = True
    critic_normalize_parameters: bool = True

"""FastSAC hyper-parameters (twin C51 critics, LayerNorm MLPs, automatic entropy)."""

from __future__ import annotations

from dataclasses import dataclass

from unilab.algos.config import OffPolicyAlgoConfig


@dataclass
class FastSACConfig(OffPolicyAlgoConfig):
    name: str = "fastsac"
    critic_hidden_dim: int = 768
    actor_hidden_dim: int = 512
    num_atoms: int = 101
    v_min: float = -20.0
    v_max: float = 20.0
    critic_lr: float = 3e-4
    actor_lr: float = 3e-4
    alpha_lr: float = 3e-4
    weight_decay: float = 0.1
    tau: float = 0.1
    policy_delay: int = 2
    init_alpha: float = 0.001
    # target entropy = -action_dim * (1 - target_entropy_ratio): 0.0 is SAC's usual -|A|, 1.0 asks for 0 nats.
    target_entropy_ratio: float = 0.0
    # The actor's log-std is soft-clamped (differentiable everywhere) into [log_std_min, log_std_max];
    # std above 1 only saturates tanh, so the upper bound is 0.
    log_std_min: float = -5.0
    log_std_max: float = 0.0
    obs_normalization: bool = True
    obs_clip: float = 10.0
    bf16: bool = True
    cuda_graph: bool = True
    # Eager update cycles run on a side stream before the graph is captured (they are real updates).
    cuda_graph_warmup: int = 3

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
    target_entropy_ratio: float = 0.0
    obs_normalization: bool = True
    bf16: bool = True
    cuda_graph: bool = True

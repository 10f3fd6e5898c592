"""FlashSAC hyper-parameters (importable without torch: Hydra registers this dataclass as `flashsac_schema`);
the shared ones are in unilab/algos/config.py, overridden here where FlashSAC's defaults differ."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from unilab.algos.config import OffPolicyAlgoConfig
from unilab.checks import integer_in, number_in, one_of

MAX_BLOCKS = 64  # blocks, expansion and critics: networks far past any FlashSAC setting
NOISE_REPEATS = ("zeta", "uniform")


@dataclass
class FlashSACConfig(OffPolicyAlgoConfig):
    name: str = "flashsac"
    batch_size: int = 2048
    updates_per_step: int = 2
    replay_capacity: int = 2_000_000
    tau: float = 0.01

    # Networks: input BatchNorm -> unit-norm embedding -> `num_blocks` inverted residual blocks
    # (width hidden * expansion inside) -> RMSNorm -> head. The critic is an ensemble of `num_critics`.
    actor_hidden_dim: int = 128
    actor_num_blocks: int = 2
    critic_hidden_dim: int = 256
    critic_num_blocks: int = 2
    expansion: int = 4
    num_critics: int = 2
    batchnorm_momentum: float = 0.01
    log_std_min: float = -10.0
    log_std_max: float = 2.0

    # The categorical critic is over returns of the *normalised* reward: keep |v| near reward_norm_max_return.
    v_min: float = -5.0
    v_max: float = 5.0

    # Adam for actor, critic and temperature, all on one warm-up + cosine schedule: lr_init -> lr over
    # lr_warmup_steps gradient steps, then cosine lr -> lr_end until lr_decay_steps (0: max_iterations *
    # updates_per_step), constant afterwards.
    lr_init: float = 3e-4
    lr_end: float = 1.5e-4
    lr_warmup_steps: int = 0
    lr_decay_steps: int = 0

    # The temperature is tuned so that the policy's action std (geometric mean over action dimensions,
    # measured in the [-1, 1] action space through the tanh Jacobian) approaches target_action_std.
    init_alpha: float = 0.01
    target_action_std: float = 0.15

    # Exploration: each env holds its Gaussian noise sample for k steps, k drawn from
    # P(k) ~ k^-noise_repeat_exponent on 1..noise_repeat_max ("zeta"), or uniformly ("uniform").
    # noise_repeat_max = 1 gives plain per-step SAC sampling.
    noise_repeat: str = "zeta"
    noise_repeat_max: int = 16
    noise_repeat_exponent: float = 2.0

    # Rewards are divided by max(std(G), max|G| / reward_norm_max_return), G being each env's running
    # discounted return; the statistics are updated in add(). Keep reward_norm_max_return equal to v_max.
    reward_normalization: bool = True
    reward_norm_max_return: float = 5.0
    # How add()'s rows split into env steps (rows are tick-major), for those running returns; the runtime
    # sets it to its env count (make_learner's num_envs). 0 takes the row count of the first add() as one
    # step of all envs.
    num_envs: int = 0

    # Deprecated: renamed num_atoms. Where set (not null), its value is taken for num_atoms.
    num_bins: Optional[int] = None

    DEPRECATED: ClassVar[dict[str, str]] = {"num_bins": "renamed algo.num_atoms, set that instead"}

    def _check(self) -> None:
        super()._check()
        for name in ("actor_num_blocks", "critic_num_blocks", "expansion"):
            integer_in(f"algo.{name}", getattr(self, name), 1, MAX_BLOCKS)
        integer_in("algo.num_critics", self.num_critics, 2, MAX_BLOCKS, "an ensemble of at least two: clipped double-Q")
        number_in("algo.batchnorm_momentum", self.batchnorm_momentum, 0, 1, low_open=True)
        for name in ("lr_init", "lr_end"):
            number_in(f"algo.{name}", getattr(self, name), 0, 1, "a learning rate")
        for name in ("lr_warmup_steps", "lr_decay_steps"):
            integer_in(f"algo.{name}", getattr(self, name), 0, 2**62, "gradient steps")
        number_in("algo.target_action_std", self.target_action_std, 0, 1, "in the [-1, 1] action space", low_open=True)
        one_of("algo.noise_repeat", self.noise_repeat, NOISE_REPEATS)
        integer_in("algo.noise_repeat_max", self.noise_repeat_max, 1, 10_000, "steps a noise sample is held")
        number_in("algo.noise_repeat_exponent", self.noise_repeat_exponent, -100, 100)
        number_in("algo.reward_norm_max_return", self.reward_norm_max_return, 0, 1e6, low_open=True)
        integer_in("algo.num_envs", self.num_envs, 0, 2**31 - 1, "0: the rows of the first add")

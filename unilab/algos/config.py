"""Settings every off-policy learner shares (importable without torch).

Each algorithm's dataclass extends `OffPolicyAlgoConfig` with its own settings and overrides the shared
defaults where its method differs; the shared defaults are FastSAC's. Hydra registers the algorithm
dataclasses as `<algo>_schema`, and the YAML files in conf/algo/ extend those.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from unilab.checks import at_least_one, integer_in, number_in, require

# Upper bounds of the shared settings (unilab/checks.py says why every number has one).
MAX_ITERATIONS = 10**9  # update cycles of a run
MAX_UPDATES_PER_STEP = 10_000  # gradient steps per cycle
MAX_HIDDEN_DIM = 16_384  # a square layer of it is 1 GiB of float32 weights
MAX_ATOMS = 1001  # FlashSAC's dense projection holds batch x atoms^2 floats
MAX_ABS_LOG_STD = 20.0
MAX_ABS_RETURN = 1e6  # the critic's support, in (normalised) reward units
MAX_INIT_ALPHA = 1e3

COMPILE_MODES = (None, "default", "max-autotune-no-cudagraphs")

# Keys renamed since they were introduced: old -> new. A config that still sets an old key (to anything
# but null) trains as before, its value taken for the new key, with a FutureWarning; the old keys remain
# schema fields (null) only so that `algo.<old>=...` and older YAML files still compose.
RENAMED = {"num_bins": "num_atoms"}


@dataclass
class OffPolicyAlgoConfig:
    name: str = "???"
    # Learner iterations (one update cycle each) of a run, and the checkpoint period in iterations.
    max_iterations: int = 1000
    save_interval: int = 100

    # One update cycle: `updates_per_step` gradient steps, each on `batch_size` transitions sampled
    # uniformly from a replay of the newest `replay_capacity` ones.
    batch_size: int = 8192
    updates_per_step: int = 8
    replay_capacity: int = 1_000_000
    # Updates start once the replay holds `batch_size` samples and `learning_starts` adds' worth of rows
    # (the rule: `first_update` below).
    learning_starts: int = 10
    gamma: float = 0.99
    # Actor and temperature are trained on every `policy_delay`-th gradient step of a cycle.
    policy_delay: int = 2
    # Target critic: after every critic step, target <- target + tau * (critic - target).
    tau: float = 0.1

    # Hidden widths of the actor's and the critic's networks (each algorithm shapes its own).
    actor_hidden_dim: int = 512
    critic_hidden_dim: int = 768
    # The actor's pre-tanh log-std is squashed smoothly (its gradient never vanishes) into
    # [log_std_min, log_std_max].
    log_std_min: float = -5.0
    log_std_max: float = 0.0
    # Categorical (C51) critic: a distribution over `num_atoms` returns evenly spaced on [v_min, v_max].
    num_atoms: int = 101
    v_min: float = -20.0
    v_max: float = 20.0

    # Learning rate of critic, actor and entropy temperature alike.
    lr: float = 3e-4
    # Entropy temperature at the start (it is learnt, as log alpha).
    init_alpha: float = 0.001
    # A floor under the learnt temperature (0: none). A long run's temperature can keep falling until the
    # policy is all but deterministic; the floor keeps a little exploration and entropy in the targets.
    min_alpha: float = 0.0

    # On CUDA: the networks under bf16 autocast, and the whole update cycle captured as one CUDA graph
    # after `cuda_graph_warmup` eager cycles on a side stream (real updates, on real data).
    bf16: bool = True
    cuda_graph: bool = True
    cuda_graph_warmup: int = 3
    # torch.compile the losses (fuses norms, activations, softmaxes and the categorical projection,
    # forward and backward) before the cycle is captured; the acting policy is compiled with them.
    # Costs start-up time and takes the cycle several times faster (docs/history/performance.md, sets
    # 3 and 4). null: on where the cycle is a CUDA graph, off on the CPU.
    compile: Optional[bool] = None
    # Inductor's mode for those compiles: null (its default), "default" or "max-autotune-no-cudagraphs"
    # (GEMMs and reductions autotuned; a longer start-up). Modes with CUDA graphs are refused: the
    # learner captures the whole cycle itself.
    compile_mode: Optional[str] = None
    # Inductor's combo kernels: independent small kernels of a compiled region (weight casts, per-layer
    # reductions) launched as one. Fewer kernels per cycle; whether the cycle is shorter depends on the
    # networks (docs/history/performance.md has the measurement per algorithm).
    combo_kernels: bool = False

    # Deprecated keys this dataclass still accepts: old key -> what the warning tells to set instead.
    DEPRECATED: ClassVar[dict[str, str]] = {}

    def __post_init__(self) -> None:
        # The renamed keys first: their values are checked under the new names.
        for old, instead in self.DEPRECATED.items():
            if getattr(self, old) is not None:
                warnings.warn(f"algo.{old} is deprecated and will be removed: {instead}", FutureWarning, stacklevel=3)
        for old, new in RENAMED.items():
            if getattr(self, old, None) is not None:
                setattr(self, new, getattr(self, old))
                setattr(self, old, None)
        self._check()

    def _check(self) -> None:
        """The ranges of the settings; an algorithm's dataclass extends it with its own."""
        # The replay's and the batch's upper bounds come from the device and the envs (unilab.config.sizes).
        at_least_one("algo", self, ("batch_size", "replay_capacity"))
        integer_in("algo.max_iterations", self.max_iterations, 1, MAX_ITERATIONS, "update cycles")
        integer_in("algo.save_interval", self.save_interval, 1, MAX_ITERATIONS, "iterations")
        integer_in("algo.updates_per_step", self.updates_per_step, 1, MAX_UPDATES_PER_STEP,
                   "gradient steps per cycle")
        integer_in("algo.policy_delay", self.policy_delay, 1, max(1, self.updates_per_step),
                   "at most algo.updates_per_step, or the actor would never be trained")
        integer_in("algo.learning_starts", self.learning_starts, 0, MAX_ITERATIONS, "iterations' worth of rows")
        number_in("algo.gamma", self.gamma, 0, 1, "a discount", low_open=True)
        number_in("algo.tau", self.tau, 0, 1, "the target critic's step towards the critic", low_open=True)
        for name in ("actor_hidden_dim", "critic_hidden_dim"):
            integer_in(f"algo.{name}", getattr(self, name), 1, MAX_HIDDEN_DIM, "units")
        for name in ("log_std_min", "log_std_max"):
            number_in(f"algo.{name}", getattr(self, name), -MAX_ABS_LOG_STD, MAX_ABS_LOG_STD)
        require(self.log_std_min < self.log_std_max, "algo.log_std_min", self.log_std_min,
                f"less than algo.log_std_max={self.log_std_max!r}")
        integer_in("algo.num_atoms", self.num_atoms, 2, MAX_ATOMS, "points of the critic's return support")
        for name in ("v_min", "v_max"):
            number_in(f"algo.{name}", getattr(self, name), -MAX_ABS_RETURN, MAX_ABS_RETURN)
        require(self.v_min < self.v_max, "algo.v_min", self.v_min, f"less than algo.v_max={self.v_max!r} "
                "(the critic's return support is [v_min, v_max])")
        # AdamW's decay shrinks weights by lr x weight_decay per step: with both at most 1 it never flips them.
        number_in("algo.lr", self.lr, 0, 1, "a learning rate", low_open=True)
        number_in("algo.init_alpha", self.init_alpha, 0, MAX_INIT_ALPHA, "the starting temperature", low_open=True)
        number_in("algo.min_alpha", self.min_alpha, 0, MAX_INIT_ALPHA, "a floor under the temperature (0: none)")
        integer_in("algo.cuda_graph_warmup", self.cuda_graph_warmup, 1, 100,
                   "eager cycles before the capture: lazy state must exist when it starts")
        if self.compile_mode not in COMPILE_MODES:
            raise ValueError(
                f"algo.compile_mode={self.compile_mode!r}: choose one of "
                f"{', '.join('null' if m is None else m for m in COMPILE_MODES)}"
            )


@dataclass(frozen=True)
class FirstUpdate:
    """When the updates of a run (or of a resumed segment) start: `first_update`'s answer."""

    rows: int  # replay rows: `batch_size`, and `learning_starts` iterations' worth
    iterations: int  # iterations of the segment before it: `learning_starts`
    rows_per_iteration: int

    @property
    def iteration(self) -> int:
        """The segment's iteration that makes the first update, where each update samples the replay as it
        stood before that iteration's rows (training.loop.update_before_ingest)."""
        return max(self.iterations, -(-self.rows // self.rows_per_iteration))


def first_update(algo: Any, rows_per_iteration: int) -> FirstUpdate:
    """The first-update rule, the one place it is computed (the learner's `ready()`, the learner role's gate
    and fill report, `unilab warmup`): updates start once the replay holds `batch_size` rows and
    `learning_starts` iterations' worth, and `learning_starts` iterations of the segment have run."""
    starts = int(algo.learning_starts)
    return FirstUpdate(max(int(algo.batch_size), starts * rows_per_iteration), starts, rows_per_iteration)


def with_renamed_keys(cfg: Any) -> Any:
    """`cfg` itself, or where it still sets a renamed key (see RENAMED), a read-only view of it in which
    that key's value answers for the new key. The learners read their config through this, so that a plain
    attribute config reads as the dataclass does (the runtime, play and eval hand them the dataclass)."""
    moved = {new: getattr(cfg, old) for old, new in RENAMED.items() if getattr(cfg, old, None) is not None}
    return _RenamedKeys(cfg, moved) if moved else cfg


class _RenamedKeys:
    def __init__(self, cfg: Any, moved: dict[str, Any]):
        self._cfg = cfg
        self._moved = moved

    def __getattr__(self, key: str) -> Any:
        moved = self.__dict__["_moved"]
        return moved[key] if key in moved else getattr(self.__dict__["_cfg"], key)

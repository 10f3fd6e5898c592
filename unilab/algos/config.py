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
    # Inductor's mode for those compiles: null (its default) or "max-autotune-no-cudagraphs" (GEMMs
    # and reductions autotuned; minutes more at start-up). Modes with CUDA graphs are refused: the
    # learner captures the whole cycle itself.
    compile_mode: Optional[str] = None

    def __post_init__(self) -> None:
        if self.compile_mode not in COMPILE_MODES:
            raise ValueError(
                f"algo.compile_mode={self.compile_mode!r}: choose one of "
                f"{', '.join('null' if m is None else m for m in COMPILE_MODES)}"
            )


COMPILE_MODES = (None, "default", "max-autotune-no-cudagraphs")

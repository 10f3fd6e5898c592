"""Simulation config (plain dataclass: importable without warp, torch or mujoco)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from unilab.checks import at_least_one, one_of, positive_finite


@dataclass
class MjWarpSimConfig:
    backend: str = "mjwarp"
    timestep: float = 0.005
    decimation: int = 4  # physics substeps per policy step (50 Hz policy at 0.005 s)
    # Constraint-solver caps (MuJoCo's opt.iterations / opt.ls_iterations); None keeps the task's
    # model's (10 / 20 for the G1; the tracking task sets its own iterations, task.solver_iterations).
    # The captured solver loop runs until its slowest world converges or reaches the cap, so the cap
    # bounds what one slippery world costs every world.
    iterations: Optional[int] = None
    ls_iterations: Optional[int] = None
    nconmax: Optional[int] = None  # contacts per world (None: derived from the robot's collision geoms)
    njmax: Optional[int] = None  # constraint rows per world (None: derived from the model)
    cuda_graph: bool = True  # capture the decimated step as one CUDA graph on CUDA
    # Capture the task's post-physics work (observations, rewards, resets) as one CUDA graph on CUDA.
    task_cuda_graph: bool = True
    # Reaction to a contact/constraint overflow: "error" makes check_overflow() raise; "count" only
    # reports it (the sim_overflow metric).
    overflow: str = "error"
    verbose: bool = False  # Warp module-load lines and MJWarp overflow prints
    # Threads that compile Warp's modules while the env is built (with a cold kernel cache, every module
    # MJWarp imports and every per-model kernel its step launches). null: one per CPU core, at most 8;
    # 0: one after the other.
    compile_workers: Optional[int] = None

    def __post_init__(self) -> None:
        positive_finite("sim.timestep", self.timestep)
        at_least_one("sim", self, ("decimation",))
        at_least_one("sim", self, tuple(n for n in ("iterations", "ls_iterations") if getattr(self, n) is not None))
        one_of("sim.overflow", self.overflow, ("error", "count"))
        if self.compile_workers is not None and self.compile_workers < 0:
            raise ValueError(f"sim.compile_workers must be >= 0 or null, got {self.compile_workers}")

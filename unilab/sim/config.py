"""Simulation config (plain dataclass: importable without warp, torch or mujoco)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from unilab.checks import integer_in, number_in, one_of

# Upper bounds of the settings (see unilab/checks.py): MuJoCo steps of 0.1 s or more, or a control step
# longer than a second, simulate no legged robot; a thousand solver iterations per substep is past any
# convergence the captured loop waits for.
MAX_TIMESTEP_S = 0.1
MAX_CONTROL_DT_S = 1.0
MAX_SOLVER_ITERATIONS = 1000
MAX_COMPILE_WORKERS = 256


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
        one_of("sim.backend", self.backend, ("mjwarp",))
        number_in("sim.timestep", self.timestep, 0, MAX_TIMESTEP_S, "seconds", low_open=True)
        integer_in("sim.decimation", self.decimation, 1, int(MAX_CONTROL_DT_S / self.timestep),
                   f"substeps per control step: the control step, timestep x decimation, at most {MAX_CONTROL_DT_S:g} s")
        for name in ("iterations", "ls_iterations"):
            if getattr(self, name) is not None:
                integer_in(f"sim.{name}", getattr(self, name), 1, MAX_SOLVER_ITERATIONS, "or null")
        # Upper bounds of these two come from the model and the envs (unilab.config.sizes, at compose).
        for name in ("nconmax", "njmax"):
            if getattr(self, name) is not None:
                integer_in(f"sim.{name}", getattr(self, name), 1, 2**31 - 1, "per world, or null: derived")
        one_of("sim.overflow", self.overflow, ("error", "count"))
        if self.compile_workers is not None:
            integer_in("sim.compile_workers", self.compile_workers, 0, MAX_COMPILE_WORKERS,
                       "threads, 0: one after the other, or null: one per core")

    @property
    def control_dt(self) -> float:
        """Seconds per control step (per env step of a task)."""
        return float(self.timestep) * int(self.decimation)

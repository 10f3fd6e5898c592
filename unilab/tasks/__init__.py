"""`make_env` builds the batched env named by the task config (members: `unilab.registry`)."""

from __future__ import annotations

from typing import Any, Callable


def make_env(task_cfg: Any, sim_cfg: Any, device: str, seed: int,
             on_sized: Callable[[Any], None] | None = None, on_stage: Callable[[str], None] | None = None):
    """Build the env of `task_cfg.name` on `device`, seeded with `seed`. Both configs are typed
    (`unilab.registry.instantiate`) where they come as values.

    on_sized: called with the env once its observation and action sizes are known and before its
    simulation kernels compile (the collector shares its buffers then, so that the learner builds and
    compiles while the kernels compile); the env is not reset yet.
    on_stage: called with a line for each stage of the build as it ends, with its seconds (the model put on the
    device, the kernels compiling and ready, the first reset), so that a cold build shows where it is."""
    from unilab.registry import implementation, instantiate
    from unilab.tasks.common.base import build_hooks

    task, sim = instantiate("task", task_cfg), instantiate("sim", sim_cfg)
    with build_hooks(on_sized, on_stage):
        return implementation("task", task.name)(task, sim, device=device, seed=seed)

"""`make_env` builds the batched env named by the task config (members: `unilab.registry`)."""

from __future__ import annotations

from typing import Any, Callable


def make_env(task_cfg: Any, sim_cfg: Any, device: str, seed: int,
             on_sized: Callable[[Any], None] | None = None):
    """Build the env of `task_cfg.name` on `device`, seeded with `seed`. Both configs are typed
    (`unilab.registry.instantiate`) where they come as values.

    on_sized: called with the env once its observation and action sizes are known and before its
    simulation kernels compile (the collector shares its buffers then, so that the learner builds and
    compiles while the kernels compile); the env is not reset yet."""
    from unilab.registry import implementation, instantiate
    from unilab.tasks.common.base import sized_hook

    task, sim = instantiate("task", task_cfg), instantiate("sim", sim_cfg)
    with sized_hook(on_sized):
        return implementation("task", task.name)(task, sim, device=device, seed=seed)

"""`make_env` builds the batched env named by the task config (members: `unilab.registry`)."""

from __future__ import annotations

from typing import Any


def make_env(task_cfg: Any, sim_cfg: Any, device: str, seed: int):
    """Build the env of `task_cfg.name` on `device`, seeded with `seed`. Both configs are typed
    (`unilab.registry.instantiate`) where they come as values."""
    from unilab.registry import implementation, instantiate

    task, sim = instantiate("task", task_cfg), instantiate("sim", sim_cfg)
    return implementation("task", task.name)(task, sim, device=device, seed=seed)

"""Task registry: `make_env` builds the batched env named by `task_cfg.name`."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

# name -> ("module:Class" of the env, "module:Class" of its config dataclass); imported lazily.
TASKS: dict[str, tuple[str, str]] = {
    "g1_walk_flat": (
        "unilab.tasks.g1_walk_flat.env:G1WalkFlatEnv",
        "unilab.tasks.g1_walk_flat.config:G1WalkFlatConfig",
    ),
    "g1_motion_tracking": (
        "unilab.tasks.g1_motion_tracking.env:G1MotionTrackingEnv",
        "unilab.tasks.g1_motion_tracking.config:G1MotionTrackingConfig",
    ),
}


def _load(target: str):
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def _to_object(cfg: Any, schema: Any = None) -> Any:
    """DictConfig / dict -> dataclass instance (merged onto `schema` when it is given)."""
    if cfg is None or dataclasses.is_dataclass(cfg):
        return cfg
    from omegaconf import DictConfig, OmegaConf

    if isinstance(cfg, dict):
        cfg = OmegaConf.create(cfg)
    if isinstance(cfg, DictConfig):
        if schema is not None and OmegaConf.get_type(cfg) in (dict, None):
            cfg = OmegaConf.merge(OmegaConf.structured(schema), cfg)
        return OmegaConf.to_object(cfg)
    return cfg


def make_env(task_cfg: Any, sim_cfg: Any, device: str, seed: int):
    """Build the env of `task_cfg.name` on `device`, seeded with `seed`."""
    name = task_cfg["name"] if isinstance(task_cfg, dict) else task_cfg.name
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; known: {sorted(TASKS)}")
    env_target, cfg_target = TASKS[name]
    task_cfg = _to_object(task_cfg, _load(cfg_target))
    sim_cfg = _to_object(sim_cfg, _load("unilab.sim.config:MjWarpSimConfig"))
    return _load(env_target)(task_cfg, sim_cfg, device=device, seed=seed)

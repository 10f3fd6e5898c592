"""Registers the schemas in Hydra's ConfigStore; the YAML files in conf/ extend them."""

from __future__ import annotations

import importlib

from hydra.core.config_store import ConfigStore

from .schema import TrainConfig

# (group, schema name, "module:Class"): the group schemas live beside the code they configure.
GROUP_SCHEMAS = (
    ("algo", "fastsac_schema", "unilab.algos.fastsac.config:FastSACConfig"),
    ("algo", "flashsac_schema", "unilab.algos.flashsac.config:FlashSACConfig"),
    ("sim", "mjwarp_schema", "unilab.sim.config:MjWarpSimConfig"),
    ("task", "g1_walk_flat_schema", "unilab.tasks.g1_walk_flat.config:G1WalkFlatConfig"),
    ("task", "g1_motion_tracking_schema", "unilab.tasks.g1_motion_tracking.config:G1MotionTrackingConfig"),
)

_registered = False


def register_configs() -> None:
    global _registered
    if _registered:
        return
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    for group, name, target in GROUP_SCHEMAS:
        node = _load(target)
        if node is not None:
            cs.store(group=group, name=name, node=node)
    _registered = True


def group_object(group: str, name: str, values):
    """The schema dataclass of config `name` in `group`, filled with `values`: its own checks
    (`__post_init__`) run. None where that schema is not part of this build."""
    from omegaconf import OmegaConf

    schema = _load(next(t for g, n, t in GROUP_SCHEMAS if g == group and n == f"{name}_schema"))
    return None if schema is None else OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), values))


def _load(target: str):
    module, _, attr = target.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):  # that algorithm or task is not part of this build
            return None
        raise

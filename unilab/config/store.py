"""Registers the schemas in Hydra's ConfigStore; the YAML files in conf/ extend them.

The group schemas come from `unilab.registry`: member `name` of group `algo`, `task` or `sim` is stored
as `<group>/<name>_schema`, which its YAML file names first in its defaults list.
"""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from .schema import TrainConfig

_registered = False


def register_configs() -> None:
    global _registered
    if _registered:
        return
    from unilab.registry import schemas

    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    # `hydra/launcher=unilab_packed`'s node is stored by its plugin (hydra_plugins/unilab_packed_launcher/config.py)
    for group, name, schema in schemas():
        cs.store(group=group, name=f"{name}_schema", node=schema)
    _registered = True

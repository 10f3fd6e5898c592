"""The packed launcher stores its own node, as Hydra's launcher plugins do: Hydra imports every module of the
hydra_plugins package when it starts, and `hydra/launcher=unilab_packed` then finds this node."""

from hydra.core.config_store import ConfigStore

from unilab.cli.packing import LAUNCHER, LAUNCHER_GROUP, PackedLauncherConf

ConfigStore.instance().store(group=LAUNCHER_GROUP, name=LAUNCHER, node=PackedLauncherConf, provider="unilab")

"""What the `algo`, `task` and `sim` config groups can name: for each name, its config schema (a dataclass,
the one source of its defaults) and what it builds (a learner, an env).

Hydra's ConfigStore registration (`unilab.config.store`), `make_learner`, `make_env` and `instantiate`
all read this table. Targets are "module:Class" strings imported on first use: registering the schemas
imports no torch, and an algorithm or task missing from a build costs nothing until it is named.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Entry:
    config: str  # the schema dataclass; ConfigStore holds it as `<group>/<name>_schema`
    builds: str | None = None  # the learner or env class


@dataclass(frozen=True)
class Group:
    noun: str  # how errors call a member
    key: str  # the config field that names the member
    entries: dict[str, Entry] = field(default_factory=dict)
    default: str | None = None  # the member taken when a config leaves `key` out


GROUPS: dict[str, Group] = {
    "algo": Group("off-policy algorithm", "name", {
        "fastsac": Entry("unilab.algos.fastsac.config:FastSACConfig", "unilab.algos.fastsac.learner:FastSACLearner"),
        "flashsac": Entry("unilab.algos.flashsac.config:FlashSACConfig",
                          "unilab.algos.flashsac.learner:FlashSACLearner"),
        "warpsac": Entry("unilab.algos.warpsac.config:WarpSACConfig", "unilab.algos.warpsac.learner:WarpSACLearner"),
    }),
    "task": Group("task", "name", {
        "g1_walk_flat": Entry("unilab.tasks.g1_walk_flat.config:G1WalkFlatConfig",
                              "unilab.tasks.g1_walk_flat.env:G1WalkFlatEnv"),
        "g1_motion_tracking": Entry("unilab.tasks.g1_motion_tracking.config:G1MotionTrackingConfig",
                                    "unilab.tasks.g1_motion_tracking.env:G1MotionTrackingEnv"),
    }),
    # The backend is built by the task's env from this config.
    "sim": Group("sim backend", "backend", {"mjwarp": Entry("unilab.sim.config:MjWarpSimConfig")}, default="mjwarp"),
}


def load(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def entry(group: str, name: str) -> Entry:
    entries = GROUPS[group].entries
    if name not in entries:
        raise ValueError(f"unknown {GROUPS[group].noun} {name!r}; known: {', '.join(sorted(entries))}")
    return entries[name]


def implementation(group: str, name: str) -> Any:
    """The class that member `name` of `group` builds (a learner for `algo`, an env for `task`)."""
    return load(entry(group, name).builds)


def schemas():
    """(group, name, schema dataclass) of every member in this build: those whose module is missing
    are left out."""
    for group, members in GROUPS.items():
        for name, member in members.entries.items():
            module = member.config.partition(":")[0]
            try:
                yield group, name, load(member.config)
            except ModuleNotFoundError as exc:
                if not (exc.name and module.startswith(exc.name)):
                    raise


def instantiate(group: str, values: Any) -> Any:
    """The typed config of `group` from its values (a dict or DictConfig, merged onto the schema of the
    member they name): a dataclass whose own checks (`__post_init__`) ran. A dataclass is returned as is.
    A failed check or a value of the wrong type raises ValueError; a key the schema lacks, OmegaConf's
    ConfigKeyError."""
    if dataclasses.is_dataclass(values):
        return values
    from omegaconf import OmegaConf

    spec = GROUPS[group]
    name = values.get(spec.key) or spec.default
    if name is None:
        raise ValueError(f"{group}: the config names no {spec.noun} ({spec.key} is missing)")
    schema = load(entry(group, str(name)).config)
    return OmegaConf.to_object(OmegaConf.merge(schema_node(schema), values))


@functools.lru_cache(maxsize=None)
def schema_node(schema: type) -> Any:
    """A schema dataclass as OmegaConf's structured config, built once per schema: every composition merges
    onto it (the merge copies it, never changes it)."""
    from omegaconf import OmegaConf

    return OmegaConf.structured(schema)

"""The run's config as the launcher and the children read it: every group its schema dataclass, built once by the
checks (unilab.config.validation) and carried across the process boundary as it is.

`values` keeps the resolved values as run_config.json records them (what the user asked for, key by key); the
code reads the typed groups, never `values`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .schema import TrainingConfig

GROUP_KEYS = ("algo", "task", "sim", "training")


@dataclass(frozen=True)
class RunConfig:
    algo: Any  # the algorithm's schema dataclass (unilab.registry), e.g. FastSACConfig
    task: Any  # the task's, e.g. G1WalkFlatConfig
    sim: Any  # the simulator's, e.g. MjWarpSimConfig
    training: TrainingConfig
    values: dict[str, dict[str, Any]]  # the resolved values of the four groups (run_config.json)

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> RunConfig:
        """Each group's dataclass from its values; their checks run here. ValueError for a failed check or a
        value of the wrong type, OmegaConf's ConfigKeyError for a key a schema lacks."""
        typed = {group: typed_group(group, values[group]) for group in GROUP_KEYS}
        return cls(**typed, values={group: values[group] for group in GROUP_KEYS})

    @classmethod
    def recorded(cls, values: dict[str, Any], source: str) -> RunConfig:
        """A run's recorded config (its run_config.json) read back; ValueError naming `source` when it does not
        fit this version's schemas."""
        from omegaconf.errors import OmegaConfBaseException

        try:
            return cls.from_values(values)
        except (ValueError, KeyError, OmegaConfBaseException) as exc:
            raise ValueError(f"{source}: its run_config.json does not fit this unilab ({exc})") from None


def typed_group(group: str, values: Any) -> Any:
    """One group's dataclass from its values (its checks run)."""
    from omegaconf import OmegaConf

    from unilab.registry import instantiate, schema_node

    if group == "training":
        return OmegaConf.to_object(OmegaConf.merge(schema_node(TrainingConfig), values))
    return instantiate(group, values)

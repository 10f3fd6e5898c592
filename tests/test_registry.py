"""One registry: names of the algo/task/sim groups -> schema dataclass and what it builds."""

from __future__ import annotations

import pytest
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from unilab.algos.flashsac.config import FlashSACConfig
from unilab.config import register_configs
from unilab.registry import GROUPS, implementation, instantiate
from unilab.sim.config import MjWarpSimConfig
from unilab.tasks.g1_walk_flat.config import G1WalkFlatConfig


def test_every_member_is_a_registered_schema():
    register_configs()
    store = ConfigStore.instance()
    for group, spec in GROUPS.items():
        for name in spec.entries:
            node = store.load(f"{group}/{name}_schema.yaml").node
            assert OmegaConf.get_type(node).__name__ == spec.entries[name].config.rpartition(":")[2]


def test_instantiate_types_the_values_and_runs_the_schema_checks():
    algo = instantiate("algo", {"name": "flashsac", "batch_size": 128})
    assert isinstance(algo, FlashSACConfig) and algo.batch_size == 128 and algo.tau == FlashSACConfig.tau
    task = instantiate("task", OmegaConf.create({"name": "g1_walk_flat", "num_envs": 8}))
    assert isinstance(task, G1WalkFlatConfig) and task.num_envs == 8
    assert instantiate("sim", {}) == MjWarpSimConfig()  # the one backend is the default
    assert instantiate("task", task) is task  # already typed
    with pytest.raises(ValueError, match="algo.compile_mode='max-autotune'"):
        instantiate("algo", {"name": "fastsac", "compile_mode": "max-autotune"})
    with pytest.raises(ValueError, match="sim.overflow=.ignore.: expected one of error, count"):
        instantiate("sim", {"overflow": "ignore"})
    with pytest.raises(ValueError, match="unknown task 'nope'; known: g1_motion_tracking, g1_walk_flat"):
        instantiate("task", {"name": "nope"})
    with pytest.raises(ValueError, match="names no off-policy algorithm"):
        instantiate("algo", {"batch_size": 1})


def test_each_instantiation_starts_from_the_schemas_defaults():
    """The schema's node is built once and shared: one config's values never reach the next."""
    first = instantiate("task", {"name": "g1_walk_flat", "num_envs": 8, "action_scale": 0.3})
    second = instantiate("task", {"name": "g1_walk_flat"})
    assert (first.num_envs, first.action_scale) == (8, 0.3)
    assert (second.num_envs, second.action_scale) == (G1WalkFlatConfig.num_envs, G1WalkFlatConfig.action_scale)


def test_implementation_is_the_class_a_name_builds():
    from unilab.algos.fastsac.learner import FastSACLearner

    assert implementation("algo", "fastsac") is FastSACLearner
    with pytest.raises(ValueError, match="unknown off-policy algorithm 'sac'"):
        implementation("algo", "sac")  # an alias of the conf tree, not a learner

"""The schema dataclasses are the one source of config defaults.

- Every key of a `conf/{algo,task,sim}/*.yaml` must change what its `defaults` chain gives (the schema,
  or the YAML it extends): a restated default would silently shadow a later change of the schema.
- The composed configs of a set of commands equal those recorded before YAML and schema were split
  (tests/fixtures/composed_configs.json), value for value.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path

import pytest
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from train_compose import composed

from unilab.config import register_configs, register_resolvers

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
DELTA_GROUPS = ("algo", "task", "sim")
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "composed_configs.json"
MISSING = object()


# --- every YAML key is a delta ------------------------------------------------------------------


def _group_config(conf_dir: Path, group: str, name: str) -> DictConfig:
    """What `group/name` composes to on its own: its defaults chain merged, then its own keys."""
    path = conf_dir / group / f"{name}.yaml"
    if not path.exists():  # a schema registered in the ConfigStore
        return ConfigStore.instance().load(f"{group}/{name}.yaml").node
    base, body = _split(conf_dir, group, name)
    return OmegaConf.merge(base, body)


def _split(conf_dir: Path, group: str, name: str) -> tuple[DictConfig, DictConfig]:
    """(what `group/name` would be without its own keys, its own keys)."""
    body = OmegaConf.load(conf_dir / group / f"{name}.yaml")
    defaults = list(body.pop("defaults", []))
    if "_self_" in defaults:
        assert defaults[-1] == "_self_", f"{group}/{name}.yaml: _self_ must come last in its defaults"
        defaults.remove("_self_")
    parents = [_group_config(conf_dir, group, str(entry)) for entry in defaults]
    return OmegaConf.merge(*parents) if parents else OmegaConf.create(), body


def _leaves(node, prefix: str = ""):
    """(dotted key, value) of every leaf of a plain YAML mapping; lists are leaves."""
    for key, value in node.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            yield from _leaves(value, dotted)
        else:
            yield dotted, value


def _plain(value):
    return value.name if isinstance(value, Enum) else value


def restated_keys(conf_dir: Path, group: str, name: str) -> list[str]:
    """Keys of `group/name.yaml` whose value equals what its defaults chain gives without them."""
    base, body = _split(conf_dir, group, name)
    restated = []
    for key, value in _leaves(OmegaConf.to_container(body, resolve=False)):
        inherited = OmegaConf.select(base, key, default=MISSING)  # also for "???": nothing is set there
        if inherited is MISSING:
            continue
        inherited = OmegaConf.to_container(inherited) if OmegaConf.is_config(inherited) else inherited
        if _plain(inherited) == value:
            restated.append(f"{key}: {value!r}")
    return restated


def _yaml_files():
    return [(group, path.stem) for group in DELTA_GROUPS for path in sorted((CONF_DIR / group).glob("*.yaml"))]


@pytest.fixture(scope="module", autouse=True)
def _schemas():
    register_configs()
    register_resolvers()


@pytest.mark.parametrize(("group", "name"), _yaml_files(), ids=lambda v: v)
def test_yaml_holds_only_deltas(group, name):
    restated = restated_keys(CONF_DIR, group, name)
    assert not restated, (f"conf/{group}/{name}.yaml restates what its defaults give; drop these keys "
                          f"(the schema dataclass is the source of defaults): {restated}")


def test_a_restated_default_is_caught(tmp_path):
    (tmp_path / "algo").mkdir()
    (tmp_path / "algo" / "base.yaml").write_text(
        "defaults:\n  - flashsac_schema\n  - _self_\nmax_iterations: 7\n")
    (tmp_path / "algo" / "child.yaml").write_text(
        "defaults:\n  - base\n  - _self_\n"
        "name: flashsac\nmax_iterations: 7\nbatch_size: 2048\ntau: 0.5\nlr: 3.0e-4\n")
    assert restated_keys(tmp_path, "algo", "base") == []
    assert restated_keys(tmp_path, "algo", "child") == [
        "name: 'flashsac'", "max_iterations: 7", "batch_size: 2048", "lr: 0.0003"]
    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "walk.yaml").write_text(
        "defaults:\n  - g1_walk_flat_schema\n  - _self_\nrewards:\n  weights:\n    alive: 0.15\n    feet_slip: 0.0\n"
        "commands:\n  lin_vel_x: [-1.0, 1.0]\n")
    assert restated_keys(tmp_path, "task", "walk") == ["rewards.weights.alive: 0.15", "commands.lin_vel_x: [-1.0, 1.0]"]


def test_naming_an_unnamed_schema_is_a_delta(tmp_path):
    """A schema whose name is "???" sets none: a YAML that names it adds something."""
    from dataclasses import dataclass

    from unilab.algos.config import OffPolicyAlgoConfig

    @dataclass
    class Unnamed(OffPolicyAlgoConfig):
        pass

    store = ConfigStore.instance()
    store.store(group="algo", name="unnamed_test_schema", node=Unnamed)
    try:
        (tmp_path / "algo").mkdir()
        (tmp_path / "algo" / "x.yaml").write_text("defaults:\n  - unnamed_test_schema\n  - _self_\nname: x\n")
        assert restated_keys(tmp_path, "algo", "x") == []
    finally:
        del store.repo["algo"]["unnamed_test_schema.yaml"]


# --- the composed configs are what they were ------------------------------------------------------

# Commands whose composed config was recorded (Hydra overrides, as `train` passes them after the short form).
COMMANDS = [
    [],
    ["algo=flashsac"],
    ["algo=sac"],
    ["algo=fastsac", "task=g1_motion_tracking"],
    ["task=g1_motion_tracking"],
    ["algo=flashsac", "task=g1_motion_tracking"],
    ["algo=flashsac_g1_walk_flat"],
    ["algo=flashsac_g1_motion_tracking", "task=g1_motion_tracking"],
    ["+preset=cpu_smoke"],
    ["algo=flashsac", "+preset=cpu_smoke"],
    ["algo=flashsac", "task=g1_motion_tracking", "+preset=cpu_smoke"],
    ["task=g1_motion_tracking", "+preset=cpu_smoke"],
    ["+execution=mps"],
    ["+execution=default"],
    ["+execution=mps", "+bench=offpolicy_gate"],
    ["algo=flashsac", "task=g1_motion_tracking", "+execution=default", "+bench=offpolicy_gate"],
    ["algo=flashsac_g1_walk_flat", "task.num_envs=1024"],
]


def _key(overrides: list[str]) -> str:
    return " ".join(overrides) or "(default)"


def record() -> dict:
    """The fixture: the default command in full, every other command as its difference from it."""
    default = composed([])
    commands = {}
    for overrides in COMMANDS[1:]:
        flat = composed(overrides)
        commands[_key(overrides)] = {
            "changed": {k: v for k, v in flat.items() if default.get(k, MISSING) != v},
            "removed": sorted(set(default) - set(flat)),
        }
    return {"default": default, "commands": commands}


def recorded(overrides: list[str]) -> dict:
    data = json.loads(FIXTURE.read_text())
    if not overrides:
        return dict(data["default"])
    delta = data["commands"][_key(overrides)]
    flat = {k: v for k, v in data["default"].items() if k not in delta["removed"]}
    return {**flat, **delta["changed"]}


def intended_changes(expected: dict) -> dict:
    """The one recorded difference: FlashSAC's `algo.num_envs` was `${task.num_envs}`; the runtime now
    passes the env count to `make_learner`, and the composed config keeps the schema's default."""
    if expected.get("algo.name") == "flashsac":
        return {**expected, "algo.num_envs": 0}
    return expected


@pytest.mark.parametrize("overrides", COMMANDS, ids=_key)
def test_composed_config_is_unchanged(overrides):
    expected = intended_changes(recorded(overrides))
    actual = composed(overrides)
    differences = {k: (expected.get(k, "<absent>"), actual.get(k, "<absent>"))
                   for k in sorted(set(expected) | set(actual)) if expected.get(k, MISSING) != actual.get(k, MISSING)}
    assert not differences, differences


if __name__ == "__main__":
    # Re-record the fixture after an intended change of a default: `python tests/test_config_deltas.py`.
    register_configs()
    register_resolvers()
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_text(json.dumps(record(), indent=1) + "\n")
    print(f"wrote {FIXTURE}", file=sys.stderr)

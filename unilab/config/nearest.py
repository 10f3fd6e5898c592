"""The did-you-mean of an unknown key: the keys of its schema nearest to it, nested keys included
(`training.seeed` -> run.seed; at the top level `num_env` -> task.num_envs). One text for Hydra's own unknown-key
error (unilab.cli.user_errors) and for a `+key` that only the compose-time checks see (unilab.config.validation)."""

from __future__ import annotations

import dataclasses
import difflib
import typing
from typing import Any

from .run import GROUP_KEYS
from .schema import TrainingConfig


def unknown_key(full_key: str, schema: Any, members: dict[str, str] | None = None) -> str:
    """`KEY: no such key in PARENT; did you mean ...? ...` for a key `schema` (the dataclass of its parent) lacks.
    A key without a parent is one at the config's top level: the nearest are sought among the groups' keys too,
    those of the members `members` names (group -> name, e.g. task -> g1_walk_flat), or of every member."""
    parent, _, word = full_key.rpartition(".")
    if not parent:
        return (f"{full_key}: no such key at the top level of the config; "
                f"{closest(word, top_level_keys(members))}the groups are {', '.join(GROUP_KEYS)}; "
                "`train --cfg job` lists the keys")
    return f"{full_key}: no such key in {parent}; {did_you_mean(word, schema)}`train --cfg job` lists the keys"


def did_you_mean(word: str, schema: Any) -> str:
    """`did you mean A or B? ` (the nearest keys of `schema`, by their last part), or "" when none is near."""
    return closest(word, schema_keys(schema, depth=2))  # deeper ones (loop.nan_guard.enabled) are not mistyped


def closest(word: str, keys) -> str:
    """`did you mean A or B? ` (the nearest of the dotted `keys`, by their last part), or "" when none is near."""
    by_name: dict[str, list[str]] = {}
    for path in keys:
        paths = by_name.setdefault(path.rpartition(".")[2], [])
        if path not in paths:
            paths.append(path)
    close = difflib.get_close_matches(word, list(by_name), n=3, cutoff=0.5)
    found = [path for name in close for path in by_name[name]][:3]
    return f"did you mean {' or '.join(found)}? " if found else ""


def top_level_keys(members: dict[str, str] | None = None) -> list[str]:
    """The groups and their keys two deep (`task.num_envs`, `training.run.seed`): of the member each group of
    `members` names, of every member of the others."""
    from unilab import registry

    members = members or {}
    keys = list(GROUP_KEYS) + schema_keys(TrainingConfig, "training.", depth=2)
    for group, name, schema in registry.schemas():
        if members.get(group) in (None, name):
            keys += schema_keys(schema, f"{group}.", depth=2)
    return keys


def schema_keys(schema: Any, prefix: str = "", depth: int | None = None) -> list[str]:
    """Every key of a schema dataclass, dotted below its nested dataclasses (`run`, `run.seed`, ...); `depth`: at
    most that many parts."""
    if not dataclasses.is_dataclass(schema) or depth == 0:
        return []
    try:
        hints = typing.get_type_hints(schema)
    except Exception:  # noqa: BLE001 - a hint that does not resolve: its own keys only
        hints = {}
    keys = []
    for f in dataclasses.fields(schema):
        if f.name.startswith("_"):
            continue
        keys.append(prefix + f.name)
        inner = hints.get(f.name)
        if isinstance(inner, type) and dataclasses.is_dataclass(inner):
            keys += schema_keys(inner, f"{prefix}{f.name}.", None if depth is None else depth - 1)
    return keys

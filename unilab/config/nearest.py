"""The did-you-mean of an unknown key: the keys of its schema nearest to it, nested keys included
(`training.seeed` -> run.seed). One text for Hydra's own unknown-key error (unilab.cli.user_errors) and for a
`+key` that only the compose-time checks see (unilab.config.validation)."""

from __future__ import annotations

import dataclasses
import difflib
import typing
from typing import Any


def unknown_key(full_key: str, schema: Any) -> str:
    """`KEY: no such key in PARENT; did you mean ...? ...` for a key `schema` (the dataclass of its parent)
    lacks."""
    parent, _, word = full_key.rpartition(".")
    return f"{full_key}: no such key in {parent or 'the config'}; {did_you_mean(word, schema)}" \
           "`train --cfg job` lists the keys"


def did_you_mean(word: str, schema: Any) -> str:
    """`did you mean A or B? ` (the nearest keys of `schema`, by their last part), or "" when none is near."""
    by_name: dict[str, list[str]] = {}
    for path in schema_keys(schema, depth=2):  # deeper ones (loop.nan_guard.enabled) are not what one mistypes
        by_name.setdefault(path.rpartition(".")[2], []).append(path)
    close = difflib.get_close_matches(word, list(by_name), n=3, cutoff=0.5)
    found = [path for name in close for path in by_name[name]][:3]
    return f"did you mean {' or '.join(found)}? " if found else ""


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

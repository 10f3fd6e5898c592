"""What the tools that check a `train` command print: the config `train` would compose, and the message of an
error the user can fix (the same text for `train`, `unilab warmup` and `unilab mps doctor`)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from omegaconf import DictConfig

from unilab.config import register_configs, register_resolvers
from unilab.config.nearest import closest, unknown_key

# OmegaConf's message templates and type bookkeeping say nothing a user can act on; Hydra's advice to
# append an unknown key (`+key=value`) would only add a key the schemas lack, which `train` refuses.
_NOISE = re.compile(r"\$VALUE|^\s*(reference_type|object_type)=|^To append to your config use \+")
CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")
_MISSING_OPTION = re.compile(r"Could not find '(\w+)/([^']+)'")
_MISSING_KEY = re.compile(r"Key '([^']+)' not in '\w+'")
_NOT_AN_OVERRIDE = re.compile(r"Error parsing override '([^'=]+)'\s*\n\s*missing EQUAL")


def compose_train(overrides: list[str]) -> DictConfig:
    """The config `train` would compose from these overrides (Hydra's compose API; nothing resolved yet): for
    the tools that check a train command without running it (`unilab mps doctor`, `unilab warmup`)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_configs()
    register_resolvers()
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3", job_name="train"):
        return compose(config_name="train", overrides=overrides)


def _hint(chain: list[BaseException]) -> str | None:
    """What Hydra reports in its own terms (a group option it cannot find, with the schema nodes among the options
    and its search path; a key a schema lacks; an argument that is no override), said in the user's: the
    choices of the group or the keys of the schema, the nearest first."""
    from unilab.config.catalog import GROUPS, choices

    text = "\n".join(str(e) for e in chain)
    if found := _MISSING_OPTION.search(text):
        group, name = found.groups()
        if group in GROUPS:
            options = choices(group)
            return f"{group}={name}: no such {group}; {closest(name, options)}choose one of: {', '.join(options)}"
    if found := _MISSING_KEY.search(text):
        key = found.group(1)
        schema = next((getattr(e, "object_type", None) for e in chain if getattr(e, "object_type", None)), None)
        full = next((getattr(e, "full_key", None) for e in chain if getattr(e, "full_key", None)), None) or key
        if schema is not None and dataclasses.is_dataclass(schema):
            return unknown_key(full, schema)
    if found := _NOT_AN_OVERRIDE.search(text):
        arg = found.group(1)
        tasks = ", ".join(choices("task"))
        return (f"{arg}: not a key=value override. Tasks are chosen with --task NAME (available: {tasks}), "
                f"algorithms with --algo NAME; `train --help` shows the short form")
    return None


def user_error(exc: BaseException) -> str | None:
    """The message to print for an error the user can fix, or None for a bug."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from unilab.config import ConfigError, RequestError
    from unilab.config.validation import render
    from unilab.mps import CudaProcessSharingError

    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and not any(cur is seen for seen in chain):
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    for e in chain:
        if isinstance(e, RequestError):  # the checks, reached by resolving the config
            return render(e.error)
        if isinstance(e, (CudaProcessSharingError, ConfigError)):  # our own message already says what to change
            return render(e)
    if any(isinstance(e, (HydraException, OmegaConfBaseException)) for e in chain):
        hint = _hint(chain)
        if hint:
            return "unilab: invalid configuration\n  " + hint
        lines: list[str] = []
        for e in chain:
            for line in str(e).strip().splitlines():
                if line.strip() and line not in lines and not _NOISE.search(line):
                    lines.append(line)
        return "unilab: invalid configuration\n" + "\n".join("  " + line for line in lines)
    return None

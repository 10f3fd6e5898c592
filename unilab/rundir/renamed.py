"""Old spellings of config keys, in today's: the `training` group was one flat list of keys before it was nested
by concern (training.seed is now training.run.seed). The one upgrade of them, for the command line of `train`
(its sweeps, and the tools that compose a train command), rewritten before Hydra composes, with a note per old
key on stderr; and for a recorded run_config.json read back (resume, `unilab config diff`, play, eval), with one
note per file.

`RENAMED` (old key -> new key) is the table the docs' readers need; unilab.config.schema's nested dataclasses
hold the same leaves (tests/test_renamed.py keeps them in step)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

# group of training -> its keys that were at training.<key>
TRAINING_GROUPS = {
    "run": ("device", "devices", "seed", "log_dir", "run_name", "resume", "resume_refill_fraction"),
    "loop": ("env_steps_per_sync", "update_before_ingest", "ingress_slots", "nan_guard", "stall_timeout_s",
             "startup_timeout_s", "dist_timeout_s"),
    "mps": ("cuda_process_sharing", "block_ambient_mps", "mps_active_thread_percentage", "mps_client_priority",
            "mps_probe_timeout_s", "mps_attach_timeout_s"),
    "outputs": ("keep_checkpoints", "logger", "wandb_project", "wandb_mode", "video_interval", "no_play",
                "play_envs", "play_steps", "export_onnx"),
}
_GROUP_OF = {key: group for group, keys in TRAINING_GROUPS.items() for key in keys}
RENAMED = {f"training.{key}": f"training.{group}.{key}" for key, group in _GROUP_OF.items()}
# `+key=v`, `++key=v`, `~key`, `key=v`: the key between the prefix and `=`
_OVERRIDE = re.compile(r"(?P<prefix>[+~]*)(?P<key>[^=]+)(?P<rest>=.*)?", re.DOTALL)


def new_spelling(key: str) -> tuple[str, str] | None:
    """(old key, today's spelling of `key`) for a key at or below an old training key
    (training.mps_client_priority.learner -> training.mps.mps_client_priority.learner); None for any other."""
    head, _, tail = key.partition(".")
    leaf, dot, below = tail.partition(".")
    if head != "training" or leaf not in _GROUP_OF:
        return None
    old = f"training.{leaf}"
    return old, RENAMED[old] + dot + below


def upgrade_overrides(overrides: list[str], say: Callable[[str], None] | None = None) -> list[str]:
    """The overrides with every old key in today's spelling; a note per old key (`say`, default stderr)."""
    out, noted = [], []
    for arg in overrides:
        match = None if arg.startswith("-") and not arg.startswith("~") else _OVERRIDE.fullmatch(arg)
        renamed = new_spelling(match["key"]) if match else None
        if renamed is None:
            out.append(arg)
            continue
        out.append(match["prefix"] + renamed[1] + (match["rest"] or ""))
        if renamed[0] not in noted:
            noted.append(renamed[0])
            (say or _stderr)(f"note: {renamed[0]} is now {RENAMED[renamed[0]]}")
    return out


_NOTED: set[str] = set()


def upgrade_training_values(config: Any, source: str = "a run_config.json",
                            say: Callable[[str], None] | None = None) -> Any:
    """A recorded config (run_config.json's groups) with its flat training keys moved into their groups, in
    place; one note for the file (it records every key, so a note per key would bury the output)."""
    training = config.get("training") if isinstance(config, dict) else None
    if not isinstance(training, dict):
        return config
    moved = [key for key in training if key in _GROUP_OF]
    for key in moved:
        value = training.pop(key)
        group = training.setdefault(_GROUP_OF[key], {})
        if isinstance(group, dict):
            group.setdefault(key, value)
    if moved and (say is not None or source not in _NOTED):
        _NOTED.add(source)  # a tool that reads the file twice says it once
        first = f"training.{moved[0]}"
        more = f", and {len(moved) - 1} more" if len(moved) > 1 else ""
        (say or _stderr)(f"note: {source} has training's keys of an earlier unilab, read in today's spelling "
                         f"({first} is now {RENAMED[first]}{more})")
    return config


def _stderr(line: str) -> None:
    print(f"unilab: {line}", file=sys.stderr, flush=True)

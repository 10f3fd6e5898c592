"""run_config.json: the fully resolved config of a run, and the A/B diff between two runs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


from unilab.atomic import write_json_atomic
from .layout import RUN_CONFIG_FILE
from .renamed import upgrade_training_values


def write_run_config(run_dir: str | os.PathLike, config: dict[str, Any]) -> Path:
    return write_json_atomic(Path(run_dir) / RUN_CONFIG_FILE, config)


def load_run_config(run: str | os.PathLike) -> dict[str, Any]:
    """Accepts a run directory or the path of its run_config.json."""
    path = Path(run)
    if path.is_dir():
        path = path / RUN_CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such run_config.json")
    try:
        text = path.read_text()
    except UnicodeDecodeError:  # a checkpoint or another binary file given for a run
        raise ValueError(f"{path}: not a run_config.json (a binary file, not JSON text)") from None
    try:
        return upgrade_config(json.loads(text), str(path))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc


def upgrade_config(config: Any, source: str = "a run_config.json") -> Any:
    """An earlier version's run config in today's keys: training.tensorboard (true/false) became
    training.logger ([tensorboard]/[]), and the flat training keys went into their groups (unilab.rundir.renamed);
    a tracking run from before task.solver_iterations trained with the G1 model's solver cap of 10, which eval
    and play must keep (today's default is lower)."""
    training = config.get("training") if isinstance(config, dict) else None
    if isinstance(training, dict) and "tensorboard" in training:
        enabled = training.pop("tensorboard")
        training.setdefault("logger", ["tensorboard"] if enabled else [])
    upgrade_training_values(config, source)
    task = config.get("task") if isinstance(config, dict) else None
    if isinstance(task, dict) and task.get("name") == "g1_motion_tracking":
        task.setdefault("solver_iterations", 10)
    return config


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        if not data and prefix:
            out[prefix] = {}
        return out
    return {prefix: data}


_ABSENT = object()


def diff_configs(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, value in a, value in b) for every dotted key whose values differ; absent keys show as <absent>."""
    fa, fb = flatten(a), flatten(b)
    rows = []
    for key in sorted(set(fa) | set(fb)):
        va, vb = fa.get(key, _ABSENT), fb.get(key, _ABSENT)
        if va != vb:
            rows.append((key, "<absent>" if va is _ABSENT else va, "<absent>" if vb is _ABSENT else vb))
    return rows


# What a checkpoint's weights are shaped by: a resume that changes one of them is refused (exit 2), never
# zero-padded (FastSAC's upgrade of checkpoints written before the 8-aligned widths is the one exception).
STRUCTURE_KEYS = ("algo.name", "task.name")
STRUCTURE_SUFFIXES = ("hidden_dim", "num_blocks", "expansion", "num_critics", "num_atoms", "obs_normalization")


def structure_of(config: dict[str, Any]) -> dict[str, Any]:
    """The structural keys of a config (dotted name -> value); checkpoints record them."""
    flat = flatten({"algo": config.get("algo", {}), "task": {"name": config.get("task", {}).get("name")}})
    return {k: v for k, v in flat.items()
            if k in STRUCTURE_KEYS or (k.startswith("algo.") and k.endswith(STRUCTURE_SUFFIXES))}


def structure_diff(checkpoint: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """`key: checkpoint X, now Y` for each structural key that differs. Under the same algorithm a key only
    one side has (added or removed by another unilab version) is left to the learner's load."""
    same_algo = checkpoint.get("algo.name") == now.get("algo.name")
    keys = set(checkpoint) & set(now) if same_algo else set(checkpoint) | set(now)
    return [f"{k}: checkpoint {checkpoint.get(k, '<absent>')}, now {now.get(k, '<absent>')}"
            for k in sorted(keys) if checkpoint.get(k, _ABSENT) != now.get(k, _ABSENT)]

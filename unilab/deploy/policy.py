"""The policy to deploy: an ONNX file exported by `unilab export` (or at the end of training), found from a run
directory or named directly, read with onnxruntime, its metadata checked (unilab.rundir.policy)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from unilab.rundir.policy import read_metadata


class DeployError(ValueError):
    """Bad input to a deploy command (a missing file, a file without unilab metadata, a wrong task, a bad
    command) or an unmet prerequisite (onnxruntime, imageio, offscreen OpenGL): exit 2, nothing written."""


def find_policy(path: str | Path) -> Path:
    """The ONNX file: `path` itself, or in a run directory its policy.onnx, else its newest policy_iter_*.onnx."""
    p = Path(path).expanduser()
    if p.is_file():
        return p
    if not p.exists():
        raise DeployError(f"{path}: no such file or directory")
    if (p / "policy.onnx").is_file():
        return p / "policy.onnx"
    exported = sorted(p.glob("policy_iter_*.onnx"),
                      key=lambda f: int(re.sub(r"\D", "", f.stem) or 0))
    if not exported:
        raise DeployError(f"{path}: no policy.onnx or policy_iter_*.onnx in it; write one with `unilab export {path}`")
    return exported[-1]


class OnnxPolicy:
    """obs (obs_dim,) -> action (action_dim,) in [-1, 1], with the metadata (`meta`) that says how to use it."""

    def __init__(self, path: str | Path, tasks: tuple[str, ...] | None = None):
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise DeployError("running an ONNX policy needs onnxruntime: pip install onnxruntime") from exc
        self.path = find_policy(path)
        try:
            session = ort.InferenceSession(str(self.path), providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own types for a file that is no model
            raise DeployError(f"{self.path}: not an ONNX model onnxruntime can load ({exc})") from None
        try:
            self.meta = read_metadata(session.get_modelmeta().custom_metadata_map)
        except ValueError as exc:
            raise DeployError(f"{self.path}: {exc}") from None
        self.notes: list[str] = []
        if self.meta["schema"] != "unilab.policy/2":
            self.notes = fill_schema_1(self.meta)
        if tasks is not None and self.meta["task"] not in tasks:
            raise DeployError(f"{self.path} is a policy for task {self.meta['task']!r}; this runs {', '.join(tasks)}")
        (inp,) = session.get_inputs()
        if inp.shape[-1] != self.meta["obs_dim"]:
            raise DeployError(f"{self.path}: the model takes {inp.shape[-1]} observations, its metadata says "
                              f"{self.meta['obs_dim']}")
        self._session, self._input = session, inp.name

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        (action,) = self._session.run(None, {self._input: np.asarray(obs, dtype=np.float32)[None]})
        return action[0]


def fill_schema_1(meta: dict) -> list[str]:
    """A schema 1 walk policy names no gait period, start state or terminations: take this unilab's task defaults
    (what the policy was trained with unless its run changed them); returns the note to print. Other tasks' schema 1
    policies stay as they are (their rollout refuses what it lacks)."""
    if meta["task"] != "g1_walk_flat":
        return []
    from unilab.assets.g1 import G1_DEFAULT_BASE_HEIGHT
    from unilab.tasks.g1_walk_flat.config import G1WalkFlatConfig
    from unilab.tasks.g1_walk_flat.metadata import deploy_description

    cfg = G1WalkFlatConfig()
    part = deploy_description(gait_period_s=cfg.rewards.gait_period_s, stance_fraction=cfg.rewards.stance_fraction,
                              base_height=G1_DEFAULT_BASE_HEIGHT, min_base_height=cfg.terminations.min_base_height,
                              max_tilt_rad=cfg.terminations.max_tilt_rad)
    for key in ("episode_start", "terminations", "gait", "command"):
        meta[key] = part[key]
    return [f"note: schema {meta['schema']} metadata names no gait period, start state or terminations; using this "
            f"unilab's g1_walk_flat defaults (gait period {cfg.rewards.gait_period_s:g} s); re-export the policy "
            "to carry them"]

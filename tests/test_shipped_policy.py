"""The walk policy that ships in the package (unilab/assets/policies): it runs in onnxruntime alone, and its
metadata still describes the G1 and the observation this unilab builds, so that it is not silently stale."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import unilab
from unilab.assets.g1 import G1_JOINT_NAMES

POLICIES = Path(unilab.__file__).parent / "assets" / "policies"
WALK = POLICIES / "g1_walk_flat_fastsac.onnx"


def _metadata(path: Path) -> dict:
    onnx = pytest.importorskip("onnx")
    return {p.key: p.value for p in onnx.load(str(path)).metadata_props}


def test_the_walk_policy_ships_with_its_provenance():
    record = json.loads(WALK.with_suffix(".json").read_text())
    assert record["policy"] == WALK.name and WALK.stat().st_size < 5 * 2**20  # a few MB at most
    for key in ("trained_with", "exported_with", "code", "host", "date", "eval"):
        assert record[key], key
    meta = _metadata(WALK)
    assert (meta["task"], meta["algo"], int(meta["iteration"])) == (record["task"], record["algo"], record["iteration"])


def test_the_walk_policy_fits_this_g1():
    meta = _metadata(WALK)
    assert json.loads(meta["joint_names"]) == list(G1_JOINT_NAMES)
    sizes = json.loads(meta["observation_sizes"])
    assert sum(sizes) == int(meta["obs_dim"]) and int(meta["action_dim"]) == len(G1_JOINT_NAMES)


def test_the_walk_policy_runs_in_onnxruntime_alone():
    ort = pytest.importorskip("onnxruntime")
    meta = _metadata(WALK)
    session = ort.InferenceSession(str(WALK), providers=["CPUExecutionProvider"])
    (inp,) = session.get_inputs()
    obs = np.random.default_rng(0).normal(size=(4, int(meta["obs_dim"]))).astype(np.float32)
    (action,) = session.run(None, {inp.name: obs})
    assert action.shape == (4, int(meta["action_dim"])) and np.all(np.abs(action) <= 1.0)

"""`unilab export`: a tiny CPU run (conftest.walk_run) exported to ONNX, run in onnxruntime against the
torch policy, its metadata checked; a lone checkpoint file; bad input exits 2 and writes nothing."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from unilab.assets import g1

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")


def _export(*args) -> int:
    from unilab.cli.tools import main as tools_main

    return tools_main(["export", *map(str, args)])


def _torch_policy(run, checkpoint):
    from unilab.registry import instantiate
    from unilab.rundir.run_config import load_run_config
    from unilab.runtime.play import load_learner
    from unilab.tasks import make_env

    config = load_run_config(run)
    env = make_env(instantiate("task", {**config["task"], "num_envs": 1}), instantiate("sim", config["sim"]), "cpu", 0)
    learner, _ = load_learner(instantiate("algo", config["algo"]), env, checkpoint, "cpu", 0)
    return env, learner


@pytest.mark.integration
def test_export_matches_the_torch_policy_and_carries_metadata(walk_run, capsys):
    assert _export(walk_run) == 0
    path = walk_run / "policy_iter_0000006.onnx"
    assert str(path) in capsys.readouterr().out
    env, learner = _torch_policy(walk_run, walk_run / "checkpoints" / "iter_0000006.pt")
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    obs = torch.randn(16, env.obs_dim, generator=torch.Generator().manual_seed(0))
    (action,) = session.run(None, {"obs": obs.numpy()})
    torch.testing.assert_close(torch.from_numpy(action), learner.act(obs, deterministic=True), atol=1e-5, rtol=1e-4)

    meta = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    from unilab.rundir.policy import METADATA_KEYS, METADATA_SCHEMA

    assert set(METADATA_KEYS) <= set(meta)
    value = {k: meta[k] if k in ("schema", "unilab_version", "task", "algo", "checkpoint", "action_bounds",
                                 "action_to_target") else json.loads(meta[k]) for k in METADATA_KEYS}
    import unilab

    assert value["schema"] == METADATA_SCHEMA and value["unilab_version"] == unilab.__version__
    assert (value["task"], value["algo"], value["iteration"]) == ("g1_walk_flat", "fastsac", 6)
    assert value["control_dt"] == pytest.approx(0.02) and value["action_bounds"] == "joint_limits"
    nu = len(g1.G1_JOINT_NAMES)
    assert value["joint_names"] == list(g1.G1_JOINT_NAMES) and value["action_dim"] == nu
    assert value["default_joint_pos"] == pytest.approx(list(g1.G1_DEFAULT_QPOS_JOINTS), abs=1e-6)
    low, high = env.action_spans()
    assert value["action_span_low"] == pytest.approx(low.tolist(), abs=1e-6)
    assert value["action_span_high"] == pytest.approx(high.tolist(), abs=1e-6)
    assert min(value["action_span_low"] + value["action_span_high"]) >= 0.0 and len(value["action_span_low"]) == nu
    m = env.mj_model
    assert value["kp"] == pytest.approx(m.actuator_gainprm[:, 0].tolist(), rel=1e-6)
    assert value["kd"] == pytest.approx((-m.actuator_biasprm[:, 2]).tolist(), rel=1e-6)
    assert min(value["kp"]) > 0 and min(value["kd"]) > 0
    assert value["kp"] == pytest.approx(g1.G1_KP.tolist(), rel=1e-6)
    assert value["kd"] == pytest.approx(g1.G1_KD.tolist(), rel=1e-6)
    assert value["observation_names"][:2] == ["base_ang_vel", "projected_gravity"]
    assert sum(value["observation_sizes"]) == value["obs_dim"] == env.obs_dim
    sizes = dict(zip(value["observation_names"], value["observation_sizes"]))
    scales = dict(zip(value["observation_names"], value["observation_scales"]))
    assert sizes["joint_pos_rel"] == sizes["joint_vel"] == sizes["last_action"] == nu and sizes["command"] == 3
    assert scales["base_ang_vel"] == 0.25 and scales["joint_vel"] == 0.05 and value["observation_clip"] == 100.0


@pytest.mark.integration
def test_export_of_an_older_or_lone_checkpoint(walk_run, tmp_path):
    ckpt = walk_run / "checkpoints" / "iter_0000003.pt"
    out = tmp_path / "iter3.onnx"
    assert _export(walk_run, "--checkpoint", ckpt, "--out", out, "--format", "onnx") == 0
    meta = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    assert json.loads(meta["iteration"]) == 3 and meta["checkpoint"] == "iter_0000003.pt"
    out = tmp_path / "lone.onnx"
    assert _export(ckpt, "--out", out) == 0
    assert json.loads({p.key: p.value for p in onnx.load(str(out)).metadata_props}["iteration"]) == 3


@pytest.mark.integration
def test_bad_input_exits_2_and_writes_nothing(walk_run, tmp_path, capsys):
    assert _export(tmp_path) == 2
    assert "not a run directory" in capsys.readouterr().err
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(walk_run / "run_config.json", bare / "run_config.json")
    assert _export(bare) == 2
    assert "no checkpoint" in capsys.readouterr().err
    assert _export(walk_run, "--format", "tflite", "--out", tmp_path / "x.onnx") == 2
    assert "--format tflite" in capsys.readouterr().err
    stray = tmp_path / "stray.pt"
    torch.save({"iteration": 1, "env_steps": 8, "learner": {"actor": {}}}, stray)
    assert _export(walk_run, "--checkpoint", stray, "--out", tmp_path / "y.onnx") == 2
    assert "does not fit" in capsys.readouterr().err
    assert _export(stray) == 2  # a lone file outside a run
    assert "not a run directory" in capsys.readouterr().err
    assert _export(walk_run, "--out", tmp_path / "missing" / "z.onnx") == 2
    assert "is not a directory" in capsys.readouterr().err
    assert not list(tmp_path.rglob("*.onnx")) and not list(walk_run.glob(".export_*"))


@pytest.mark.integration
def test_the_end_of_training_export_carries_the_same_metadata(walk_run):
    """training.outputs.export_onnx=true: policy.onnx at the end of the run says what `unilab export` of the run's
    last checkpoint says (the env's part comes from the collector, the rest from the learner)."""
    assert _export(walk_run, "--out", walk_run / "exported.onnx") == 0
    at_end = {p.key: p.value for p in onnx.load(str(walk_run / "policy.onnx")).metadata_props}
    exported = {p.key: p.value for p in onnx.load(str(walk_run / "exported.onnx")).metadata_props}
    from unilab.rundir.policy import METADATA_KEYS

    assert set(METADATA_KEYS) <= set(at_end) and json.loads(at_end["iteration"]) == 6
    assert {k: at_end[k] for k in METADATA_KEYS} == {k: exported[k] for k in METADATA_KEYS}

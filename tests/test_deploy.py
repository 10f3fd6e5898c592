"""unilab.deploy (`unilab sim2sim`) without Warp or a network: the metadata's schema and completeness, the
observation built from a hand-made MjData state, actions to PD targets, mjlab's G1 from a small local wheel mapped
by joint name, bad input exiting 2, and no torch or warp in a sim2sim process. tests/test_sim2sim_agreement.py pins
the observation to the MJWarp env."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import unilab
from unilab.assets import g1
from unilab.rundir.policy import METADATA_KEYS, METADATA_SCHEMA, read_metadata
from unilab.sim.headless import mujoco

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

ROOT = Path(unilab.__file__).resolve().parents[1]
WALK = Path(unilab.__file__).parent / "assets" / "policies" / "g1_walk_flat_fastsac.onnx"


def _props(path: Path = WALK) -> dict[str, str]:
    return {p.key: p.value for p in onnx.load(str(path)).metadata_props}


def _sim2sim(*args) -> int:
    from unilab.cli.tools import main

    return main(["sim2sim", *map(str, args)])


# ------------------------------------------------------------------------------------------------- metadata
def test_schema_2_is_complete_and_schema_1_is_still_read():
    meta = read_metadata(_props())
    assert meta["schema"] == METADATA_SCHEMA and set(meta) == set(METADATA_KEYS)
    assert all(meta[k] is not None for k in ("observation_frames", "episode_start", "terminations", "gait", "command",
                                             "model"))
    assert len(meta["observation_frames"]) == len(meta["observation_names"])
    model = meta["model"]
    nu = len(g1.G1_JOINT_NAMES)
    assert len(model["armature"]) == len(model["effort_limit"]) == nu
    assert (model["timestep"], model["decimation"]) == (0.005, 4) and model["timestep"] * 4 == meta["control_dt"]
    old = {k: v for k, v in _props().items() if k in METADATA_KEYS[:METADATA_KEYS.index("observation_frames")]}
    old["schema"] = "unilab.policy/1"
    assert read_metadata(old)["gait"] is None and read_metadata(old)["kp"] == meta["kp"]
    with pytest.raises(ValueError, match="lacks gait"):
        read_metadata({k: v for k, v in _props().items() if k != "gait"})
    with pytest.raises(ValueError, match="no unilab metadata"):
        read_metadata({})
    with pytest.raises(ValueError, match="unilab.policy/9"):
        read_metadata({**_props(), "schema": "unilab.policy/9"})


class _Backend:
    def __init__(self, model):
        self.mj_model = model


class _Cfg:
    action_bounds = "uniform"

    class observations:
        clip = 100.0


class _FakeWalkEnv:
    """The attributes env_description reads, over the real G1 model (no backend, no Warp)."""

    def __init__(self, frames=None):
        import torch

        from unilab.tasks.g1_walk_flat.metadata import OBSERVATION_FRAMES, deploy_description

        self.mj_model = g1.build_g1_model()
        self.backend, self.cfg = _Backend(self.mj_model), _Cfg()
        self.sim_cfg = type("Sim", (), {"decimation": 4})()
        self.dt, self.action_dim, self.action_scale = 0.02, self.mj_model.nu, 0.25
        self.default_joint_pos = torch.as_tensor(g1.G1_DEFAULT_QPOS_JOINTS)
        self.action_to_target = "default_joint_pos + action * span"
        self._layout = [(name, 3, 1.0) for name in OBSERVATION_FRAMES]
        self.obs_dim = 3 * len(self._layout)
        part = deploy_description(gait_period_s=0.8, stance_fraction=0.55, base_height=0.75, min_base_height=0.3,
                                  max_tilt_rad=1.0)
        self._part = part if frames is None else {**part, "observation_frames": frames}

    def action_spans(self):
        span = self.default_joint_pos * 0 + 0.25
        return span, span

    def policy_obs_layout(self):
        return self._layout

    def deploy_description(self):
        return self._part


def test_the_env_description_names_every_key_and_every_term_its_frame():
    from unilab.assets.fingerprint import model_fingerprint
    from unilab.rundir.policy import metadata_props
    from unilab.tasks.common.metadata import env_description

    env = _FakeWalkEnv()
    props = metadata_props(env_description(env), task="g1_walk_flat", algo="x", checkpoint="c", iteration=1,
                           env_steps=2)
    meta = read_metadata(props)
    assert meta["model"]["fingerprint"] == model_fingerprint(env.mj_model)
    assert meta["model"]["armature"] == pytest.approx(env.mj_model.dof_armature[6:].tolist(), rel=1e-6)
    assert meta["model"]["effort_limit"] == pytest.approx(list(g1.G1_EFFORT_LIMIT))
    assert meta["gait"]["period_s"] == 0.8 and "mod 1" in meta["gait"]["phase"]
    with pytest.raises(ValueError, match="observation_frames"):
        env_description(_FakeWalkEnv(frames={"base_ang_vel": "somewhere"}))


def test_the_shipped_policy_was_trained_on_this_g1():
    from unilab.assets.fingerprint import model_fingerprint

    assert read_metadata(_props())["model"]["fingerprint"] == model_fingerprint(g1.build_g1_model())


# ------------------------------------------------------------------------------------------------ observation
def _walk_meta() -> dict:
    return read_metadata(_props())


def test_the_walk_observation_from_a_hand_made_state():
    from unilab.deploy.observe import Robot, WalkInputs, action_targets, walk_observation

    meta = _walk_meta()
    model = g1.build_g1_model()
    robot = Robot(model, meta["joint_names"])
    data = mujoco.MjData(model)
    yaw, pitch = 0.7, 0.3  # a heading, then a nose-down pitch about the body y axis
    qz = np.array([math.cos(yaw / 2), 0, 0, math.sin(yaw / 2)])
    qy = np.array([math.cos(pitch / 2), 0, math.sin(pitch / 2), 0])
    quat = np.zeros(4)
    mujoco.mju_mulQuat(quat, qz, qy)
    data.qpos[3:7] = quat
    joint_pos = np.linspace(-0.2, 0.3, 29)
    joint_vel = np.linspace(1.0, -2.0, 29)
    for name, q, v in zip(meta["joint_names"], joint_pos, joint_vel):
        data.qpos[model.joint(name).qposadr[0]] = q
        data.qvel[model.joint(name).dofadr[0]] = v
    data.qvel[3:6] = (0.4, -0.8, 1.2)  # body frame angular velocity
    last = np.linspace(-1, 1, 29)
    command = np.array([0.5, -0.2, 0.3])
    obs = walk_observation(meta, robot, data, WalkInputs(command, 7, last))

    parts = dict(zip(meta["observation_names"], np.split(obs, np.cumsum(meta["observation_sizes"])[:-1])))
    np.testing.assert_allclose(parts["base_ang_vel"], 0.25 * np.array([0.4, -0.8, 1.2]), atol=1e-6)
    # gravity in a frame pitched nose-down by 0.3: (sin 0.3, 0, -cos 0.3), whatever the heading
    np.testing.assert_allclose(parts["projected_gravity"], [math.sin(pitch), 0.0, -math.cos(pitch)], atol=1e-6)
    np.testing.assert_allclose(parts["joint_pos_rel"], joint_pos - g1.G1_DEFAULT_QPOS_JOINTS, atol=1e-6)
    np.testing.assert_allclose(parts["joint_vel"], 0.05 * joint_vel, atol=1e-6)
    np.testing.assert_allclose(parts["last_action"], last, atol=1e-6)
    np.testing.assert_allclose(parts["command"], command, atol=1e-6)
    phase = 2 * math.pi * ((7 * 0.02 / 0.8) % 1.0)
    np.testing.assert_allclose(parts["gait_phase_sin_cos"], [math.sin(phase), math.cos(phase)], atol=1e-6)

    action = np.array([-2.0, -0.5, 0.0, 0.5, 2.0] + [0.0] * 24)
    targets = action_targets(meta, action)
    low, high, default = (np.asarray(meta[k]) for k in ("action_span_low", "action_span_high", "default_joint_pos"))
    expected = default[:5] + np.array([-low[0], -0.5 * low[1], 0.0, 0.5 * high[3], high[4]])
    np.testing.assert_allclose(targets[:5], expected, atol=1e-9)
    offset = np.full(29, 0.1)
    np.testing.assert_allclose(action_targets(meta, action, offset)[:5], expected - default[:5] + 0.1, atol=1e-9)


# -------------------------------------------------------------------------------------------- mjlab by name
TINY_G1 = """<mujoco model="tiny_g1">
  <worldbody>
    <body name="pelvis" pos="0 0 0.5">
      <freejoint name="floating_base_joint"/>
      <geom name="pelvis_collision" type="sphere" size="0.1" contype="1" conaffinity="1"/>
      <body name="left_knee_link" pos="0 0.1 -0.2">
        <joint name="left_knee_joint" axis="0 1 0" range="-0.1 2.8"/>
        <geom type="capsule" size="0.03" fromto="0 0 0 0 0 -0.2" contype="1" conaffinity="1"/>
      </body>
      <body name="left_hip_pitch_link" pos="0 -0.1 -0.2">
        <joint name="left_hip_pitch_joint" axis="0 1 0" range="-2.5 2.8"/>
        <geom type="capsule" size="0.03" fromto="0 0 0 0 0 -0.2" contype="1" conaffinity="1"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


def _tiny_wheel(folder: Path) -> None:
    """mjlab 1.6.0 as a wheel that holds only a two-joint 'G1' (its joints in the other order than the policy's)."""
    folder.mkdir()
    name = "mjlab-1.6.0"
    with zipfile.ZipFile(folder / f"{name}-py3-none-any.whl", "w") as zf:
        zf.writestr("mjlab/asset_zoo/robots/unitree_g1/xmls/g1.xml", TINY_G1)
        zf.writestr(f"{name}.dist-info/METADATA", "Metadata-Version: 2.1\nName: mjlab\nVersion: 1.6.0\n")
        zf.writestr(f"{name}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                               "Tag: py3-none-any\n")
        zf.writestr(f"{name}.dist-info/RECORD", "")


def _tiny_meta() -> dict:
    return {"task": "g1_walk_flat", "joint_names": ["left_hip_pitch_joint", "left_knee_joint"],
            "kp": [40.0, 99.0], "kd": [2.5, 6.3], "default_joint_pos": [-0.3, 0.6], "control_dt": 0.02,
            "model": {"timestep": 0.004, "decimation": 5, "integrator": "mjINT_IMPLICITFAST", "iterations": 7,
                      "ls_iterations": 9, "armature": [0.01, 0.025], "effort_limit": [88.0, 139.0]}}


def test_mjlab_model_gets_our_actuators_and_armature_by_joint_name(tmp_path, monkeypatch):
    from unilab.deploy.model import build_model, decimation
    from unilab.deploy.observe import Robot
    from unilab.deploy.policy import DeployError

    _tiny_wheel(tmp_path / "index")
    monkeypatch.setenv("UNILAB_WHEEL_INDEX", str(tmp_path / "index"))
    monkeypatch.setenv("UNILAB_CACHE_DIR", str(tmp_path / "cache"))
    meta = _tiny_meta()
    model, notes = build_model(meta, "mjlab")
    assert model.nu == 2 and "model mjlab" in notes[0]
    for name, kp, kd, arm, limit in zip(meta["joint_names"], meta["kp"], meta["kd"], meta["model"]["armature"],
                                        meta["model"]["effort_limit"]):
        joint = model.joint(name)
        (act,) = [a for a in range(model.nu) if model.actuator_trnid[a, 0] == joint.id]
        assert model.actuator_gainprm[act, 0] == kp and -model.actuator_biasprm[act, 2] == kd
        assert model.actuator_forcerange[act].tolist() == [-limit, limit]
        assert model.dof_armature[joint.dofadr[0]] == pytest.approx(arm)
    # the model's own order is knee, hip; the policy's hip, knee: the robot reads and drives by name
    robot = Robot(model, meta["joint_names"])
    data = mujoco.MjData(model)
    data.qpos[model.joint("left_hip_pitch_joint").qposadr[0]] = 0.11
    data.qpos[model.joint("left_knee_joint").qposadr[0]] = 0.22
    assert robot.joint_pos(data).tolist() == [0.11, 0.22]
    assert [model.joint(int(model.actuator_trnid[a, 0])).name for a in robot.actuators] == meta["joint_names"]
    assert (model.opt.timestep, model.opt.iterations, decimation(meta, model)) == (0.004, 7, 5)
    floor = model.geom("floor")
    assert (floor.contype[0], floor.conaffinity[0]) == (1, 0)
    assert (model.geom("pelvis_collision").contype[0], model.geom("pelvis_collision").conaffinity[0]) == (0, 1)
    with pytest.raises(DeployError, match="no joint 'right_knee_joint'"):
        build_model({**meta, "joint_names": ["left_hip_pitch_joint", "right_knee_joint"]}, "mjlab")


# ----------------------------------------------------------------------------------------------- bad input
def _onnx_with(tmp_path: Path, props: dict[str, str] | None, obs_dim: int = 98) -> Path:
    """An identity 'policy' (obs -> action) with these metadata_props."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["obs"], ["action"])], "g",
                              [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", obs_dim])],
                              [helper.make_tensor_value_info("action", TensorProto.FLOAT, ["batch", obs_dim])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    for key, value in (props or {}).items():
        model.metadata_props.add(key=key, value=value)
    path = tmp_path / f"p{len(list(tmp_path.glob('*.onnx')))}.onnx"
    onnx.save(model, str(path))
    return path


def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys):
    def refused(*args, says):
        assert _sim2sim(*args) == 2
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err, err

    refused(tmp_path / "missing.onnx", says="no such file")
    refused(tmp_path, says="no policy.onnx or policy_iter_*.onnx")
    refused(_onnx_with(tmp_path, None), says="no unilab metadata")
    refused(_onnx_with(tmp_path, {**_props(), "task": "g1_backflip"}), says="task 'g1_backflip'")
    refused(_onnx_with(tmp_path, _props(), obs_dim=5), says="takes 5 observations")
    refused(WALK, "--command", "0.5,0", says="--command 0.5,0: give vx,vy,wz")
    refused(WALK, "--command", "fast,0,0", says="give vx,vy,wz")
    refused(WALK, "--command", "0.2,0,0", "--commands", "slow", says="give one of the two")
    refused(WALK, "--clip", tmp_path / "clip.npz", says="--clip is for motion tracking")
    refused(WALK, "--window-s", "20", says="--window-s <= --hold-s")
    motion = {"tracked_bodies": ["pelvis"], "anchor_body": "torso_link", "root_body": "pelvis", "end_effectors": [],
              "action_offset": "reference"}
    tracker = {**_props(), "task": "g1_motion_tracking", "motion": json.dumps(motion)}
    refused(_onnx_with(tmp_path, tracker), says="--clip clip.npz")
    refused(_onnx_with(tmp_path, tracker), "--clip", tmp_path / "none.npz", says="none.npz")
    refused(WALK, "--video", tmp_path / "no" / "dir" / "out.mp4", says="is not a directory")
    refused(WALK, "--video", tmp_path / "out.gif", "--size", "161x120", says="--size 161x120: even sides")
    refused(WALK, "--video", tmp_path / "out.gif", "--fps", "0.5", says="--fps 0.5: between 1 and 100")
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".onnx"] * 5


def test_a_short_hold_measures_its_last_60_percent_unless_a_window_is_given():
    """`--hold-s 4` alone runs (the window would otherwise stay 6 s, longer than the hold, and be refused)."""
    import argparse

    from unilab.deploy.cli import _check_args, add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())

    def window(*flags):
        args = parser.parse_args(["sim2sim", str(WALK), *flags])
        _check_args(args)
        return args.window_s

    assert window() == 6.0 and window("--hold-s", "20") == 6.0
    assert window("--hold-s", "4") == pytest.approx(2.4)
    assert window("--hold-s", "4", "--window-s", "1") == 1.0


def test_a_run_directory_runs_its_newest_export(tmp_path):
    import shutil

    from unilab.deploy.policy import find_policy

    for it in (9, 10):
        shutil.copy(WALK, tmp_path / f"policy_iter_{it:07d}.onnx")
    assert find_policy(tmp_path).name == "policy_iter_0000010.onnx"
    shutil.copy(WALK, tmp_path / "policy.onnx")
    assert find_policy(tmp_path).name == "policy.onnx"


# ---------------------------------------------------------------------------------------------- the process
def test_sim2sim_runs_without_torch_or_warp_and_prints_evals_table(tmp_path):
    code = ("import sys, json\nfrom unilab.cli.tools import main\n"
            f"rc = main(['sim2sim', {str(WALK)!r}, '--command', '0.5,0,0', '--hold-s', '1', '--window-s', '0.5'])\n"
            "print(json.dumps([rc, sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'warp', "
            "'mujoco_warp'))]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    rc, heavy = json.loads(done.stdout.strip().splitlines()[-1])
    assert rc == 0 and heavy == []
    assert "lin err m/s  yaw err rad/s  falls  torque/limit" in done.stdout
    assert "(+0.50, +0.00, +0.00)" in done.stdout and "overall" in done.stdout


@pytest.mark.integration
def test_sim2sim_writes_a_small_gif_in_real_time(tmp_path):
    """--size and --fps shape the video; a .gif is written as such (the README's tracking GIF is made this way)."""
    iio = pytest.importorskip("imageio.v3", reason="needs the video extra: pip install 'unilab[video]'")
    from unilab.viz.gl import render_problem

    if render_problem():
        pytest.skip(render_problem())
    out = tmp_path / "walk.gif"
    done = subprocess.run([sys.executable, "-m", "unilab.cli.tools", "sim2sim", str(WALK), "--command", "0.5,0,0",
                           "--hold-s", "1", "--window-s", "0.5", "--video", str(out), "--size", "160x120", "--fps",
                           "10"], capture_output=True, text=True, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    frames = iio.imread(out)
    assert frames.shape[1:3] == (120, 160) and len(frames) == 10  # 1 s of 50 Hz control, every 5th step

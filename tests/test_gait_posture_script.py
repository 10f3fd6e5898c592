"""benchmarks/gait_posture.py: how the arms are carried and the torso tilts along `unilab demo`'s tour."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gait_posture  # noqa: E402

SCRIPT = Path(gait_posture.__file__)

NAMES = ["left_knee_joint", "left_shoulder_pitch_joint", "right_shoulder_pitch_joint", "right_elbow_joint"]


def test_a_held_arm_is_an_offset_and_a_swinging_arm_is_swing():
    t = np.linspace(0.0, 4.0, 400, endpoint=False)
    default = np.array([0.5, 0.2, 0.2, 0.9])
    q = np.tile(default, (len(t), 1))
    q[:, 0] += 0.8 * np.sin(2 * np.pi * t)           # a knee: no arm joint, not counted
    q[:, 1] += 0.3                                    # the left arm held 0.3 rad off its default
    q[:, 2] += 0.2 * np.sqrt(2) * np.sin(2 * np.pi * t)  # the right arm swinging, std 0.2
    c = gait_posture.arm_carriage(q, default, NAMES)
    assert c["widest_offset_joint"] == "left_shoulder_pitch_joint" and c["widest_offset_rad"] == pytest.approx(0.3)
    assert c["arm_offset_rad"] == pytest.approx(np.sqrt(0.3 ** 2 / 3), abs=1e-6)
    assert c["arm_swing_rad"] == pytest.approx(np.sqrt(0.2 ** 2 / 3), abs=1e-3)


def test_tilt_reads_pitch_forward_and_roll_to_the_right():
    pitch, roll = np.radians(10.0), np.radians(4.0)
    ry = np.array([[np.cos(pitch), 0, np.sin(pitch)], [0, 1, 0], [-np.sin(pitch), 0, np.cos(pitch)]])
    rx = np.array([[1, 0, 0], [0, np.cos(roll), -np.sin(roll)], [0, np.sin(roll), np.cos(roll)]])
    assert gait_posture.tilt_deg(ry) == pytest.approx((10.0, 0.0))
    assert gait_posture.tilt_deg(rx)[1] == pytest.approx(4.0) and gait_posture.tilt_deg(rx)[0] == pytest.approx(0.0)


def test_the_shipped_policy_on_a_short_tour(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    from unilab.deploy.demo import TOUR, shipped_policy

    out = tmp_path / "posture.json"
    assert gait_posture.main([str(shipped_policy()), "--seconds", "4", "--json", str(out)]) == 0
    (report,) = json.loads(out.read_text())
    assert [leg["leg"] for leg in report["legs"]] == [leg.label for leg in TOUR]
    for leg in report["legs"]:
        assert 0.5 < leg["pelvis_height_m"] < 0.9 and abs(leg["torso_pitch_deg"]) < 30.0 and leg["leg_speed_rad_s"] >= 0
        assert leg["widest_offset_joint"].endswith(("shoulder_pitch_joint", "shoulder_roll_joint",
                                                     "shoulder_yaw_joint", "elbow_joint"))
    assert "widest offset" in capsys.readouterr().out


def test_a_file_that_is_no_walk_policy_exits_2(tmp_path, capsys):
    bad = tmp_path / "x.onnx"
    bad.write_bytes(b"not onnx")
    assert gait_posture.main([str(bad)]) == 2
    assert "gait_posture:" in capsys.readouterr().err
    from unilab.deploy.demo import shipped_policy

    assert gait_posture.main([str(shipped_policy()), "--json", str(tmp_path / "no" / "p.json")]) == 2
    assert "no such directory" in capsys.readouterr().err and not (tmp_path / "no").exists()
    assert gait_posture.main([str(shipped_policy()), "--picture", str(tmp_path / "p.jpg")]) == 2
    assert "give a .png file" in capsys.readouterr().err and list(tmp_path.iterdir()) == [bad]


def test_the_picture_has_a_row_per_policy_and_a_column_per_moment(tmp_path):
    """Drawn in a process of its own: OpenGL is chosen before mujoco's first import."""
    iio = pytest.importorskip("imageio.v3", reason="needs the video extra: pip install 'unilab[video]'")
    from unilab.deploy.demo import shipped_policy
    from unilab.viz.gl import render_problem

    if render_problem():
        pytest.skip(render_problem())
    out = tmp_path / "arms.png"
    policy = str(shipped_policy())
    done = subprocess.run([sys.executable, str(SCRIPT), policy, policy, "--seconds", "4", "--picture", str(out)],
                          capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    image = iio.imread(out)
    width, height = gait_posture.TILE
    assert image.shape[:2] == (2 * height, len(gait_posture.SNAPSHOTS) * width)
    top, bottom = image[:height], image[height:]
    # One policy twice: the same poses (OpenGL may draw a few edge pixels differently), while walking and standing
    # are not one pose.
    assert np.abs(top.astype(int) - bottom).mean() < 0.5
    assert np.abs(top[:, :width].astype(int) - top[:, width:]).mean() > 2.0

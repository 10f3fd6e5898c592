"""Motion clips: keyframed synthesis, the validated loader, the default-clip cache and the synth CLI."""

import functools
import pickle
import tempfile
from pathlib import Path

import mujoco
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from unilab.assets import g1
from unilab.motion import MotionClipError, load_motion_clip, save_motion_clip
from unilab.motion import default_clip
from unilab.motion.synth import main as synth_main
from unilab.motion.synth import synthesize


@pytest.fixture(scope="module")
def model():
    return g1.build_g1_model(with_floor=False)


@pytest.fixture(scope="module")
def clip(model):
    return synthesize(model=model)


@pytest.fixture(scope="module")
def clip_file(clip, tmp_path_factory):
    return save_motion_clip(clip, tmp_path_factory.mktemp("clips") / "default.npz")


def test_synth_round_trip(clip, clip_file, model):
    loaded = load_motion_clip(clip_file)
    assert loaded.fps == 50.0 and loaded.num_frames == 501 and loaded.duration == pytest.approx(10.0)
    assert loaded.body_names == g1.G1_BODY_NAMES
    assert loaded.joint_pos.shape == (501, 29) and loaded.body_quat_w.shape == (501, model.nbody - 1, 4)
    np.testing.assert_array_equal(loaded.body_pos_w, clip.body_pos_w)
    sub = load_motion_clip(clip_file, body_names=["torso_link", "pelvis"])
    assert sub.body_names == ("torso_link", "pelvis")
    np.testing.assert_array_equal(sub.body_pos_w[:, 1], clip.body_pos_w[:, 0])


def test_synth_starts_at_stand_and_moves(clip):
    np.testing.assert_allclose(clip.joint_pos[0], g1.G1_DEFAULT_QPOS_JOINTS, atol=1e-3)
    np.testing.assert_allclose(clip.body_pos_w[0, 0], (0, 0, g1.G1_DEFAULT_BASE_HEIGHT), atol=2e-3)
    span = clip.joint_pos.max(0) - clip.joint_pos.min(0)
    assert span.max() > 0.7  # squat / knee raise
    pelvis_z = clip.body_pos_w[:, 0, 2]
    assert pelvis_z.min() < g1.G1_DEFAULT_BASE_HEIGHT - 0.08  # squat


def test_fk_consistency(clip, model):
    """Body states are the forward kinematics of (pelvis pose, joint_pos); feet on the ground, not sliding."""
    d = mujoco.MjData(model)
    feet = [clip.body_names.index(b) for b in g1.G1_FOOT_BODIES]
    for i in range(0, clip.num_frames, 37):
        d.qpos[:3] = clip.body_pos_w[i, 0]
        d.qpos[3:7] = clip.body_quat_w[i, 0]
        d.qpos[7:] = clip.joint_pos[i]
        mujoco.mj_kinematics(model, d)
        np.testing.assert_allclose(d.xpos[1:], clip.body_pos_w[i], atol=1e-5)
        np.testing.assert_allclose(np.abs((d.xquat[1:] * clip.body_quat_w[i]).sum(-1)), 1.0, atol=1e-5)
        sole_z = [d.site_xpos[model.site(s).id, 2] for s in g1.G1_FOOT_SITES]
        assert min(sole_z) == pytest.approx(0.0, abs=3e-3)
    # A foot that stays down does not slide more than a few millimetres over the whole clip.
    foot_z = clip.body_pos_w[:, feet, 2]
    for k in range(2):
        down = foot_z[:, k] < foot_z[:, k].min() + 2e-3
        xy = clip.body_pos_w[down, feet[k], :2]
        assert np.abs(xy - xy[0]).max() < 8e-3


def test_velocities_match_finite_differences(clip):
    dt = clip.dt
    fd = np.gradient(clip.body_pos_w.astype(np.float64), dt, axis=0)
    np.testing.assert_allclose(clip.body_lin_vel_w[1:-1], fd[1:-1], atol=0.05)
    np.testing.assert_allclose(clip.joint_vel[1:-1], np.gradient(clip.joint_pos, dt, axis=0)[1:-1], atol=1e-3)
    # Angular velocity: q(t+dt) ~ exp(w dt / 2) q(t) in the world frame.
    q0, q1 = clip.body_quat_w[100:300].astype(np.float64), clip.body_quat_w[101:301].astype(np.float64)
    w = 0.5 * (clip.body_ang_vel_w[100:300] + clip.body_ang_vel_w[101:301])
    dq = np.zeros_like(q0)  # q1 * conj(q0)
    c0 = q0 * np.array([1, -1, -1, -1])
    dq[..., 0] = q1[..., 0] * c0[..., 0] - (q1[..., 1:] * c0[..., 1:]).sum(-1)
    dq[..., 1:] = q1[..., :1] * c0[..., 1:] + c0[..., :1] * q1[..., 1:] + np.cross(q1[..., 1:], c0[..., 1:])
    np.testing.assert_allclose(2.0 * dq[..., 1:] / dt, w, atol=0.05)


def test_seed_variants_are_deterministic(model):
    a = synthesize(duration=3.0, seed=7, model=model)
    b = synthesize(duration=3.0, seed=7, model=model)
    c = synthesize(duration=3.0, seed=8, model=model)
    np.testing.assert_array_equal(a.joint_pos, b.joint_pos)
    assert not np.allclose(a.joint_pos, c.joint_pos)


# ------------------------------------------------------------------ bad files
def _write(path, **fields):
    np.savez(path, **fields)
    return path


def _fields(clip):
    return dict(clip.to_npz_dict())


@pytest.mark.parametrize(
    "case, field",
    [
        ("missing_key", "body_lin_vel_w"),
        ("wrong_joint_count", "joint_pos"),
        ("fps_zero", "fps"),
        ("fps_negative", "fps"),
        ("nan", "body_pos_w"),
        ("inf", "joint_vel"),
        ("inconsistent_length", "body_quat_w"),
        ("missing_body", "body_names"),
        ("duplicate_body", "body_names"),
        ("not_unit_quat", "body_quat_w"),
        ("one_frame", "joint_pos"),
        ("bool_array", "body_lin_vel_w"),
        ("zero_quat", "body_quat_w"),
        # Accepted by the loader before it bounded them (a complex fps: a TypeError out of it, a traceback):
        ("fps_huge", "fps"),
        ("fps_below_one", "fps"),
        ("fps_complex", "fps"),
        ("degrees", "joint_pos"),
        ("past_float32", "body_pos_w"),
        ("complex_array", "joint_vel"),
        ("joint_names_order", "joint_names"),
        ("joint_names_count", "joint_names"),
    ],
)
def test_bad_files_name_file_and_field(clip, tmp_path, case, field):
    f = _fields(clip)
    required = None
    joint_names = g1.G1_JOINT_NAMES
    if case == "fps_huge":
        f["fps"] = np.asarray(1e12)
    elif case == "fps_below_one":
        f["fps"] = np.asarray(0.02)  # a frame period written where the rate belongs
    elif case == "fps_complex":
        f["fps"] = np.asarray(50 + 1j)
    elif case == "one_frame":
        f = {k: (v[:1] if k not in ("fps", "body_names") else v) for k, v in f.items()}
    elif case == "degrees":
        f["joint_pos"] = np.degrees(f["joint_pos"])
    elif case == "past_float32":
        f["body_pos_w"] = f["body_pos_w"].astype(np.float64)
        f["body_pos_w"][4, 0, 2] = 1e300  # finite in float64, inf once the loader casts it to float32
    elif case == "complex_array":
        f["joint_vel"] = f["joint_vel"] + 1j
    elif case == "bool_array":
        f["body_lin_vel_w"] = f["body_lin_vel_w"] > 0
    elif case == "zero_quat":
        f["body_quat_w"] = f["body_quat_w"].copy()
        f["body_quat_w"][2, 1] = 0.0
    elif case == "joint_names_order":
        f["joint_names"] = np.asarray(joint_names[::-1])
    elif case == "joint_names_count":
        f["joint_names"] = np.asarray(joint_names[:23])
    elif case == "missing_key":
        del f[field]
    elif case == "wrong_joint_count":
        f["joint_pos"] = f["joint_pos"][:, :23]
    elif case == "fps_zero":
        f["fps"] = np.asarray(0.0)
    elif case == "fps_negative":
        f["fps"] = np.asarray(-50.0)
    elif case == "nan":
        f["body_pos_w"] = f["body_pos_w"].copy()
        f["body_pos_w"][3, 2, 1] = np.nan
    elif case == "inf":
        f["joint_vel"] = f["joint_vel"].copy()
        f["joint_vel"][5, 0] = np.inf
    elif case == "inconsistent_length":
        f["body_quat_w"] = f["body_quat_w"][:-1]
    elif case == "missing_body":
        required = ["pelvis", "no_such_link"]
    elif case == "duplicate_body":
        f["body_names"] = f["body_names"].copy()
        f["body_names"][3] = f["body_names"][1]
    elif case == "not_unit_quat":
        f["body_quat_w"] = f["body_quat_w"].copy()
        f["body_quat_w"][9, 2] *= 1.5
    path = _write(tmp_path / f"{case}.npz", **f)
    with pytest.raises(MotionClipError) as e:
        load_motion_clip(path, body_names=required, joint_names=joint_names)
    msg = str(e.value)
    assert str(path) in msg and f"field '{field}'" in msg
    if case.startswith("fps_") and case != "fps_complex":
        assert "expected frames per second in [1, 1000]" in msg
    if case == "degrees":
        assert "expected values within +-6.28319 rad" in msg
    if case == "joint_names_order":
        assert f"joint 0 is {joint_names[-1]!r}, expected {joint_names[0]!r}" in msg
    if case == "missing_body":
        assert "no_such_link" in msg
    if case == "duplicate_body":
        assert "repeated" in msg and str(f["body_names"][1]) in msg
    if case == "not_unit_quat":
        assert f"frame 9, body {str(f['body_names'][2])!r}" in msg


def test_unreadable_and_missing_files(tmp_path):
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"this is not a zip archive")
    with pytest.raises(MotionClipError, match="junk.npz: not an npz archive"):
        load_motion_clip(junk)
    npy = tmp_path / "plain.npy"
    np.save(npy, np.zeros(3))
    with pytest.raises(MotionClipError, match="plain.npy: not an npz archive"):
        load_motion_clip(npy)
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(b"PK\x03\x04" + b"\0" * 20)  # a zip's first bytes, then nothing a zip holds
    with pytest.raises(MotionClipError, match="truncated.npz: unreadable motion clip"):
        load_motion_clip(truncated)
    with pytest.raises(MotionClipError, match="nope.npz.*not found"):
        load_motion_clip(tmp_path / "nope.npz")


def test_pickled_data_is_refused_without_suggesting_allow_pickle(clip, tmp_path):
    """A pickle, or an npz with an object array in it: refused as what it is, never loaded, and the message does
    not point at numpy's allow_pickle (which would run whatever code the file holds)."""
    pickled = tmp_path / "clip.npz"
    with open(pickled, "wb") as f:
        pickle.dump(_fields(clip), f)
    objects = _write(tmp_path / "objects.npz", **{**_fields(clip), "fps": np.asarray([50.0, "x"], dtype=object)})
    for path, needle in ((pickled, "clip.npz: not an npz archive"),
                         (objects, "objects.npz: field 'fps': holds Python objects")):
        with pytest.raises(MotionClipError) as e:
            load_motion_clip(path)
        assert needle in str(e.value) and "allow_pickle" not in str(e.value) and "pickle.load" not in str(e.value)


def test_joint_names_in_the_g1_order_are_accepted(clip, tmp_path):
    path = _write(tmp_path / "named.npz", **_fields(clip), joint_names=np.asarray(g1.G1_JOINT_NAMES))
    assert load_motion_clip(path, joint_names=g1.G1_JOINT_NAMES).num_joints == len(g1.G1_JOINT_NAMES)


# ------------------------------------------------------- default clip and CLI
def test_default_clip_cached_under_unilab_cache_dir_else_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("UNILAB_CACHE_DIR", str(tmp_path / "shared"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_clip.cache_dir() == tmp_path / "shared" / "motion"  # with the kernels and the wheels
    monkeypatch.delenv("UNILAB_CACHE_DIR")
    path = default_clip.default_clip_path()
    assert path.parent == tmp_path / "unilab" / "motion" and path.name.startswith("g1_default_")
    mtime = path.stat().st_mtime_ns
    assert default_clip.default_clip_path() == path and path.stat().st_mtime_ns == mtime  # reused
    clip = load_motion_clip(path)
    assert clip.duration == pytest.approx(default_clip.DEFAULT_SYNTH_PARAMS["duration"])
    assert list(tmp_path.rglob("*.tmp")) == []


def test_synth_cli(tmp_path, capsys):
    out = tmp_path / "sub" / "clip.npz"
    assert synth_main(["--out", str(out), "--duration", "2", "--fps", "25", "--seed", "3"]) == 0
    assert "wrote" in capsys.readouterr().out
    clip = load_motion_clip(out)
    assert clip.fps == 25.0 and clip.num_frames == 51
    # The `unilab motion` dispatcher may pass the sub-command word along.
    out2 = tmp_path / "clip2.npz"
    assert synth_main(["synth", "--out", str(out2), "--duration", "1"]) == 0
    assert load_motion_clip(out2).num_frames == 51
    with pytest.raises(SystemExit):
        synth_main(["--out", str(out), "--duration", "-1"])


@pytest.mark.parametrize("duration", ["nan", "inf", "-inf", "1e9", "0.001", "0"])
def test_synth_cli_refuses_durations_it_cannot_build(tmp_path, capsys, duration):
    """Through the `unilab` tool: exit 2 naming --duration, no traceback, nothing written."""
    from unilab.cli.tools import main as tools_main

    with pytest.raises(SystemExit) as exc:
        tools_main(["motion", "synth", "--out", str(tmp_path / "c.npz"), "--duration", duration])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--duration" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_synth_cli_out_is_a_directory(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        synth_main(["--out", str(tmp_path), "--duration", "0.1"])
    assert exc.value.code == 2 and "is a directory" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_save_leaves_no_temporary_file_when_the_rename_fails(clip, tmp_path):
    target = tmp_path / "taken"
    (target / "inside").mkdir(parents=True)  # a non-empty directory: the rename fails
    with pytest.raises(OSError):
        save_motion_clip(clip, target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


# ------------------------------------------------ hostile clip fields (property test)
CLIP_FIELDS = ("fps", "body_names", "joint_pos", "joint_vel", "body_pos_w", "body_quat_w", "body_lin_vel_w",
               "body_ang_vel_w", "joint_names")
HOSTILE_SCALARS = (np.nan, np.inf, -np.inf, 0.0, -1.0, 1e-9, 0.5, 1e3, 1e12, 1e300, 2**40, True, "x", 1 + 1j)
HOSTILE_DTYPES = (str, bool, complex, object, np.int64, np.float16, np.float64)
SCALES = (0.0, -1.0, 1e-6, 180 / np.pi, 1e3, 1e6)


@functools.lru_cache(maxsize=None)
def _valid_fields():
    """A valid G1 clip (0.5 s at 50 fps) naming its joints, as its npz holds it."""
    clip = synthesize(duration=0.5, fps=50.0)
    return {**clip.to_npz_dict(), "joint_names": np.asarray(g1.G1_JOINT_NAMES)}


def _mutated(data, field: str):
    """`field` of a valid clip made hostile in one drawn way (or removed)."""
    value = np.asarray(_valid_fields()[field])
    how = data.draw(st.sampled_from(("remove", "scalar", "element", "dtype", "shape", "frames", "scale")),
                    label="how")
    if how == "remove":
        return None
    if how == "scalar":
        return np.asarray(data.draw(st.sampled_from(HOSTILE_SCALARS), label="scalar"))
    if how == "dtype":
        dtype = data.draw(st.sampled_from(HOSTILE_DTYPES), label="dtype")
        try:
            return value.astype(dtype)
        except ValueError:  # names as numbers
            return value.astype(object)
    if how == "shape":
        cut = value[..., :-1] if value.ndim else value[None]
        return data.draw(st.sampled_from((cut, value[None], value.reshape(-1), value.T)), label="shape")
    if how == "frames":
        if value.ndim == 0:
            return value
        return value[:data.draw(st.sampled_from((0, 1, 2, 3)), label="frames")]
    if value.dtype.kind in "US":  # names: one of them emptied, repeated or unknown
        names = value.copy()
        i = data.draw(st.integers(0, len(names) - 1), label="index")
        names[i] = data.draw(st.sampled_from(("", names[0], "no_such_link")), label="name")
        return names
    if how == "scale":
        return value * data.draw(st.sampled_from(SCALES), label="factor")
    hostile = data.draw(st.sampled_from(HOSTILE_SCALARS[:11]), label="element")  # numbers only
    out = value.astype(np.float64)
    if out.ndim == 0:
        return np.asarray(hostile, dtype=np.float64)
    out.reshape(-1)[data.draw(st.integers(0, out.size - 1), label="index")] = hostile
    return out


def _sound(library) -> bool:
    """What a clip the loader accepts is: a sane frame rate, two frames or more, finite float32 within the fields'
    bounds, unit quaternions, at least MIN_CLIP_CONTROL_STEPS control steps long."""
    from unilab.motion.clip import MAX_ABS, MAX_FPS, MIN_FPS
    from unilab.tasks.g1_motion_tracking.config import MIN_CLIP_CONTROL_STEPS

    for clip in library.clips:
        arrays = {f: getattr(clip, f) for f in MAX_ABS} | {"body_quat_w": clip.body_quat_w}
        ok = MIN_FPS <= clip.fps <= MAX_FPS and clip.num_frames >= 2 and clip.num_joints == len(g1.G1_JOINT_NAMES)
        ok = ok and clip.duration >= MIN_CLIP_CONTROL_STEPS * 0.02 - 1e-9
        ok = ok and all(a.dtype == np.float32 and np.isfinite(a).all() for a in arrays.values())
        ok = ok and all(np.abs(getattr(clip, f)).max() <= limit for f, (limit, _) in MAX_ABS.items())
        if not (ok and np.allclose(np.linalg.norm(clip.body_quat_w, axis=-1), 1.0, atol=1e-5)):
            return False
    return True


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(data=st.data())
def test_every_hostile_clip_field_is_refused_at_compose_or_sound(data):
    """One field of a valid clip made hostile (NaN, inf, huge, negative, empty, wrong type or shape, removed): what
    `train` does at compose with task.motion_file (the tracking task's config, then its check against the control
    step) raises the ValueError that exits 2, naming task.motion_file and the field, or accepts a clip that is sound."""
    from unilab.motion.library import load_motion_library
    from unilab.sim.config import MjWarpSimConfig
    from unilab.tasks.g1_motion_tracking.config import G1MotionTrackingConfig

    field = data.draw(st.sampled_from(CLIP_FIELDS), label="field")
    fields = dict(_valid_fields())
    value = _mutated(data, field)
    if value is None:
        del fields[field]
    else:
        fields[field] = value
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "clip.npz"
        np.savez(path, **fields)  # an object array is pickled into it: the loader must refuse it unread
        try:
            G1MotionTrackingConfig(num_envs=2, motion_file=str(path)).check_with_sim(MjWarpSimConfig())
        except ValueError as exc:
            message = str(exc)
            assert message.startswith(f"task.motion_file={str(path)!r}"), message
            assert "field '" in message or "control steps" in message, message
            assert "allow_pickle" not in message, message
            return
        assert _sound(load_motion_library(path, joint_names=g1.G1_JOINT_NAMES)), f"{field} accepted: {value!r}"

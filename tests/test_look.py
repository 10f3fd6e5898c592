"""The G1's look (unilab.assets.look): Unitree's meshes dress a render-side copy of our G1, on the bodies of the same
names, visual only; the physics is the plain model's; the collision view is one option away; without the wheel the
collision geoms are drawn and one line says why. The wheel is a small local one (tests/tiny_wheel.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import mujoco
import numpy as np
import pytest
import tiny_wheel

from unilab.assets import g1, look
from unilab.kernel_cache import kernel_cache_env

REPO = Path(__file__).resolve().parents[1]


def _keep_shared_kernels(monkeypatch) -> None:
    """The compiled kernels stay in the session's shared cache while UNILAB_CACHE_DIR moves to a fresh one:
    these tests are about the wheel's meshes, and a cold compile of the physics would cost a minute each."""
    for var, path in kernel_cache_env().items():
        monkeypatch.setenv(var, path)


@pytest.fixture
def wheel(tmp_path, monkeypatch):
    """The tiny wheel served through UNILAB_WHEEL_INDEX, fetched into a cache under tmp_path."""
    tiny_wheel.build(tmp_path / "index")
    _keep_shared_kernels(monkeypatch)
    monkeypatch.setenv("UNILAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("UNILAB_WHEEL_INDEX", str(tmp_path / "index"))
    return tmp_path


@pytest.fixture
def no_wheel(tmp_path, monkeypatch):
    """An empty index and an empty cache: the wheel cannot be had."""
    (tmp_path / "index").mkdir()
    _keep_shared_kernels(monkeypatch)
    monkeypatch.setenv("UNILAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("UNILAB_WHEEL_INDEX", str(tmp_path / "index"))
    return tmp_path


def _mesh_geoms(m: mujoco.MjModel) -> np.ndarray:
    return np.flatnonzero(m.geom_type == mujoco.mjtGeom.mjGEOM_MESH)


def _collision_geoms(m: mujoco.MjModel) -> np.ndarray:
    return np.flatnonzero((m.geom_contype != 0) | (m.geom_conaffinity != 0))


def test_meshes_land_on_the_bodies_of_their_names_as_visual_only(wheel):
    said = []
    m = look.dress(g1.build_g1_spec(), say=said.append).compile()
    assert said == ["unilab: fetching the G1 meshes (mjlab==1.6.0) into " + str(wheel / "cache" / "wheels")]
    (geom,) = _mesh_geoms(m)  # the MJCF's capsule and the mesh on a body we lack are not copied
    assert m.body(m.geom_bodyid[geom]).name == tiny_wheel.MESH_BODY
    assert (m.geom_contype[geom], m.geom_conaffinity[geom], m.geom_group[geom]) == (0, 0, look.VISUAL_GROUP)
    assert m.mesh_vertnum[m.geom_dataid[geom]] == 4
    assert np.allclose(m.mat_rgba[m.geom_matid[geom]], tiny_wheel.MESH_RGBA)
    # Where the MJCF puts the mesh in its body: the tetrahedron's corners in the body frame (MuJoCo recentres a
    # mesh on its centroid and moves the geom to match, so compare the corners, not geom_pos).
    d = mujoco.MjData(m)
    mujoco.mj_kinematics(m, d)
    body = m.geom_bodyid[geom]
    corners_world = d.geom_xpos[geom] + m.mesh_vert[m.mesh_vertadr[m.geom_dataid[geom]]:][:4] @ \
        d.geom_xmat[geom].reshape(3, 3).T
    corners_body = (corners_world - d.xpos[body]) @ d.xmat[body].reshape(3, 3)
    rot = np.zeros(9)
    mujoco.mju_quat2Mat(rot, np.array(tiny_wheel.MESH_QUAT) / np.linalg.norm(tiny_wheel.MESH_QUAT))
    e = tiny_wheel.EDGE
    expected = np.array(tiny_wheel.MESH_POS) + np.array([(0, 0, 0), (e, 0, 0), (0, e, 0), (0, 0, e)]) @ \
        rot.reshape(3, 3).T
    assert np.allclose(sorted(map(tuple, corners_body.round(6))), sorted(map(tuple, expected.round(6))), atol=1e-5)


def test_the_dressed_model_simulates_as_the_plain_one(wheel):
    plain = g1.build_g1_model()
    dressed = look.render_model(plain)
    assert len(_mesh_geoms(dressed)) == 1 and look.is_dressed(dressed)
    for field in ("nq", "nv", "nu", "nbody", "njnt", "nsensor"):
        assert getattr(dressed, field) == getattr(plain, field), field
    for field in ("body_mass", "body_inertia", "body_ipos", "body_iquat", "body_subtreemass", "dof_armature",
                  "jnt_range", "jnt_qposadr", "actuator_gainprm", "actuator_biasprm", "actuator_forcerange"):
        assert np.array_equal(getattr(dressed, field), getattr(plain, field)), field
    assert dressed.opt.timestep == plain.opt.timestep
    ours, theirs = _collision_geoms(dressed), _collision_geoms(plain)
    assert len(ours) == len(theirs)
    for field in ("geom_type", "geom_size", "geom_pos", "geom_quat", "geom_bodyid", "geom_contype",
                  "geom_conaffinity", "geom_friction", "geom_group"):
        assert np.array_equal(getattr(dressed, field)[ours], getattr(plain, field)[theirs]), field
    # And the same motion: a second of PD from the stand pose, step for step.
    runs = []
    for m in (plain, dressed):
        d = mujoco.MjData(m)
        mujoco.mj_resetDataKeyframe(m, d, 0)
        for _ in range(200):
            mujoco.mj_step(m, d)
        runs.append(d.qpos.copy())
    assert np.array_equal(*runs)


def test_the_collision_view_swaps_the_groups(wheel):
    plain = g1.build_g1_model()
    meshes = look.render_model(plain)
    shown = look.scene_option(meshes).geomgroup
    assert (shown[look.VISUAL_GROUP], shown[look.COLLISION_GROUP]) == (1, 0)
    shown = look.scene_option(meshes, collision=True).geomgroup
    assert (shown[look.VISUAL_GROUP], shown[look.COLLISION_GROUP]) == (0, 1)
    collision = look.render_model(plain, collision=True)  # no meshes loaded, the same scene
    assert len(_mesh_geoms(collision)) == 0 and look.is_dressed(collision)
    assert look.scene_option(collision).geomgroup[look.COLLISION_GROUP] == 1


@pytest.mark.parametrize("offline", [False, True])
def test_without_the_wheel_the_collision_geoms_are_drawn_and_one_line_says_why(no_wheel, offline):
    said = []
    m = look.dress(g1.build_g1_spec(), offline=offline, say=said.append).compile()
    (why,) = [line for line in said if "drawn" in line]
    assert why.startswith("unilab: the G1 is drawn with its collision geoms: its meshes are not available (")
    assert "mjlab==1.6.0" in why and ("offline" in why if offline else "pip download" in why)
    assert len(_mesh_geoms(m)) == 0 and look.is_dressed(m)  # the sky, floor and lights need no wheel
    assert look.scene_option(m).geomgroup[look.COLLISION_GROUP] == 1


def test_a_mesh_that_does_not_compile_falls_back_to_the_collision_geoms(tmp_path, monkeypatch):
    tiny_wheel.build(tmp_path / "index", stl=b"solid broken\n")
    monkeypatch.setenv("UNILAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("UNILAB_WHEEL_INDEX", str(tmp_path / "index"))
    said = []
    m = look.render_model(g1.build_g1_model(), say=said.append)
    assert said[-1].startswith("unilab: the G1 is drawn with its collision geoms: its meshes do not compile (")
    assert len(_mesh_geoms(m)) == 0 and look.is_dressed(m)
    assert look.scene_option(m).geomgroup[look.COLLISION_GROUP] == 1


def test_a_model_that_is_not_our_g1_is_drawn_as_it_is(wheel):
    other = mujoco.MjModel.from_xml_string("<mujoco><worldbody><body><freejoint/><geom size='0.1'/></body>"
                                           "</worldbody></mujoco>")
    said = []
    assert look.render_model(other, say=said.append) is other
    assert said == ["unilab: the model is not unilab's G1 (other bodies, joints or geoms): it is drawn as it is"]


def test_the_tracking_model_with_self_collisions_is_dressed_too(wheel):
    plain = g1.build_g1_model(self_collisions=True)
    dressed = look.render_model(plain)
    assert len(_mesh_geoms(dressed)) == 1
    assert np.array_equal(dressed.geom_contype[_collision_geoms(dressed)], plain.geom_contype[_collision_geoms(plain)])


def test_play_collision_without_video_or_viewer_exits_2(tmp_path, capsys):
    from unilab.cli.tools import main as tools_main

    assert tools_main(["play", str(tmp_path), "--collision"]) == 2
    assert "--collision changes what --video or --viewer draws" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def _render_env(wheel_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "DISPLAY", "WAYLAND_DISPLAY")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env.update(MUJOCO_GL="egl", UNILAB_CACHE_DIR=str(wheel_dir / "cache"),
               UNILAB_WHEEL_INDEX=str(wheel_dir / "index"))
    return env


def _red(frames: np.ndarray) -> int:
    f = frames.astype(int)
    return int(((f[..., 0] > 120) & (f[..., 0] > 2 * f[..., 1:].max(axis=-1))).sum())


@pytest.mark.integration
def test_training_clips_draw_the_meshes_and_the_collision_geoms_with_collision(wheel, monkeypatch):
    """`python -m unilab.viz.clip` on a saved clip: the red mesh shows; with --collision it does not."""
    monkeypatch.setenv("MUJOCO_GL", "egl")
    from unilab.viz.gl import render_problem

    problem = render_problem()
    if problem:
        pytest.skip(problem)
    iio = pytest.importorskip("imageio.v3", reason="needs the video extra: pip install 'unilab[video]'")
    from unilab.viz import clip

    plain = g1.build_g1_model()
    d = mujoco.MjData(plain)
    mujoco.mj_resetDataKeyframe(plain, d, 0)
    red = {}
    for collision in (False, True):
        videos = wheel / f"run_{collision}" / clip.VIDEO_DIR
        videos.mkdir(parents=True)
        mujoco.mj_saveModel(plain, str(videos / clip.MODEL_FILE), None)
        np.savez(videos / "iter_0000000.npz", qpos=np.stack([d.qpos, d.qpos]), dt=0.02, iteration=0)
        cmd = [*clip.render_command(videos / "iter_0000000.npz"), *(["--collision"] if collision else [])]
        done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300, env=_render_env(wheel))
        assert done.returncode == 0, done.stderr[-3000:]
        red[collision] = _red(iio.imread(videos / "iter_0000000.mp4"))
    assert red[False] > 200 and red[True] < 20, red


@pytest.mark.integration
def test_the_look_renders_meshes_and_keeps_markers(wheel):
    """The mesh look shows the red mesh; a marker still draws over it (the floor grid is the floor's own)."""
    script = textwrap.dedent("""
        import os
        import mujoco, numpy as np
        from unilab.assets import g1
        from unilab.viz import markers as mk
        from unilab.viz.render import FrameRenderer
        m = g1.build_g1_model()
        d = mujoco.MjData(m)
        mujoco.mj_resetDataKeyframe(m, d, 0)
        q = d.qpos[None].copy()
        looks = [FrameRenderer(m, width=320, height=240, camera="fixed", collision=c) for c in (False, True)]
        root = np.array(q[0, :3])
        green = [mk.Arrow(tuple(root + [0.0, 0.0, 0.9]), tuple(root + [0.0, 0.6, 0.9]), (0.0, 1.0, 0.0, 1.0))]
        frames = [r.frame(q).astype(int) for r in looks] + [looks[0].frame(q, [green]).astype(int)]
        def count(f, c):
            return int(((f[..., c] > 120) & (f[..., c] > 2 * np.delete(f, c, axis=-1).max(axis=-1))).sum())
        print(*[count(f, 0) for f in frames[:2]], count(frames[0], 1), count(frames[2], 1), looks[0].dressed)
    """)
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True,
                          timeout=300, env=_render_env(wheel))
    if done.returncode != 0 and "HeadlessGLUnavailable" in done.stderr:
        pytest.skip(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stderr[-3000:]
    red_mesh, red_collision, green0, green1, dressed = done.stdout.split()[-5:]
    assert int(red_mesh) > 200 and int(red_collision) < 20
    assert int(green1) > int(green0) + 10 and dressed == "True"


@pytest.mark.integration
def test_play_video_draws_the_meshes_and_the_collision_geoms_with_collision(walk_run, wheel):
    """`unilab play --video` end to end (zero actions, no checkpoint needed): the red mesh, or with --collision
    none."""
    iio = pytest.importorskip("imageio.v3", reason="needs the video extra: pip install 'unilab[video]'")
    red = {}
    for collision in (False, True):
        video = wheel / f"play_{collision}.mp4"
        cmd = [sys.executable, "-m", "unilab.cli.tools", "play", str(walk_run), "--agent", "zero", "--steps", "2",
               "--envs", "1", "--video", str(video), "--width", "320", "--height", "240",
               "--out", str(wheel / f"play_{collision}.json"), *(["--collision"] if collision else [])]
        done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=600,
                              env=_render_env(wheel))
        assert done.returncode == 0, done.stderr[-3000:]
        red[collision] = _red(iio.imread(video))
    assert red[False] > 200 and red[True] < 20, red

"""Seeing a policy: `unilab play --video/--agent/--viewer` on a tiny CPU run, the task markers, and the
refusals (bad path, missing extra, no display) that exit 2 and leave nothing behind.

Rendering runs in subprocesses: MuJoCo picks its OpenGL backend when it is first imported, and other
test modules import it without one (the play command sets MUJOCO_GL=egl before its import)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

iio = pytest.importorskip("imageio.v3", reason="needs the video extra: pip install 'unilab[video]'")

from unilab.viz import markers as mk  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _headless_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "DISPLAY", "WAYLAND_DISPLAY")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return env


def _play_subprocess(*args) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "unilab.cli.tools", "play", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=_headless_env())


def _play(*args) -> int:
    from unilab.cli.tools import main as tools_main

    return tools_main(["play", *map(str, args)])


def _listing(*dirs) -> set:
    return {p for d in dirs for p in Path(d).rglob("*")}


@pytest.mark.integration
def test_video_of_a_walk_run_decodes_to_a_frame_per_state(walk_run, tmp_path):
    video = tmp_path / "walk.mp4"
    done = _play_subprocess(walk_run, "--video", video, "--steps", 10, "--envs", 2, "--width", 160, "--height", 120,
                            "--out", tmp_path / "play.json")
    assert done.returncode == 0, done.stderr[-3000:]
    frames = iio.imread(video)
    assert frames.shape == (11, 120, 160, 3)  # the reset state and one per control step
    change = [float(np.abs(f.astype(int) - frames[0]).mean()) for f in frames[1:]]
    assert max(change) > 0.1  # the robot moves (and the camera follows it)
    assert json.loads((tmp_path / "play.json").read_text())["agent"] == "policy"


@pytest.mark.integration
def test_random_agent_needs_no_checkpoint_and_tiles_worlds_into_a_gif(walk_run, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(walk_run / "run_config.json", bare / "run_config.json")
    gif = tmp_path / "random.gif"
    done = _play_subprocess(bare, "--agent", "random", "--video", gif, "--steps", 4, "--envs", 4, "--worlds", 4,
                            "--width", 96, "--height", 64, "--camera", "fixed", "--out", tmp_path / "r.json")
    assert done.returncode == 0, done.stderr[-3000:]
    frames = iio.imread(gif, index=None)
    assert frames.shape[:3] == (5, 64, 96)
    # 4 worlds tile 2 x 2: every quarter shows a robot, so none is plain background.
    last = frames[-1][..., :3].astype(int)
    for r in range(2):
        for c in range(2):
            tile = last[r * 32:(r + 1) * 32, c * 48:(c + 1) * 48]
            assert tile.std() > 3.0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["agent"] == "random" and report["checkpoint"] is None and report["iteration"] is None


@pytest.mark.integration
def test_a_run_trained_on_a_gpu_plays_on_the_cpu_of_a_host_without_one(walk_run, tmp_path, capsys, monkeypatch):
    gpu_run = tmp_path / "gpu_run"
    gpu_run.mkdir()
    config = json.loads((walk_run / "run_config.json").read_text())
    config["training"]["run"]["device"] = "cuda:0"
    (gpu_run / "run_config.json").write_text(json.dumps(config))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # this host has no GPU, whatever it has
    assert _play(gpu_run, "--agent", "zero", "--steps", 3, "--envs", 2, "--out", tmp_path / "z.json") == 0
    assert "no GPU here: on the CPU (the run trained on cuda:0" in capsys.readouterr().err
    assert json.loads((tmp_path / "z.json").read_text())["steps"] == 3


@pytest.mark.integration
def test_zero_agent_runs_without_a_checkpoint_and_the_policy_does_not(walk_run, tmp_path, capsys):
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(walk_run / "run_config.json", bare / "run_config.json")
    assert _play(bare, "--agent", "zero", "--steps", 3, "--envs", 2, "--out", tmp_path / "z.json") == 0
    report = json.loads((tmp_path / "z.json").read_text())
    assert report["agent"] == "zero" and report["checkpoint"] is None and report["steps"] == 3
    capsys.readouterr()
    assert _play(bare, "--steps", 3, "--envs", 2, "--out", tmp_path / "p.json") == 2
    assert "no checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()


@pytest.mark.integration
def test_bad_video_paths_exit_2_and_leave_nothing(walk_run, tmp_path, capsys):
    before = _listing(walk_run, tmp_path)
    (tmp_path / "dir.mp4").mkdir()
    before.add(tmp_path / "dir.mp4")
    cases = [(tmp_path / "dir.mp4", "is a directory"), (tmp_path / "missing" / "x.mp4", "is not a directory"),
             (tmp_path / "x.avi", "unknown video format")]
    for path, message in cases:
        assert _play(walk_run, "--video", path, "--steps", 2) == 2
        assert message in capsys.readouterr().err
    assert _play(walk_run, "--video", tmp_path / "odd.mp4", "--width", 101) == 2
    assert "even sides" in capsys.readouterr().err
    assert _play(walk_run, "--video", tmp_path / "x.mp4", "--worlds", 0) == 2
    assert "--worlds 0" in capsys.readouterr().err
    assert _play(walk_run, "--video", tmp_path / "x.mp4", "--viewer") == 2
    assert "choose one" in capsys.readouterr().err
    assert _listing(walk_run, tmp_path) == before


@pytest.mark.integration
def test_missing_video_extra_exits_2_naming_it(walk_run, tmp_path, capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_imageio(name, *args, **kwargs):
        if name.split(".")[0] in ("imageio", "imageio_ffmpeg"):
            raise ImportError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_imageio)
    monkeypatch.setenv("MUJOCO_GL", "egl")
    before = _listing(walk_run, tmp_path)
    assert _play(walk_run, "--video", tmp_path / "x.mp4", "--steps", 2) == 2
    assert "pip install 'unilab[video]'" in capsys.readouterr().err
    assert _listing(walk_run, tmp_path) == before


@pytest.mark.integration
def test_viewer_without_a_display_exits_2(walk_run, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    before = _listing(walk_run)
    assert _play(walk_run, "--viewer", "--steps", 2) == 2
    err = capsys.readouterr().err
    assert "--viewer: no display" in err and "DISPLAY" in err and "use --video" in err
    assert _listing(walk_run) == before


def _yaw_quat(yaw: float) -> list[float]:
    return [float(np.cos(yaw / 2)), 0.0, 0.0, float(np.sin(yaw / 2))]


def test_walk_markers_are_the_command_in_the_world_and_the_root_velocity():
    env = SimpleNamespace(base_pos=torch.tensor([[1.0, 2.0, 0.8], [0.0, 0.0, 0.8]]),
                          base_quat=torch.tensor([_yaw_quat(np.pi / 2), _yaw_quat(0.0)]),
                          base_lin_vel_w=torch.tensor([[0.0, 0.3, 0.1], [0.2, 0.0, 0.0]]),
                          commands=torch.tensor([[0.5, 0.0, 0.2], [0.0, 0.0, 0.0]]))
    per_world = mk.task_markers(env, 1)
    assert len(per_world) == 1
    command, actual = per_world[0]
    start = np.array([1.0, 2.0, 0.8 + mk.ARROW_HEIGHT])
    assert np.allclose(command.start, start) and command.rgba == mk.COMMAND_RGBA
    assert np.allclose(np.subtract(command.end, command.start), [0.0, 0.5, 0.0], atol=1e-6)  # forward, yawed 90 deg
    assert np.allclose(np.subtract(actual.end, actual.start), [0.0, 0.3, 0.0], atol=1e-6)  # planar only


def test_tracking_markers_are_spheres_at_the_tracked_reference_bodies():
    ref = torch.arange(2 * 4 * 3, dtype=torch.float32).reshape(2, 4, 3)
    env = SimpleNamespace(base_pos=torch.zeros(2, 3), ref_body_pos_rel=ref, num_tracked=3)
    per_world = mk.task_markers(env, 2)
    assert [len(m) for m in per_world] == [3, 3]
    assert np.allclose([s.pos for s in per_world[1]], ref[1, :3].numpy())
    assert all(isinstance(s, mk.Sphere) for m in per_world for s in m)


@pytest.mark.integration
def test_markers_are_drawn_into_the_frame():
    """A reference sphere and a command arrow in front of the robot change the pixels of their colours."""
    script = textwrap.dedent("""
        import os, sys
        os.environ["MUJOCO_GL"] = "egl"
        import mujoco, numpy as np
        from unilab.assets import g1
        from unilab.viz import markers as mk
        from unilab.viz.render import FrameRenderer
        m = g1.build_g1_model()
        d = mujoco.MjData(m)
        mujoco.mj_resetDataKeyframe(m, d, 0)
        r = FrameRenderer(m, width=320, height=240, camera="fixed")
        q = d.qpos[None].copy()
        root = np.array(q[0, :3])
        marks = [mk.Sphere(tuple(root + [0.0, 0.0, 0.6]), (1.0, 0.0, 0.0, 1.0)),
                 mk.Arrow(tuple(root + [0.0, 0.0, 0.9]), tuple(root + [0.0, 0.6, 0.9]), (0.0, 1.0, 0.0, 1.0))]
        plain, marked = r.frame(q).astype(int), r.frame(q, [marks]).astype(int)
        def count(f, c):
            return int(((f[..., c] > 120) & (f[..., c] > 2 * np.delete(f, c, axis=-1).max(axis=-1))).sum())
        print(count(plain, 0), count(marked, 0), count(plain, 1), count(marked, 1))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env=_headless_env())
    assert done.returncode == 0, done.stderr[-3000:]
    red0, red1, green0, green1 = map(int, done.stdout.split()[-4:])  # after the look's console lines
    assert red1 > red0 + 10 and green1 > green0 + 10


class _ClipEnv:
    """What the clip recorder reads of an env: the model, dt, the device and qpos (world 0 moves)."""

    def __init__(self):
        import mujoco

        from unilab.assets import g1

        self.mj_model = g1.build_g1_model()
        d = mujoco.MjData(self.mj_model)
        mujoco.mj_resetDataKeyframe(self.mj_model, d, 0)
        self.qpos = torch.tensor(np.stack([d.qpos, d.qpos]), dtype=torch.float32)
        self.dt, self.device = 0.02, torch.device("cpu")


@pytest.mark.integration
def test_training_clips_record_world_0_every_interval_and_render_in_another_process(tmp_path, monkeypatch):
    from unilab.viz import clip

    monkeypatch.setattr(clip, "CLIP_S", 0.1)  # 5 ticks
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    env = _ClipEnv()
    (tmp_path / "tensorboard").mkdir()
    rec = clip.ClipRecorder(env, interval=3, run_dir=tmp_path)
    videos = tmp_path / clip.VIDEO_DIR
    assert (videos / clip.MODEL_FILE).is_file()
    for iteration in range(9):  # clips start at iterations 0 and 6 (3 is mid-clip: the first lasts 5 ticks)
        env.qpos[0, 0] = 0.1 * iteration  # world 0 walks along x
        env.qpos[1, 0] = -5.0  # world 1 is never recorded
        rec.tick(iteration)
    for p in rec.renders:
        assert p.wait(timeout=300) == 0, (videos / clip.RENDER_LOG).read_text()[-3000:]
    assert sorted(p.name for p in videos.glob("iter_*")) == ["iter_0000000.mp4"]  # the second clip is mid-way
    frames = iio.imread(videos / "iter_0000000.mp4")
    assert frames.shape[0] == 5 and frames.shape[1:] == (360, 480, 3)
    assert not list(videos.glob("*.npz"))  # the rendered clip's positions are gone
    assert rec.row == 3 and rec.started == 6
    assert rec.buf[:3, 0].tolist() == pytest.approx([0.6, 0.7, 0.8])
    assert rec.host[:, 0].tolist() == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])
    # The frame strip in the run's TensorBoard, at the clip's iteration.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = (tmp_path / "tensorboard").glob("*.clips")
    acc = EventAccumulator(str(events)).Reload()
    (image,) = acc.Images("clip/world0")
    # A 5-frame clip: all its frames, at half size.
    assert image.step == 0 and (image.width, image.height) == (5 * 240, 180)


@pytest.mark.integration
def test_a_run_with_video_interval_leaves_a_clip_and_its_strip(tmp_path):
    """The collector hook end to end: 2 envs, 25 ticks an iteration, a 5 s clip from iteration 0."""
    from unilab.viz import clip

    cmd = [sys.executable, "-m", "unilab.cli.train", "+preset=cpu_smoke", "task.num_envs=2", "training.outputs.no_play=true",
           "training.loop.env_steps_per_sync=25", "algo.max_iterations=11", "algo.save_interval=1000",
           "training.outputs.video_interval=10", f"training.run.log_dir={tmp_path}", "training.run.run_name=clip"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=_headless_env())
    assert done.returncode == 0, done.stderr[-3000:]
    # The run's end is the clips' end: the video is there, no clip waits, no render of this run is running.
    video = tmp_path / "clip" / clip.VIDEO_DIR / "iter_0000000.mp4"
    assert video.exists(), (video.parent / clip.RENDER_LOG).read_text()[-3000:]
    assert not list(video.parent.glob("*.npz"))
    assert _renders_of(tmp_path) == []
    assert iio.imread(video).shape[0] == round(clip.CLIP_S / 0.02)  # the walk task's 50 Hz control
    assert len(list((tmp_path / "clip" / "tensorboard").glob("*.clips"))) == 1


def _renders_of(root: Path) -> list[str]:
    """Command lines of the running processes that render a clip under `root`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:  # the process ended
            continue
        if "unilab.viz.clip" in args and any(a.startswith(str(root)) for a in args):
            found.append(" ".join(args))
    return found


def _slow_renders(monkeypatch, seconds: float, code: int = 0) -> None:
    """Renders that take `seconds` and exit with `code`, writing the mp4 when they succeed (a stand-in for
    the real render, whose duration is what these tests are about); the clip's path stays in argv."""
    from unilab.viz import clip

    script = textwrap.dedent(f"""
        import sys, time, pathlib
        time.sleep({seconds})
        p = pathlib.Path(sys.argv[1])
        if {code} == 0:
            p.with_suffix(".mp4").write_bytes(b"mp4"); p.unlink()
        sys.exit({code})
    """)
    monkeypatch.setattr(clip, "render_command", lambda c: [sys.executable, "-c", script, str(c), "unilab.viz.clip"])


def _recorder_with_clips(tmp_path, monkeypatch, clips: int):
    """A recorder that has handed over `clips` 2-tick clips to renders, and one more full clip on its way."""
    from unilab.viz import clip

    monkeypatch.setattr(clip, "CLIP_S", 0.04)  # 2 ticks
    rec = clip.ClipRecorder(_ClipEnv(), interval=2, run_dir=tmp_path)
    for iteration in range(2 * clips + 2):
        rec.tick(iteration)
    return rec


def test_closing_the_recorder_stops_its_renders_and_keeps_their_clips(tmp_path, monkeypatch):
    from unilab.viz import clip

    _slow_renders(monkeypatch, 60)
    rec = _recorder_with_clips(tmp_path, monkeypatch, clips=2)
    assert len(rec.renders) == 2 and rec.pending
    procs = list(rec.renders)
    rec.close(wait_s=0.2)
    assert all(p.poll() is not None for p in procs) and _renders_of(tmp_path) == []
    videos = tmp_path / clip.VIDEO_DIR
    # Both stopped clips and the one that was on its way wait as npz, with no render started for the last.
    assert sorted(p.name for p in videos.glob("iter_*")) == ["iter_0000000.npz", "iter_0000002.npz",
                                                             "iter_0000004.npz"]
    assert not rec.pending and rec.renders == []


def test_closing_the_recorder_lets_a_quick_render_finish(tmp_path, monkeypatch):
    from unilab.viz import clip

    _slow_renders(monkeypatch, 0.0)
    rec = _recorder_with_clips(tmp_path, monkeypatch, clips=1)
    rec.close(wait_s=30)
    assert sorted(p.name for p in (tmp_path / clip.VIDEO_DIR).glob("iter_*")) == ["iter_0000000.mp4",
                                                                                   "iter_0000002.npz"]


def test_leftover_clips_are_rendered_by_the_launcher_one_at_a_time(tmp_path, monkeypatch):
    from unilab.viz import clip

    _slow_renders(monkeypatch, 60)
    _recorder_with_clips(tmp_path, monkeypatch, clips=1).close(wait_s=0.0)
    videos = tmp_path / clip.VIDEO_DIR
    (videos / "iter_0000009.npz").write_bytes(b"")  # rendered, but stopped before it removed its clip
    (videos / "iter_0000009.mp4").write_bytes(b"mp4")
    said = []
    _slow_renders(monkeypatch, 0.0)
    written = clip.render_leftovers(tmp_path, say=said.append)
    assert [p.name for p in written] == ["iter_0000000.mp4", "iter_0000002.mp4"]
    assert not list(videos.glob("*.npz")) and len(said) == 1 and "2 training clip(s)" in said[0]


@pytest.mark.parametrize("how", ["fails", "times out", "interrupted"])
def test_a_leftover_clip_that_is_not_rendered_stays_with_the_command(tmp_path, monkeypatch, how):
    from unilab.viz import clip

    _slow_renders(monkeypatch, 60)
    _recorder_with_clips(tmp_path, monkeypatch, clips=1).close(wait_s=0.0)
    _slow_renders(monkeypatch, 0.0 if how == "fails" else 60, code=3 if how == "fails" else 0)
    said = []
    written = clip.render_leftovers(tmp_path, say=said.append, timeout_s=0.5 if how == "times out" else 60,
                                    interrupted=(lambda: how == "interrupted"))
    videos = tmp_path / clip.VIDEO_DIR
    assert written == [] and sorted(p.name for p in videos.glob("iter_*")) == ["iter_0000000.npz", "iter_0000002.npz"]
    assert "2 training clip(s) not rendered" in said[-1] and str(videos / "iter_0000000.npz") in said[-1]
    assert _renders_of(tmp_path) == []


def test_a_renderer_that_cannot_start_names_what_to_install():
    from unilab.viz.gl import HeadlessGLUnavailable, with_gl_hint

    def broken():
        raise AttributeError("'NoneType' object has no attribute 'glGetError'")

    with pytest.raises(HeadlessGLUnavailable, match="libegl-mesa0.*MUJOCO_GL=osmesa"):
        with_gl_hint(broken)
    assert with_gl_hint(lambda: "renderer") == "renderer"


@pytest.mark.parametrize("interval, start, iterations, per_iteration, fits", [
    (10, 0, 11, 25, True),  # the run above: 250 env steps from iteration 0 end within iteration 10
    (10, 0, 9, 25, False),
    (20, 0, 40, 1, False),  # the CPU smoke run: 40 env steps, a clip takes 250
    (10, 15, 30, 25, True),  # resumed at 15: the first clip starts at 20 and ends at 30
    (10, 15, 29, 25, False),
])
def test_a_clip_fits_a_run_when_its_env_steps_end_before_the_run(interval, start, iterations, per_iteration, fits):
    from unilab.viz.clip import no_clip_note

    note = no_clip_note(interval, start, iterations, per_iteration, 0.02)
    assert (note is None) == fits
    if not fits:
        assert note.startswith(f"training.outputs.video_interval={interval} writes no clip in this run")


def test_a_run_too_short_for_its_video_interval_says_so_before_it_starts(spies, tmp_path, capsys, monkeypatch):
    from train_calls import run_train

    from unilab.viz import gl

    monkeypatch.setattr(gl, "render_problem", lambda: None)  # a host that renders, whatever this one has
    launcher, _ = spies
    assert run_train("+preset=cpu_smoke", "training.outputs.logger=[]", "training.outputs.video_interval=20",
                     f"training.run.log_dir={tmp_path}") == 0
    err = capsys.readouterr().err
    assert "training.outputs.video_interval=20 writes no clip in this run" in err
    assert "a run of at least 250 iterations (algo.max_iterations) writes one" in err
    ((prepared, *_), _), = launcher.calls
    assert any("writes no clip" in note for note in prepared.notes)  # and in run_summary.json


def test_a_run_long_enough_for_its_clip_says_nothing_of_it(spies, tmp_path, capsys, monkeypatch):
    from train_calls import run_train

    from unilab.viz import gl

    monkeypatch.setattr(gl, "render_problem", lambda: None)
    assert run_train("+preset=cpu_smoke", "training.outputs.logger=[]", "training.outputs.video_interval=20", "algo.max_iterations=250",
                     f"training.run.log_dir={tmp_path}") == 0
    assert "writes no clip" not in capsys.readouterr().err

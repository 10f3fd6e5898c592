"""`unilab demo`: the shipped walk policy on its tour in plain MuJoCo (no training, no GPU, no network)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from unilab.deploy import demo  # noqa: E402
from unilab.deploy import model as models  # noqa: E402
from unilab.deploy.policy import OnnxPolicy  # noqa: E402


@pytest.fixture(scope="module")
def shipped():
    policy = OnnxPolicy(demo.shipped_policy(), tasks=("g1_walk_flat",))
    model, _ = models.build_model(policy.meta, "ours")
    return policy, model


def test_the_shipped_policy_walks_the_commands_it_is_given(shipped):
    """Forward, then backward: the pelvis goes where the command says, and the robot stays up. The backward leg is
    measured after a second of turning the forward speed around."""
    policy, model = shipped
    xs = []
    tour = (demo.Leg("forward", (0.8, 0.0, 0.0), 3.0), demo.Leg("back", (-0.5, 0.0, 0.0), 3.0))
    ends = {}

    def frame(data):
        xs.append(float(data.qpos[0]))
        ends[len(xs)] = float(data.qpos[0])

    log = demo.walk_tour(model, policy, tour, on_frame=frame, say=lambda _: None)
    steps = round(3.0 / policy.meta["control_dt"])
    assert log.falls == 0 and log.steps == 2 * steps
    settled = steps + round(1.0 / policy.meta["control_dt"])
    forward, back = xs[steps - 1] - xs[0], xs[-1] - xs[settled - 1]
    assert forward > 1.2 and back < -0.6, (forward, back)  # 0.8 m/s for 3 s; -0.5 m/s for the last 2 s
    assert log.distance_m == pytest.approx(sum(np.abs(np.diff(xs))), rel=0.2)


def test_a_fall_restarts_the_tour_from_the_start_state(shipped):
    """A command far outside what it learned (5 m/s forward) topples it; the tour counts the fall and goes on."""
    policy, model = shipped
    log = demo.walk_tour(model, policy, (demo.Leg("too fast", (5.0, 0.0, 0.0), 4.0),), say=lambda _: None)
    assert log.falls >= 1 and log.legs[0]["falls"] == log.falls


def _args(**over):
    args = argparse.Namespace(video="", no_viewer=True, collision=False, size="480x360", fps=20.0, seconds=None)
    vars(args).update(over)
    return args


@pytest.mark.parametrize("over, words", [
    ({}, "nothing to show"),
    ({"size": "640"}, "--size 640"),
    ({"size": "641x480"}, "even sides"),
    ({"fps": 0.0}, "--fps"),
    ({"seconds": 0.5}, "--seconds 0.5"),
])
def test_bad_input_exits_2_and_writes_nothing(over, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert demo.main(_args(**over)) == 2
    assert words in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_command_is_wired_and_needs_no_torch_or_warp():
    """`unilab demo --help` through the real CLI; the tour itself imports neither torch nor warp."""
    done = subprocess.run([sys.executable, "-m", "unilab.cli.tools", "demo", "--help"], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0 and "--video" in done.stdout
    code = ("import sys; from unilab.deploy import demo, model; from unilab.deploy.policy import OnnxPolicy; "
            "p = OnnxPolicy(demo.shipped_policy()); m, _ = model.build_model(p.meta, 'ours'); "
            "demo.walk_tour(m, p, (demo.Leg('a', (0.5, 0, 0), 0.2),), say=lambda _: None); "
            "print(sorted(k for k in ('torch', 'warp') if k in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


@pytest.mark.integration
def test_the_demo_writes_a_video_of_the_tour(tmp_path):
    """The real command in its own process (it chooses its OpenGL backend before mujoco is imported)."""
    iio = pytest.importorskip("imageio.v3", reason="needs the video extra: pip install 'unilab[video]'")
    from unilab.viz.gl import render_problem

    if render_problem():
        pytest.skip(render_problem())
    out = tmp_path / "demo.mp4"
    done = subprocess.run([sys.executable, "-m", "unilab.cli.tools", "demo", "--video", str(out), "--size", "160x120",
                           "--fps", "10", "--seconds", "1.9", "--no-viewer"], capture_output=True, text=True,
                          check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    frames = iio.imread(out)
    assert frames.shape[1:3] == (120, 160) and len(frames) == 19
    assert "0 falls" in done.stdout and "walk forward" in done.stdout


def test_a_video_drawn_on_the_cpu_has_no_shadows(tmp_path):
    """The demo's and sim2sim's frames, like play's, leave shadows out where OpenGL draws on the CPU (they would more
    than double a frame's time there); a GPU keeps them."""
    pytest.importorskip("imageio.v3", reason="needs the video extra: pip install 'unilab[video]'")
    from unilab.viz.gl import render_problem

    if render_problem():
        pytest.skip(render_problem())
    code = ("from unilab.viz.gl import use_headless_gl\nuse_headless_gl()\nimport mujoco\n"
            "from unilab.deploy import demo, model as models\nfrom unilab.deploy.policy import OnnxPolicy\n"
            "from unilab.deploy.video import VideoWriter\nfrom unilab.viz.render import software_gl\n"
            "policy = OnnxPolicy(demo.shipped_policy(), tasks=('g1_walk_flat',))\n"
            "model, _ = models.build_model(policy.meta, 'ours')\n"
            f"w = VideoWriter(model, {str(tmp_path / 'v.mp4')!r}, fps=50, width=64, height=48, collision=True)\n"
            "print(int(software_gl()), int(w.renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW]))\nw.close(False)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    cpu, shadows = map(int, done.stdout.split()[-2:])
    assert shadows == (0 if cpu else 1)

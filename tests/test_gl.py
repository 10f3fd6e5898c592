"""OpenGL only where it is used: training, eval and export import none (they run with MUJOCO_GL=egl on a host
without libEGL), and what renders (play --video/--viewer, training.outputs.video_interval) checks its backend before
anything is created, naming the package or variable that fixes it (exit 2).

A host without libEGL is made by a sitecustomize on PYTHONPATH that refuses to load libEGL in every Python process
of the test (children included): this machine may have it installed system-wide, so LD_LIBRARY_PATH cannot hide it."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from train_calls import run_train

REPO = Path(__file__).resolve().parents[1]
GL_MODULES = ("OpenGL", "glfw", "mujoco.egl", "mujoco.osmesa", "mujoco.glfw", "mujoco.cgl")
HIDE_LIBEGL = textwrap.dedent("""\
    import ctypes, os
    _load = ctypes.CDLL.__init__
    def _without_libegl(self, name, *args, **kwargs):
        if name and os.path.basename(str(name)).startswith("libEGL"):
            raise OSError(f"{name}: cannot open shared object file: No such file or directory")
        _load(self, name, *args, **kwargs)
    ctypes.CDLL.__init__ = _without_libegl
""")
TINY_RUN = ["+preset=cpu_smoke", "task.num_envs=2", "training.outputs.logger=[]", "algo.max_iterations=2",
            "algo.save_interval=1000"]


def _env(pythonpath: list[Path], **set_vars: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "DISPLAY", "WAYLAND_DISPLAY")}
    env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), str(REPO), env.get("PYTHONPATH", "")])
    env.update(set_vars)
    return env


@pytest.fixture(scope="module")
def no_libegl(tmp_path_factory) -> dict:
    """The environment of a host without libEGL, with MUJOCO_GL=egl as clusters often set it."""
    site = tmp_path_factory.mktemp("no_libegl")
    (site / "sitecustomize.py").write_text(HIDE_LIBEGL)
    env = _env([site], MUJOCO_GL="egl")
    # The host reproduces the failure: mujoco itself cannot be imported there with its GL setup.
    plain = subprocess.run([sys.executable, "-c", "import mujoco"], capture_output=True, text=True, env=env,
                           timeout=120)
    assert plain.returncode != 0 and "eglQueryString" in plain.stderr, plain.stderr[-2000:]
    return env


def _python(args: list[str], env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=REPO)


def _listing(*dirs: Path) -> set:
    return {p for d in dirs for p in Path(d).rglob("*")}


# --- the training, eval and export paths -----------------------------------------------------------------


def test_training_eval_and_export_modules_import_no_opengl():
    modules = ["unilab.cli.train", "unilab.cli.tools", "unilab.config.schema", "unilab.launcher.launch",
               "unilab.launcher.prepare", "unilab.runtime.collector", "unilab.runtime.learner",
               "unilab.runtime.play", "unilab.sim.mjwarp_backend", "unilab.assets", "unilab.tasks.g1_walk_flat.env",
               "unilab.tasks.g1_motion_tracking.env", "unilab.motion.synth", "unilab.eval.cli", "unilab.eval.walk",
               "unilab.eval.tracking", "unilab.eval.export", "unilab.viz.clip"]
    script = textwrap.dedent(f"""\
        import importlib, json, os, sys
        for name in {modules!r}:
            importlib.import_module(name)
        from unilab.assets import g1
        g1.build_g1_model()
        gl = [m for m in sys.modules if m.split(".")[0] in ("OpenGL", "glfw") or m.startswith({GL_MODULES[2:]!r})]
        print(json.dumps({{"gl": gl, "mujoco": "mujoco" in sys.modules, "MUJOCO_GL": os.environ.get("MUJOCO_GL")}}))
    """)
    done = _python(["-c", script], _env([], MUJOCO_GL="egl"), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["mujoco"]  # imported, and without its GL setup
    assert seen["gl"] == []
    assert seen["MUJOCO_GL"] == "egl"  # left as the user set it: the clip renders a run starts inherit it


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
    return sorted(found)


def test_modules_that_simulate_import_mujoco_through_headless():
    """Only the rendering modules (unilab/viz, imported once the process chose its backend) import mujoco
    themselves; mujoco_warp, which imports mujoco, comes after unilab.sim.headless."""
    offenders = []
    for path in sorted((REPO / "unilab").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith("unilab/viz/") or rel == "unilab/sim/headless.py":
            continue
        imports = _imports(ast.parse(path.read_text()))
        headless_at = min((line for line, name in imports if name == "unilab.sim.headless"), default=None)
        for line, name in imports:
            top = name.split(".")[0]
            if top == "mujoco" or (top == "mujoco_warp" and (headless_at is None or headless_at > line)):
                offenders.append(f"{rel}:{line}: import {name}")
    assert offenders == []


@pytest.fixture(scope="module")
def run_without_libegl(no_libegl, tmp_path_factory):
    """A tiny run trained (and played, and exported at its end) with MUJOCO_GL=egl and no libEGL."""
    log_dir = tmp_path_factory.mktemp("gl_runs")
    done = _python(["-m", "unilab.cli.train", *TINY_RUN, "training.outputs.no_play=false", "training.outputs.play_steps=3",
                    "training.outputs.export_onnx=true", f"training.run.log_dir={log_dir}", "training.run.run_name=noegl"], no_libegl)
    assert done.returncode == 0, done.stderr[-4000:]
    return log_dir / "noegl"


@pytest.mark.integration
def test_training_play_eval_and_export_need_no_libegl(run_without_libegl, no_libegl, tmp_path):
    run = run_without_libegl
    assert json.loads((run / "run_summary.json").read_text())["status"] == "completed"
    assert json.loads((run / "play.json").read_text())["steps"] == 3
    assert list(run.glob("*.onnx"))
    ev = _python(["-m", "unilab.cli.tools", "eval", str(run), "--envs-per-command", "1", "--hold-s", "0.2",
                  "--window-s", "0.1", "--device", "cpu", "--out", str(tmp_path / "eval.json")], no_libegl)
    assert ev.returncode == 0, ev.stderr[-3000:]
    assert (tmp_path / "eval.json").exists()
    ex = _python(["-m", "unilab.cli.tools", "export", str(run), "--out", str(tmp_path / "policy.onnx")], no_libegl)
    assert ex.returncode == 0, ex.stderr[-3000:]
    assert (tmp_path / "policy.onnx").exists()


# --- what renders checks its backend first ----------------------------------------------------------------


def test_video_interval_without_libegl_exits_2_naming_the_fix_and_creates_nothing(no_libegl, tmp_path):
    log_dir = tmp_path / "runs"
    done = _python(["-m", "unilab.cli.train", *TINY_RUN, "training.outputs.video_interval=10", f"training.run.log_dir={log_dir}"],
                   no_libegl)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "training.outputs.video_interval=10" in done.stderr and "cannot load libEGL" in done.stderr
    assert "libegl1" in done.stderr and "MUJOCO_GL=osmesa" in done.stderr
    assert "Traceback" not in done.stderr
    assert not log_dir.exists()


@pytest.mark.integration
@pytest.mark.parametrize("mujoco_gl", ["egl", None])  # None: unset, videos pick EGL
def test_play_video_without_libegl_exits_2_naming_the_fix_and_creates_nothing(run_without_libegl, no_libegl,
                                                                              tmp_path, mujoco_gl):
    env = dict(no_libegl)
    if mujoco_gl is None:
        del env["MUJOCO_GL"]
    before = _listing(run_without_libegl, tmp_path)
    done = _python(["-m", "unilab.cli.tools", "play", str(run_without_libegl), "--video", str(tmp_path / "p.mp4"),
                    "--steps", "2"], env)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "--video" in done.stderr and "cannot load libEGL" in done.stderr and "libegl1" in done.stderr
    assert "Traceback" not in done.stderr
    assert _listing(run_without_libegl, tmp_path) == before


@pytest.mark.parametrize("value, says", [
    ("disable", "turns MuJoCo's rendering off"),
    ("vulkan", "not a backend MuJoCo knows"),
    ("glfw", "no display"),
])
def test_a_backend_that_cannot_render_offscreen_is_named(monkeypatch, value, says):
    from unilab.viz import gl

    monkeypatch.setenv("MUJOCO_GL", value)
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    with pytest.raises(ValueError, match=f"--video x.mp4: MUJOCO_GL={value} .*{says}"):
        gl.require_gl("--video x.mp4")


@pytest.mark.parametrize("backend, library, fix", [("egl", "EGL", "libegl1"), ("osmesa", "OSMesa", "libosmesa6")])
def test_a_missing_backend_library_names_its_package(monkeypatch, backend, library, fix):
    from unilab.viz import gl

    asked = []
    monkeypatch.setattr(gl, "_loadable", lambda name: asked.append(name) or False)
    monkeypatch.setenv("MUJOCO_GL", backend)
    assert fix in gl.render_problem() and asked == [library]
    monkeypatch.setattr(gl, "_loadable", lambda name: True)
    assert gl.render_problem() is None
    gl.require_gl("--video x.mp4")  # no error
    gl.require_gl_for("training.outputs.video_interval", None)  # unset: nothing to check, nothing asked


def test_library_check_loads_in_a_child_process():
    from unilab.viz import gl

    assert gl._loadable("c")  # libc.so.6
    assert not gl._loadable("surely_no_such_library_here")


def test_viewer_needs_a_display_and_glfw(monkeypatch):
    import importlib.util

    from unilab.viz import gl

    monkeypatch.setenv("MUJOCO_GL", "disable")  # plays no part for the viewer
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    with pytest.raises(ValueError, match="--viewer: no display.*DISPLAY.*use --video"):
        gl.require_gl("--viewer", viewer=True)
    monkeypatch.setenv("DISPLAY", ":0")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "glfw" else real(name, *a))
    assert "pip install glfw" in gl.viewer_problem()


def test_video_interval_is_checked_at_config_time_before_anything_starts(spies, tmp_path, capsys, monkeypatch):
    from unilab.viz import gl

    monkeypatch.setattr(gl, "_loadable", lambda name: False)
    monkeypatch.setenv("MUJOCO_GL", "egl")
    launcher, env_factory = spies
    assert run_train(*TINY_RUN, "training.outputs.video_interval=5", f"training.run.log_dir={tmp_path / 'runs'}") == 2
    assert "training.outputs.video_interval=5" in capsys.readouterr().err
    assert launcher.calls == [] and env_factory.calls == [] and not (tmp_path / "runs").exists()


def test_rendering_refuses_a_mujoco_imported_without_opengl(monkeypatch):
    from types import SimpleNamespace

    from unilab.viz import gl

    monkeypatch.setitem(sys.modules, "unilab.sim.headless", SimpleNamespace(gl_off=True))
    with pytest.raises(gl.HeadlessGLUnavailable, match="imported without OpenGL"):
        gl.use_headless_gl()

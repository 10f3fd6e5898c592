"""OpenGL only where it is used: training, eval and export import none (they run with MUJOCO_GL=egl on a host
without libEGL).

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
TINY_RUN = ["+preset=cpu_smoke", "task.num_envs=2", "training.logger=[]", "algo.max_iterations=2",
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
    done = _python(["-m", "unilab.cli.train", *TINY_RUN, "training.no_play=false", "training.play_steps=3",
                    "training.export_onnx=true", f"training.log_dir={log_dir}", "training.run_name=noegl"], no_libegl)
    assert done.returncode == 0, done.stderr[-4000:]
    return log_dir / "noegl"


@pytest.mark.slow
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

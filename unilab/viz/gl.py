"""Which OpenGL backend MuJoCo renders with, and whether it can start here. MuJoCo reads MUJOCO_GL once, when it
is first imported, so the choice must happen before anything imports mujoco. Only rendering needs OpenGL (videos,
training clips, the viewer): the processes that only simulate import mujoco without it (unilab.sim.headless).

The checks (`render_problem`, `viewer_problem`, `require_gl`) are cheap and leave the calling process as it was:
they import no mujoco, load no GL library into it (a short child process tries the library) and make no context,
so a launcher validating its config can ask before it creates anything."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from functools import lru_cache

HEADLESS_BACKENDS = ("egl", "osmesa")
OFF_VALUES = ("disable", "disabled", "off", "false", "0")  # mujoco's gl_context: no backend at all
WINDOW_VALUES = ("glfw", "glx", "enable", "enabled", "on", "true", "1")  # mujoco's GLFW context: needs a display
EGL_FIX = ("install libEGL: the system package libegl1 (libglvnd), with the NVIDIA driver on GPU hosts or Mesa's "
           "libegl-mesa0 libgl1-mesa-dri on CPU hosts; or install libosmesa6 and set MUJOCO_GL=osmesa")
OSMESA_FIX = "install the system package libosmesa6, or unset MUJOCO_GL to render with EGL (libegl1)"


class HeadlessGLUnavailable(RuntimeError):
    """No OpenGL context for offscreen rendering: the backend's libraries are missing or it was chosen too late."""


def has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _imported_without_gl() -> bool:
    headless = sys.modules.get("unilab.sim.headless")
    return headless is not None and headless.gl_off


def use_headless_gl() -> str:
    """Pick EGL for offscreen rendering unless the user chose a backend; returns the backend in use.
    EGL is NVIDIA's driver on GPU hosts and Mesa's software renderer on CPU hosts. Raises HeadlessGLUnavailable
    when mujoco was imported already without a backend that can render here."""
    if _imported_without_gl():
        raise HeadlessGLUnavailable("mujoco was imported without OpenGL (unilab.sim.headless) before rendering "
                                    "chose its backend: choose it first")
    chosen = os.environ.get("MUJOCO_GL", "").strip().lower()
    if chosen:
        return chosen
    if "mujoco" in sys.modules:
        if has_display():
            return "glfw"  # mujoco's default, which a display serves
        raise HeadlessGLUnavailable("mujoco was imported before a headless OpenGL backend was chosen: "
                                    "set MUJOCO_GL=egl (or osmesa) in the environment")
    os.environ["MUJOCO_GL"] = "egl"
    return "egl"


def with_gl_hint(make):
    """`make()` (importing mujoco, making a mujoco.Renderer), or HeadlessGLUnavailable naming what to install
    for the backend (mujoco's import itself fails when MUJOCO_GL names a backend whose library is missing)."""
    try:
        return make()
    except Exception as exc:  # mujoco raises several kinds when the GL libraries are missing
        backend = os.environ.get("MUJOCO_GL", "glfw")
        fix = OSMESA_FIX if backend.strip().lower() == "osmesa" else EGL_FIX
        raise HeadlessGLUnavailable(f"cannot render with MUJOCO_GL={backend} ({type(exc).__name__}: {exc}); "
                                    f"{fix}") from exc


def render_problem() -> str | None:
    """What keeps offscreen rendering (videos, training clips) from starting here, naming the fix; None when the
    backend it uses (MUJOCO_GL; EGL when unset) finds its libraries. A backend whose libraries load can still
    find no device when the context is made: the render says so then (with_gl_hint)."""
    raw = os.environ.get("MUJOCO_GL", "")
    backend = raw.strip().lower() or "egl"
    name = f"MUJOCO_GL={raw}" if raw else "EGL (MUJOCO_GL is unset)"
    if backend in OFF_VALUES:
        return f"{name} turns MuJoCo's rendering off: unset it (EGL is used) or set MUJOCO_GL=egl or osmesa"
    if backend in WINDOW_VALUES:
        if has_display():
            return None if importlib.util.find_spec("glfw") else f"{name} needs the glfw package: pip install glfw"
        return (f"{name} renders through a window and there is no display (DISPLAY, WAYLAND_DISPLAY): "
                "set MUJOCO_GL=egl (or osmesa) to render offscreen")
    if backend not in HEADLESS_BACKENDS:
        return f"{name} is not a backend MuJoCo knows: use egl, osmesa or glfw"
    if importlib.util.find_spec("OpenGL") is None:
        return f"{name} needs PyOpenGL: pip install pyopengl"
    if backend == "egl":
        return None if _loadable("EGL") else f"{name} cannot load libEGL: {EGL_FIX}"
    return None if _loadable("OSMesa") else f"{name} cannot load libOSMesa: {OSMESA_FIX}"


def viewer_problem() -> str | None:
    """What keeps MuJoCo's interactive viewer (a GLFW window; MUJOCO_GL does not apply) from opening here."""
    if not has_display():
        return ("no display: the viewer opens a window and needs DISPLAY or WAYLAND_DISPLAY (a desktop session or "
                "X forwarding); on a host without one use --video")
    if importlib.util.find_spec("glfw") is None:
        return "the viewer needs the glfw package: pip install glfw"
    return None


def require_gl(what: str, *, viewer: bool = False) -> None:
    """ValueError "<what>: <the problem and its fix>" when rendering (`viewer`: the viewer) cannot start here."""
    problem = viewer_problem() if viewer else render_problem()
    if problem:
        raise ValueError(f"{what}: {problem}")


def require_gl_for(key: str, value) -> None:
    """For a setting that renders when it is set (training.outputs.video_interval): `require_gl` when it is not None,
    with the way to train without OpenGL. Unset, nothing is checked: training needs no OpenGL."""
    if value is not None:
        require_gl(f"{key}={value!r}: its videos need an OpenGL backend ({key}=null trains without one)")


@lru_cache(maxsize=None)
def _loadable_with(name: str, library_path: str | None) -> bool:
    # Tried as PyOpenGL loads it (OpenGL.platform.ctypesloader: lib<name>.so, then .so.9 down to .so.0), in a
    # child process: this one stays free of GL libraries.
    names = [f"lib{name}.so", *(f"lib{name}.so.{i}" for i in range(9, -1, -1))]
    code = ("import ctypes, sys\n"
            "for n in sys.argv[1:]:\n"
            "    try:\n"
            "        ctypes.CDLL(n)\n"
            "        sys.exit(0)\n"
            "    except OSError:\n"
            "        pass\n"
            "sys.exit(1)\n")
    try:
        done = subprocess.run([sys.executable, "-c", code, *names], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _loadable(name: str) -> bool:
    """Whether the dynamic loader finds lib<name> (asked once per LD_LIBRARY_PATH)."""
    return _loadable_with(name, os.environ.get("LD_LIBRARY_PATH"))

"""Which OpenGL backend MuJoCo renders with. MuJoCo reads MUJOCO_GL once, when it is first imported,
so the choice must happen before anything imports mujoco."""

from __future__ import annotations

import os
import sys

HEADLESS_BACKENDS = ("egl", "osmesa")


class HeadlessGLUnavailable(RuntimeError):
    """No OpenGL context for offscreen rendering: the backend's libraries are missing or it was chosen too late."""


def has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def use_headless_gl() -> str:
    """Pick EGL for offscreen rendering unless the user chose a backend; returns the backend in use.
    EGL is NVIDIA's driver on GPU hosts and Mesa's software renderer on CPU hosts. Raises HeadlessGLUnavailable
    when mujoco was imported already with a backend that needs a display and none exists."""
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
        raise HeadlessGLUnavailable(
            f"cannot render with MUJOCO_GL={backend} ({type(exc).__name__}: {exc}); on GPU hosts install libegl1 "
            "with the NVIDIA driver, on CPU hosts Mesa's libegl1 libegl-mesa0 libgl1-mesa-dri, or install "
            "libosmesa6 and set MUJOCO_GL=osmesa") from exc

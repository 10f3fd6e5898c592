"""Which OpenGL backend MuJoCo renders with. MuJoCo reads MUJOCO_GL once, when it is first imported,
so the choice must happen before anything imports mujoco."""

from __future__ import annotations

import os
import sys

HEADLESS_BACKENDS = ("egl", "osmesa")


def has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def use_headless_gl() -> str:
    """Pick EGL for offscreen rendering unless the user chose a backend; returns the backend in use.
    EGL is NVIDIA's driver on GPU hosts and Mesa's software renderer on CPU hosts. Raises RuntimeError
    when mujoco was imported already with a backend that needs a display and none exists."""
    chosen = os.environ.get("MUJOCO_GL", "").strip().lower()
    if chosen:
        return chosen
    if "mujoco" in sys.modules:
        if has_display():
            return "glfw"  # mujoco's default, which a display serves
        raise RuntimeError("mujoco was imported before a headless OpenGL backend was chosen: "
                           "set MUJOCO_GL=egl (or osmesa) in the environment")
    os.environ["MUJOCO_GL"] = "egl"
    return "egl"

"""A rollout's frames to a video file: mujoco.Renderer offscreen (EGL unless MUJOCO_GL names another backend),
a camera that follows the pelvis, imageio to write the mp4 (an optional dependency: unilab[video])."""

from __future__ import annotations

import importlib.util
import os
import sys

from .policy import DeployError


class VideoUnavailable(DeployError):
    """No imageio, or no offscreen OpenGL context."""


def prepare() -> None:
    """Check imageio and choose the offscreen GL backend; call before anything imports mujoco (it reads MUJOCO_GL
    once, at its first import)."""
    if importlib.util.find_spec("imageio") is None:
        raise VideoUnavailable("--video needs imageio and imageio-ffmpeg: pip install 'unilab[video]'")
    if "mujoco" not in sys.modules:
        os.environ.setdefault("MUJOCO_GL", "egl")
        try:  # now, with the backend: unilab.sim.headless then reuses this import instead of one without GL
            import mujoco  # noqa: F401
        except Exception as exc:  # mujoco's GL setup fails in its own ways when the backend's library is missing
            raise VideoUnavailable(f"--video: mujoco cannot load the {os.environ['MUJOCO_GL']} OpenGL backend "
                                   f"({exc}); install libEGL (libegl1) or set MUJOCO_GL=osmesa with libosmesa6") from None


class VideoWriter:
    """`frame(data)` after each policy step renders the robot from a camera that tracks the pelvis."""

    def __init__(self, model, path: str, *, fps: float, width: int = 640, height: int = 480):
        import imageio

        from unilab.sim.headless import mujoco

        try:
            self.renderer = mujoco.Renderer(model, height=height, width=width)
        except Exception as exc:  # no GL context: mujoco raises its own errors
            raise VideoUnavailable(f"--video: no offscreen OpenGL here ({exc}); install libEGL (libegl1) or set "
                                   "MUJOCO_GL=osmesa with libosmesa6") from None
        self.camera = mujoco.MjvCamera()
        self.camera.type = mujoco.mjtCamera.mjCAMERA_TRACKING
        self.camera.trackbodyid = 1  # the pelvis, the first body after the world
        self.camera.distance, self.camera.elevation, self.camera.azimuth = 3.0, -15.0, 135.0
        self.writer = imageio.get_writer(path, fps=fps, macro_block_size=1)

    def frame(self, data) -> None:
        self.renderer.update_scene(data, camera=self.camera)
        self.writer.append_data(self.renderer.render())

    def close(self) -> None:
        self.writer.close()
        self.renderer.close()

"""A rollout's frames to a video file: mujoco.Renderer offscreen (EGL unless MUJOCO_GL names another backend, as
`unilab play --video` chooses it: unilab.viz.gl), a camera that follows the pelvis, imageio to write the mp4 (an
optional dependency: unilab[video])."""

from __future__ import annotations

import importlib
import importlib.util

from .policy import DeployError


class VideoUnavailable(DeployError):
    """No imageio, or no offscreen OpenGL here."""


def prepare() -> None:
    """Check imageio and OpenGL and choose the backend; call before anything imports mujoco (it reads MUJOCO_GL
    once, at its first import: unilab.sim.headless then reuses this import)."""
    from unilab.viz.gl import HeadlessGLUnavailable, require_gl, use_headless_gl, with_gl_hint

    if importlib.util.find_spec("imageio") is None:
        raise VideoUnavailable("--video needs imageio and imageio-ffmpeg: pip install 'unilab[video]'")
    try:
        require_gl("--video")
        use_headless_gl()
        with_gl_hint(lambda: importlib.import_module("mujoco"))
    except (ValueError, HeadlessGLUnavailable) as exc:
        raise VideoUnavailable(str(exc)) from None


class VideoWriter:
    """`frame(data)` after each policy step renders the robot from a camera that tracks the pelvis."""

    def __init__(self, model, path: str, *, fps: float, width: int = 640, height: int = 480):
        import imageio

        from unilab.sim.headless import mujoco
        from unilab.viz.gl import HeadlessGLUnavailable, with_gl_hint

        try:
            self.renderer = with_gl_hint(lambda: mujoco.Renderer(model, height=height, width=width))
        except HeadlessGLUnavailable as exc:
            raise VideoUnavailable(f"--video: {exc}") from None
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

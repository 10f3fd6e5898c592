"""A rollout's frames to a video file: mujoco.Renderer offscreen (EGL unless MUJOCO_GL names another backend, as
`unilab play --video` chooses it: unilab.viz.gl), a camera that follows the pelvis, imageio to write the mp4 (an
optional dependency: unilab[video])."""

from __future__ import annotations

import importlib
import importlib.util

from .policy import DeployError


class VideoUnavailable(DeployError):
    """No imageio, or no offscreen OpenGL here."""


def parse_size(text: str) -> tuple[int, int]:
    """`--size WxH` -> (width, height); DeployError for anything a video encoder would refuse."""
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise DeployError(f"--size {text}: give WIDTHxHEIGHT, e.g. 640x480") from None
    if not (16 <= w <= 3840 and 16 <= h <= 2160) or w % 2 or h % 2:
        raise DeployError(f"--size {text}: even sides between 16x16 and 3840x2160")
    return w, h


def check_fps(fps: float) -> None:
    if not 1.0 <= fps <= 100.0:
        raise DeployError(f"--fps {fps:g}: between 1 and 100")


def steps_per_frame(control_dt: float, fps: float) -> int:
    """Policy steps between drawn frames, so that a video at `fps` plays in real time."""
    return max(1, round(1.0 / (control_dt * fps)))


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
    """`frame(data)` after each policy step renders the robot, dressed with the G1's look (unilab.assets.look: its
    meshes, a sky, a floor; the collision geoms with `collision`), from a camera that tracks the pelvis. Every
    `every`-th step is drawn, so that the video plays in real time at `1 / (control_dt * every)` fps. Closing after
    an error removes the partial file."""

    def __init__(self, model, path: str, *, fps: float, width: int = 640, height: int = 480, every: int = 1,
                 collision: bool = False, say=print):
        from unilab.assets import look
        from unilab.sim.headless import mujoco
        from unilab.viz.gl import HeadlessGLUnavailable, with_gl_hint
        from unilab.viz.render import no_shadows_on_cpu
        from unilab.viz.video import VideoExtraMissing, VideoWriter as FileWriter

        self.model = look.render_model(model, collision=collision, say=say)
        self.data = mujoco.MjData(self.model)
        self.option = look.scene_option(self.model, collision=collision)
        try:
            self.renderer = with_gl_hint(lambda: mujoco.Renderer(self.model, height=height, width=width))
        except HeadlessGLUnavailable as exc:
            raise VideoUnavailable(f"--video: {exc}") from None
        no_shadows_on_cpu(self.renderer)  # as unilab play's frames
        self.camera = mujoco.MjvCamera()
        self.camera.type = mujoco.mjtCamera.mjCAMERA_TRACKING
        self.camera.trackbodyid = 1  # the pelvis, the first body after the world
        self.camera.distance, self.camera.elevation, self.camera.azimuth = 3.0, -15.0, 135.0
        self.every, self._calls = max(1, int(every)), 0
        try:
            self.writer = FileWriter(path, fps=fps / self.every)
        except VideoExtraMissing as exc:
            self.renderer.close()
            raise VideoUnavailable(str(exc)) from None

    def frame(self, data) -> None:
        from unilab.sim.headless import mujoco

        self._calls += 1
        if (self._calls - 1) % self.every:
            return
        self.data.qpos[:] = data.qpos[:self.model.nq]
        mujoco.mj_forward(self.model, self.data)
        self.renderer.update_scene(self.data, camera=self.camera, scene_option=self.option)
        self.writer.append(self.renderer.render())

    def close(self, ok: bool = True) -> None:
        try:
            self.writer.close(ok)
        finally:
            self.renderer.close()

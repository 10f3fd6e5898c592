"""Headless frames of the first worlds of a batched env: each world's qpos is copied into a CPU MjData,
posed with mj_forward and drawn with mujoco.Renderer; several worlds are tiled into one frame."""

from __future__ import annotations

import copy
import math

import mujoco
import numpy as np

from unilab.assets import look

from .gl import with_gl_hint
from .markers import add_to_scene, floor_grid

CAMERAS = ("track", "fixed")
SOFTWARE_RENDERERS = ("llvmpipe", "softpipe", "swrast")  # GL_RENDERER names of Mesa's CPU drivers
CAMERA_DISTANCE = 3.0
CAMERA_ELEVATION = -20.0
CAMERA_AZIMUTH = 135.0


def grid_shape(worlds: int) -> tuple[int, int]:
    """(rows, cols) of the tiles of `worlds` worlds: as square as possible, wider than tall."""
    cols = math.ceil(math.sqrt(worlds))
    return math.ceil(worlds / cols), cols


def software_gl() -> bool:
    """Whether the current OpenGL context draws on the CPU (Mesa's llvmpipe or softpipe, OSMesa's swrast)."""
    try:
        from OpenGL import GL, error
    except ImportError:
        return False
    try:
        name = (GL.glGetString(GL.GL_RENDERER) or b"").decode(errors="replace").lower()
    except error.Error:  # no current context: assume a GPU
        return False
    return any(cpu in name for cpu in SOFTWARE_RENDERERS)


def no_shadows_on_cpu(renderer: mujoco.Renderer) -> None:
    """Turn the renderer's shadows off where OpenGL draws on the CPU: Mesa's rasteriser draws every mesh triangle
    again for the shadow map, which would more than double a frame's time there (docs/en/play.md)."""
    if software_gl():
        renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0


class FrameRenderer:
    """Frames of `width` x `height` pixels showing `worlds` worlds of `mj_model`, tiled, in the G1's look
    (unilab.assets.look: its meshes, or its collision geoms with `collision`)."""

    def __init__(self, mj_model: mujoco.MjModel, *, worlds: int = 1, width: int = 640, height: int = 480,
                 camera: str = "track", root_body: int = 1, collision: bool = False):
        if camera not in CAMERAS:
            raise ValueError(f"camera {camera!r}: choose one of {', '.join(CAMERAS)}")
        self.worlds = int(worlds)
        self.rows, self.cols = grid_shape(self.worlds)
        self.width, self.height = int(width), int(height)
        self.tile_w, self.tile_h = self.width // self.cols, self.height // self.rows
        if self.tile_w < 8 or self.tile_h < 8:
            raise ValueError(f"{self.width}x{self.height} is too small for {self.worlds} tiled worlds")
        # A render-side copy (the env's model stays as it is): the dressed G1, or the model itself.
        model = look.render_model(mj_model, collision=collision)
        model = copy.copy(model) if model is mj_model else model
        self.dressed = look.is_dressed(model)  # its floor has lines of its own; else one is drawn (floor_grid)
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, self.tile_w)  # the buffer must hold a tile
        model.vis.global_.offheight = max(model.vis.global_.offheight, self.tile_h)
        if not self.dressed:
            # A model without lights of its own: a brighter headlight keeps a grey robot readable.
            model.vis.headlight.ambient[:] = 0.35
            model.vis.headlight.diffuse[:] = 0.75
        self.model = model
        self.data = [mujoco.MjData(model) for _ in range(self.worlds)]
        self.renderer = with_gl_hint(lambda: mujoco.Renderer(model, self.tile_h, self.tile_w))
        self.option = look.scene_option(model, collision=collision)
        no_shadows_on_cpu(self.renderer)
        self.camera = camera
        self.root_body = int(root_body)
        self.cameras = [self._camera() for _ in range(self.worlds)]
        self._started = False

    def _camera(self) -> mujoco.MjvCamera:
        cam = mujoco.MjvCamera()
        cam.distance, cam.elevation, cam.azimuth = CAMERA_DISTANCE, CAMERA_ELEVATION, CAMERA_AZIMUTH
        if self.camera == "track":
            cam.type = mujoco.mjtCamera.mjCAMERA_TRACKING
            cam.trackbodyid = self.root_body
        else:
            cam.type = mujoco.mjtCamera.mjCAMERA_FREE
        return cam

    def frame(self, qpos: np.ndarray, markers: list[list] | None = None) -> np.ndarray:
        """One (height, width, 3) uint8 frame of the worlds whose generalized positions are the rows of
        `qpos` (worlds, nq); `markers[w]` are drawn into world w's tile."""
        out = np.zeros((self.height, self.width, 3), dtype=np.uint8)
        for w in range(self.worlds):
            d = self.data[w]
            d.qpos[:] = qpos[w]
            mujoco.mj_forward(self.model, d)
            cam = self.cameras[w]
            if self.camera == "fixed" and not self._started:
                cam.lookat[:] = d.xpos[self.root_body]  # where the robot starts; the camera stays there
            self.renderer.update_scene(d, camera=cam, scene_option=self.option)
            if not self.dressed:
                add_to_scene(self.renderer.scene, floor_grid(cam.lookat))
            if markers is not None:
                add_to_scene(self.renderer.scene, markers[w])
            r, c = divmod(w, self.cols)
            out[r * self.tile_h:(r + 1) * self.tile_h, c * self.tile_w:(c + 1) * self.tile_w] = self.renderer.render()
        self._started = True
        return out

    def close(self) -> None:
        self.renderer.close()

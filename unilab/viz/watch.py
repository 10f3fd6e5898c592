"""Watchers of a rollout: `start(env)` once the env exists, `frame(env)` after the reset and after each
control step, `close(ok)` at the end. They read world state from the env; the rollout loop stays theirs."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np


class WatchClosed(Exception):
    """The watcher's window was closed: the rollout ends there (its report covers the steps so far)."""


def root_body(mj_model) -> int:
    """The body of the model's free joint (the robot's root), which the tracking camera follows."""
    import mujoco

    free = np.flatnonzero(mj_model.jnt_type == mujoco.mjtJoint.mjJNT_FREE)
    return int(mj_model.jnt_bodyid[free[0]]) if len(free) else 0


def world_qpos(env, worlds: int) -> np.ndarray:
    """(worlds, nq) float64 host copy of the first worlds' generalized positions."""
    return env.qpos[:worlds].detach().to("cpu").double().numpy()


class VideoRecorder:
    """Renders the first `worlds` worlds (tiled) into a video file. `fps` below the control rate renders
    every n-th step so that the video still plays in real time; default: every step, in real time."""

    def __init__(self, path: str | Path, *, worlds: int = 1, fps: float | None = None, width: int = 640,
                 height: int = 480, camera: str = "track", collision: bool = False):
        from .video import require_imageio

        self.path = Path(path)
        require_imageio(self.path.suffix.lower() == ".gif")  # fail before the env is built
        self.worlds, self.fps, self.width, self.height, self.camera = worlds, fps, width, height, camera
        self.collision = collision
        self.renderer = self.writer = None
        self.calls = 0

    def start(self, env) -> None:
        from .render import FrameRenderer
        from .video import VideoWriter

        if self.worlds > env.num_envs:
            raise ValueError(f"--worlds {self.worlds}: the env has only {env.num_envs} worlds")
        control_hz = 1.0 / env.dt
        fps = float(self.fps or control_hz)
        self.stride = max(1, round(control_hz / fps))
        self.renderer = FrameRenderer(env.mj_model, worlds=self.worlds, width=self.width, height=self.height,
                                      camera=self.camera, root_body=root_body(env.mj_model),
                                      collision=self.collision)
        self.writer = VideoWriter(self.path, fps)

    def frame(self, env) -> None:
        from .markers import task_markers

        if self.calls % self.stride == 0:
            self.writer.append(self.renderer.frame(world_qpos(env, self.worlds), task_markers(env, self.worlds)))
        self.calls += 1

    def close(self, ok: bool = True) -> None:
        if self.renderer is not None:
            self.renderer.close()
        if self.writer is not None:
            self.writer.close(ok)


class PassiveViewer:
    """MuJoCo's interactive viewer on world 0, paced to real time; closing its window ends the rollout."""

    def __init__(self, *, collision: bool = False):
        from .gl import require_gl

        require_gl("--viewer", viewer=True)  # a display and glfw; MUJOCO_GL plays no part
        self.viewer = None
        self.collision = collision

    def start(self, env) -> None:
        import mujoco
        import mujoco.viewer

        from unilab.assets import look

        self.model = look.render_model(env.mj_model, collision=self.collision)  # the G1's look, not the env's model
        self.data = mujoco.MjData(self.model)
        self.dt = float(env.dt)
        self.viewer = mujoco.viewer.launch_passive(self.model, self.data)
        look.set_geom_groups(self.viewer.opt.geomgroup, self.model, collision=self.collision)
        self.next_t = time.perf_counter()

    def frame(self, env) -> None:
        import mujoco

        from .markers import add_to_scene, task_markers

        if not self.viewer.is_running():
            raise WatchClosed
        self.data.qpos[:] = world_qpos(env, 1)[0]
        mujoco.mj_forward(self.model, self.data)
        with self.viewer.lock():
            self.viewer.user_scn.ngeom = 0
            add_to_scene(self.viewer.user_scn, task_markers(env, 1)[0])
        self.viewer.sync()
        self.next_t += self.dt
        time.sleep(max(0.0, self.next_t - time.perf_counter()))

    def close(self, ok: bool = True) -> None:
        if self.viewer is not None:
            self.viewer.close()


class ModelViewer:
    """MuJoCo's interactive viewer on a model posed from qpos (no env: plain MuJoCo rollouts such as `unilab
    demo`), paced to real time at `dt` per frame; closing its window raises WatchClosed."""

    def __init__(self, model, dt: float, geomgroup=None):
        import mujoco
        import mujoco.viewer

        from .gl import require_gl

        require_gl("the viewer", viewer=True)
        self.model, self.dt = model, float(dt)
        self.data = mujoco.MjData(model)
        self.viewer = mujoco.viewer.launch_passive(model, self.data)
        if geomgroup is not None:
            self.viewer.opt.geomgroup[:] = geomgroup
        self.next_t = time.perf_counter()

    def frame(self, qpos) -> None:
        import mujoco

        if not self.viewer.is_running():
            raise WatchClosed
        self.data.qpos[:] = qpos[:self.model.nq]
        mujoco.mj_forward(self.model, self.data)
        self.viewer.sync()
        self.next_t += self.dt
        time.sleep(max(0.0, self.next_t - time.perf_counter()))

    def close(self) -> None:
        self.viewer.close()

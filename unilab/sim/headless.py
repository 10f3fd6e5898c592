"""MuJoCo without OpenGL: `from unilab.sim.headless import mujoco` in every module that simulates (sim backend,
assets, tasks, motion; hence collector, learner, launcher, play, eval and export).

Why: `import mujoco` sets up OpenGL as a side effect. Its `rendering.classic.gl_context` reads MUJOCO_GL once, at
that first import, and imports the backend it names: egl -> mujoco.egl -> PyOpenGL, which loads libEGL; osmesa ->
libOSMesa; unset -> mujoco.glfw and the glfw library. When that library is missing the failure is not always an
ImportError (PyOpenGL without libEGL: "'NoneType' object has no attribute 'eglQueryString'"), mujoco
does not catch it, and `import mujoco` itself fails: with MUJOCO_GL=egl set (common on clusters) on a host without
libEGL, a training run would die building its worlds for a reason that has nothing to do with training.

So the first import of mujoco in a process that does not render sees MUJOCO_GL=disable, the one value mujoco
accepts without loading any GL library, and the variable is put back right after: the processes a run starts to
render (unilab.viz.clip, spawned with this process's environment) still get the user's backend. Rendering
processes import mujoco with their backend before anything imports it through here (unilab.viz.gl); a mujoco
already imported is used as it is.
"""

from __future__ import annotations

import os
import sys

OFF = "disable"  # mujoco's gl_context: "disable", "disabled", "off", "false" or "0" skip every GL backend


def _import_without_gl():
    """(mujoco, whether this import turned its OpenGL off)."""
    if "mujoco" in sys.modules:
        return sys.modules["mujoco"], False
    saved = os.environ.get("MUJOCO_GL")
    os.environ["MUJOCO_GL"] = OFF
    try:
        import mujoco
    finally:
        if saved is None:
            del os.environ["MUJOCO_GL"]
        else:
            os.environ["MUJOCO_GL"] = saved
    return mujoco, True


mujoco, gl_off = _import_without_gl()

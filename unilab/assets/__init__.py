"""Robot descriptions built as ``mujoco.MjSpec`` from tables of published figures."""

from unilab.assets.g1 import build_g1_model, build_g1_spec, default_qpos

__all__ = ["build_g1_model", "build_g1_spec", "default_qpos"]

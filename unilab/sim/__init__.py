"""Batched physics backends. ``MjWarpBackend`` is imported lazily (it pulls warp and torch)."""

from unilab.sim.config import MjWarpSimConfig

__all__ = ["MjWarpSimConfig", "MjWarpBackend"]


def __getattr__(name: str):
    if name == "MjWarpBackend":
        from unilab.sim.mjwarp_backend import MjWarpBackend

        return MjWarpBackend
    raise AttributeError(name)

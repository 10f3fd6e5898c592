"""`g1_motion_tracking`: whole-body tracking of a reference motion clip. The env is imported lazily
(it pulls torch and warp); the config is a plain dataclass."""

from unilab.tasks.g1_motion_tracking.config import G1MotionTrackingConfig

__all__ = ["G1MotionTrackingConfig", "G1MotionTrackingEnv"]


def __getattr__(name: str):
    if name == "G1MotionTrackingEnv":
        from unilab.tasks.g1_motion_tracking.env import G1MotionTrackingEnv

        return G1MotionTrackingEnv
    raise AttributeError(name)

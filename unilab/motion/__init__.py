"""Reference motion clips for tracking tasks: loader, keyframed synthesis, the embedded default clip."""

from unilab.motion.clip import MotionClip, MotionClipError, load_motion_clip, save_motion_clip
from unilab.motion.default_clip import default_clip_path

__all__ = ["MotionClip", "MotionClipError", "default_clip_path", "load_motion_clip", "save_motion_clip"]

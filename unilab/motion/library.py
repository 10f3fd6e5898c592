"""A motion library: one clip file or a directory of them, concatenated frame after frame.

The tracking env indexes its reference tensors with one gather per step, so the library keeps every
clip's frames in one array per field and tells the clips apart by offsets and lengths only. Clips of
one library share the frame rate (one clip frame per `1/fps` s, the env advances them at the same rate).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from unilab.motion.clip import ARRAY_FIELDS, NUM_JOINTS, MotionClip, MotionClipError, PathLike, load_motion_clip


@dataclass(frozen=True)
class MotionLibrary:
    clips: tuple[MotionClip, ...]
    names: tuple[str, ...]  # file stems

    @property
    def num_clips(self) -> int:
        return len(self.clips)

    @property
    def fps(self) -> float:
        return self.clips[0].fps

    @property
    def lengths(self) -> np.ndarray:
        """(C,) frames of each clip."""
        return np.array([c.num_frames for c in self.clips], dtype=np.int64)

    @property
    def offsets(self) -> np.ndarray:
        """(C,) index of each clip's first frame in the concatenated arrays."""
        return np.concatenate(([0], np.cumsum(self.lengths)[:-1])).astype(np.int64)

    @property
    def num_frames(self) -> int:
        return int(self.lengths.sum())

    def shortest(self) -> tuple[str, MotionClip]:
        """The name and clip of the shortest clip (in seconds)."""
        i = int(np.argmin([c.duration for c in self.clips]))
        return self.names[i], self.clips[i]

    def concatenated(self, field: str) -> np.ndarray:
        """One of the clip array fields (clip.ARRAY_FIELDS) of all clips, frames concatenated in clip order."""
        if field not in ARRAY_FIELDS:
            raise KeyError(f"{field!r} is not a clip array field; fields: {', '.join(ARRAY_FIELDS)}")
        return np.concatenate([getattr(c, field) for c in self.clips], axis=0)


def motion_files(path: PathLike) -> list[Path]:
    """The clip files `path` names: itself, or the directory's *.npz files sorted by name."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix == ".npz" and f.is_file())
        if not files:
            raise MotionClipError(f"{p}: directory has no .npz motion clip")
        return files
    return [p]


def load_motion_library(
    path: PathLike,
    *,
    body_names: Optional[Sequence[str]] = None,
    num_joints: int = NUM_JOINTS,
    joint_names: Optional[Sequence[str]] = None,
) -> MotionLibrary:
    """Load one clip file or every clip of a directory; a bad clip fails with its file named (MotionClipError)."""
    files = motion_files(path)
    clips = tuple(load_motion_clip(f, body_names=body_names, num_joints=num_joints, joint_names=joint_names)
                  for f in files)
    first = clips[0]
    for f, clip in zip(files, clips):
        if clip.fps != first.fps:
            raise MotionClipError(f"{f}: field 'fps': {clip.fps} differs from {first.fps} of {files[0].name} "
                                  "(the clips of a directory share one frame rate)")
        if clip.body_names != first.body_names:
            raise MotionClipError(f"{f}: field 'body_names': differs from {files[0].name}")
    return MotionLibrary(clips=clips, names=tuple(f.stem for f in files))

"""Reference motion clips: the npz layout, a validated loader and the `MotionClip` dataclass.

Layout of a clip file (one frame every 1/fps seconds, quaternions wxyz, everything in world frame):

    fps             scalar
    joint_pos       (T, J)      actuated joint angles, actuator order
    joint_vel       (T, J)
    body_names      (B,)        str
    body_pos_w      (T, B, 3)
    body_quat_w     (T, B, 4)
    body_lin_vel_w  (T, B, 3)   velocity of the body frame origin
    body_ang_vel_w  (T, B, 3)
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

import numpy as np

PathLike = Union[str, "os.PathLike[str]"]

NUM_JOINTS = 29
ARRAY_FIELDS = ("joint_pos", "joint_vel", "body_pos_w", "body_quat_w", "body_lin_vel_w", "body_ang_vel_w")
REQUIRED_FIELDS = ("fps", "body_names") + ARRAY_FIELDS


class MotionClipError(ValueError):
    """A motion clip file is missing, unreadable or inconsistent. The message names the file and the field."""


@dataclass(frozen=True)
class MotionClip:
    fps: float
    joint_pos: np.ndarray  # (T, J) float32
    joint_vel: np.ndarray  # (T, J)
    body_names: tuple[str, ...]
    body_pos_w: np.ndarray  # (T, B, 3)
    body_quat_w: np.ndarray  # (T, B, 4) wxyz, unit norm
    body_lin_vel_w: np.ndarray  # (T, B, 3)
    body_ang_vel_w: np.ndarray  # (T, B, 3)
    source: str = "<memory>"

    @property
    def num_frames(self) -> int:
        return self.joint_pos.shape[0]

    @property
    def num_joints(self) -> int:
        return self.joint_pos.shape[1]

    @property
    def dt(self) -> float:
        return 1.0 / self.fps

    @property
    def duration(self) -> float:
        """Seconds from the first to the last frame."""
        return (self.num_frames - 1) / self.fps

    def body_index(self, name: str) -> int:
        try:
            return self.body_names.index(name)
        except ValueError:
            raise MotionClipError(f"{self.source}: field 'body_names' has no body {name!r}") from None

    def select_bodies(self, names: Sequence[str]) -> "MotionClip":
        """The same clip restricted to `names`, in that order."""
        idx = [self.body_index(n) for n in names]
        return replace(
            self,
            body_names=tuple(names),
            body_pos_w=self.body_pos_w[:, idx],
            body_quat_w=self.body_quat_w[:, idx],
            body_lin_vel_w=self.body_lin_vel_w[:, idx],
            body_ang_vel_w=self.body_ang_vel_w[:, idx],
        )

    def to_npz_dict(self) -> dict[str, np.ndarray]:
        return {
            "fps": np.asarray(self.fps, dtype=np.float64),
            "body_names": np.asarray(self.body_names, dtype=str),
            **{f: getattr(self, f) for f in ARRAY_FIELDS},
        }


def save_motion_clip(clip: MotionClip, path: PathLike) -> Path:
    """Write `clip` as npz; written to a temporary name and renamed so readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **clip.to_npz_dict())
        os.replace(tmp, path)
    except BaseException:  # e.g. `path` is a directory: no temporary file is left behind
        tmp.unlink(missing_ok=True)
        raise
    return path


def load_motion_clip(
    path: PathLike,
    *,
    body_names: Optional[Sequence[str]] = None,
    num_joints: int = NUM_JOINTS,
) -> MotionClip:
    """Read and validate a clip. With `body_names`, the clip keeps only those bodies, in that order."""
    src = str(path)
    data: dict[str, np.ndarray] = {}
    key = None
    try:
        loaded = np.load(src, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise ValueError("not an .npz archive")
        with loaded as npz:
            for key in npz.files:
                data[key] = npz[key]
    except FileNotFoundError:
        raise MotionClipError(f"{src}: file not found") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        where = f"field '{key}': " if key is not None else ""
        raise MotionClipError(f"{src}: {where}unreadable motion clip ({type(e).__name__}: {e})") from None

    return clip_from_arrays(data, src, body_names=body_names, num_joints=num_joints)


def clip_from_arrays(
    data: Mapping[str, np.ndarray],
    src: str = "<memory>",
    *,
    body_names: Optional[Sequence[str]] = None,
    num_joints: int = NUM_JOINTS,
) -> MotionClip:
    """Validate the fields of a clip (as read from its npz) and build it; errors name `src` and the field."""

    def fail(field: str, what: str) -> MotionClipError:
        return MotionClipError(f"{src}: field '{field}': {what}")

    for key in REQUIRED_FIELDS:
        if key not in data:
            raise fail(key, f"missing (file has {sorted(data)})")

    fps_arr = np.asarray(data["fps"])
    if fps_arr.size != 1 or not np.issubdtype(fps_arr.dtype, np.number):
        raise fail("fps", f"expected a scalar number, got shape {fps_arr.shape} dtype {fps_arr.dtype}")
    fps = float(fps_arr.reshape(()))
    if not np.isfinite(fps) or fps <= 0:
        raise fail("fps", f"must be positive and finite, got {fps}")

    names_arr = np.asarray(data["body_names"])
    if names_arr.ndim != 1 or names_arr.dtype.kind not in "US":
        raise fail("body_names", f"expected a 1-D array of str, got shape {names_arr.shape} dtype {names_arr.dtype}")
    names = tuple(str(n) for n in names_arr)
    num_bodies = len(names)
    if num_bodies == 0:
        raise fail("body_names", "is empty: a clip needs at least one body")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise fail("body_names", f"names must be unique, repeated: {duplicates}")

    expected = {
        "joint_pos": (num_joints,),
        "joint_vel": (num_joints,),
        "body_pos_w": (num_bodies, 3),
        "body_quat_w": (num_bodies, 4),
        "body_lin_vel_w": (num_bodies, 3),
        "body_ang_vel_w": (num_bodies, 3),
    }
    arrays: dict[str, np.ndarray] = {}
    num_frames = None
    for field, tail in expected.items():
        a = np.asarray(data[field])
        if not np.issubdtype(a.dtype, np.number):
            raise fail(field, f"expected numbers, got dtype {a.dtype}")
        if a.ndim != 1 + len(tail) or a.shape[1:] != tail:
            raise fail(field, f"expected shape (T, {', '.join(map(str, tail))}), got {a.shape}")
        if num_frames is None:
            num_frames = a.shape[0]
        elif a.shape[0] != num_frames:
            raise fail(field, f"has {a.shape[0]} frames but joint_pos has {num_frames} (inconsistent T)")
        if not np.all(np.isfinite(a)):
            bad = np.argwhere(~np.isfinite(a))[0]
            raise fail(field, f"contains NaN or inf (first at index {tuple(int(i) for i in bad)})")
        arrays[field] = a.astype(np.float32)
    if num_frames < 2:
        raise fail("joint_pos", f"needs at least 2 frames, got {num_frames}")

    norms = np.linalg.norm(arrays["body_quat_w"], axis=-1)
    off = np.abs(norms - 1.0) > 1e-3
    if np.any(off):
        t, b = (int(i) for i in np.argwhere(off)[0])
        raise fail("body_quat_w", f"quaternions must have unit norm (found norms in [{norms.min():.4f}, "
                   f"{norms.max():.4f}]; first off at frame {t}, body {names[b]!r})")
    arrays["body_quat_w"] /= norms[..., None]

    clip = MotionClip(fps=fps, body_names=names, source=src, **arrays)
    if body_names is not None:
        missing = [n for n in body_names if n not in names]
        if missing:
            raise fail("body_names", f"missing required bodies {missing}")
        clip = clip.select_bodies(body_names)
    return clip

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
    joint_names     (J,)        str, optional: where present it must name the G1's joints in actuator order

Every field is checked on load (`clip_from_arrays`): a clip that passes can be tracked as it is. The control
step is the task's, so how many steps a clip lasts is checked where the task and the simulator are known
(`unilab.tasks.g1_motion_tracking.config`, at compose).
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
JOINT_NAMES_FIELD = "joint_names"  # optional

# Frame rates a clip may have. Below 1 fps, frames lie a second or more apart: the env reads the nearest
# frame (no interpolation), so the reference would stand still for 50 control steps and then jump, and a
# rate that low is more likely a frame period (0.02) written where the rate belongs. Above 1000 fps is past
# what motion capture records a whole body at (a few hundred Hz) and what `unilab motion synth` writes; such
# a number is most likely a time stamp unit (ms, us) taken for a rate, and the env would skip more than
# 20 frames per 50 Hz control step.
MIN_FPS, MAX_FPS = 1.0, 1000.0
MIN_FRAMES = 2  # a clip is a motion between frames: one frame has none
QUAT_NORM_TOLERANCE = 1e-3  # |norm - 1| a stored quaternion may have (float32 round-off); it is renormalised
# Largest magnitude of each field: far past any real motion, below what a unit mistake gives (degrees for
# radians: up to 180; millimetres for metres: a standing pelvis at ~790), and far from float32's range, whose
# squares the rewards and the networks' inputs would turn into inf.
MAX_ABS = {
    "joint_pos": (2 * np.pi, "rad (one turn)"),
    "joint_vel": (100.0, "rad/s"),
    "body_pos_w": (1000.0, "m"),
    "body_lin_vel_w": (100.0, "m/s"),
    "body_ang_vel_w": (100.0, "rad/s"),
}
# The first bytes of a zip archive (numpy.savez writes one): a local file header, or an empty archive's end.
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")


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
    joint_names: Optional[Sequence[str]] = None,
) -> MotionClip:
    """Read and validate a clip. With `body_names`, the clip keeps only those bodies, in that order; with
    `joint_names`, a clip that names its joints must name these."""
    src = str(path)
    return clip_from_arrays(_read_npz(src), src, body_names=body_names, num_joints=num_joints,
                            joint_names=joint_names)


def _read_npz(src: str) -> dict[str, np.ndarray]:
    """Every array of the npz archive `src`, read without unpickling anything (allow_pickle=False)."""
    try:
        with open(src, "rb") as f:
            magic = f.read(4)
    except FileNotFoundError:
        raise MotionClipError(f"{src}: file not found") from None
    except OSError as e:
        raise MotionClipError(f"{src}: unreadable motion clip ({e.strerror or e})") from None
    if magic not in ZIP_MAGIC:
        # np.load would try it as .npy or pickle and, for a pickle, suggest allow_pickle: never for a clip.
        raise MotionClipError(f"{src}: not an npz archive (a motion clip is the zip of arrays numpy.savez "
                              "writes; see unilab/motion/clip.py)")
    data: dict[str, np.ndarray] = {}
    key = None
    try:
        with np.load(src, allow_pickle=False) as npz:
            for key in npz.files:
                data[key] = npz[key]
    except ValueError as e:
        if "allow_pickle" in str(e):  # an object array: Python objects, which a clip never holds
            raise MotionClipError(f"{src}: field '{key}': holds Python objects (pickled data), which no clip "
                                  "field has; it is not loaded") from None
        raise MotionClipError(f"{src}: {_where(key)}unreadable motion clip ({type(e).__name__}: {e})") from None
    except (OSError, EOFError, zipfile.BadZipFile) as e:
        raise MotionClipError(f"{src}: {_where(key)}unreadable motion clip ({type(e).__name__}: {e})") from None
    return data


def _where(key: Optional[str]) -> str:
    return f"field '{key}': " if key is not None else ""


def _real(a: np.ndarray) -> bool:
    """Integers or floats: no bool, complex, str or object."""
    return a.dtype.kind in "iuf"


def clip_from_arrays(
    data: Mapping[str, np.ndarray],
    src: str = "<memory>",
    *,
    body_names: Optional[Sequence[str]] = None,
    num_joints: int = NUM_JOINTS,
    joint_names: Optional[Sequence[str]] = None,
) -> MotionClip:
    """Validate the fields of a clip (as read from its npz) and build it; errors name `src`, the field and
    what it may hold."""

    def fail(field: str, what: str) -> MotionClipError:
        return MotionClipError(f"{src}: field '{field}': {what}")

    for key in REQUIRED_FIELDS:
        if key not in data:
            raise fail(key, f"missing (file has {sorted(data)})")

    fps_arr = np.asarray(data["fps"])
    if fps_arr.size != 1 or not _real(fps_arr):
        raise fail("fps", f"expected one number, got shape {fps_arr.shape} dtype {fps_arr.dtype}")
    fps = float(fps_arr.reshape(()))
    if not MIN_FPS <= fps <= MAX_FPS:  # NaN fails too
        raise fail("fps", f"{fps:g}: expected frames per second in [{MIN_FPS:g}, {MAX_FPS:g}] (a lower or higher "
                   "rate is most likely a frame period or a time stamp unit taken for the rate)")
    _check_joint_names(data, num_joints, joint_names, fail)

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
        if not _real(a):
            raise fail(field, f"expected numbers, got dtype {a.dtype}")
        if a.ndim != 1 + len(tail) or a.shape[1:] != tail:
            what = f" ({num_joints} joints, the G1's in actuator order)" if field.startswith("joint_") else ""
            raise fail(field, f"expected shape (T, {', '.join(map(str, tail))}){what}, got {a.shape}")
        if num_frames is None:
            num_frames = a.shape[0]
        elif a.shape[0] != num_frames:
            raise fail(field, f"has {a.shape[0]} frames but joint_pos has {num_frames} (inconsistent T)")
        with np.errstate(over="ignore"):  # a float64 past float32's range becomes inf, and is refused
            a = a.astype(np.float32)
        if not np.all(np.isfinite(a)):
            bad = np.argwhere(~np.isfinite(a))[0]
            raise fail(field, f"contains NaN or inf (first at index {tuple(int(i) for i in bad)})")
        if field in MAX_ABS:
            limit, unit = MAX_ABS[field]
            big = np.abs(a) > limit
            if np.any(big):
                at = tuple(int(i) for i in np.argwhere(big)[0])
                raise fail(field, f"{float(a[at]):g} at index {at}: expected values within +-{limit:g} {unit}")
        arrays[field] = a
    if num_frames < MIN_FRAMES:
        raise fail("joint_pos", f"has {num_frames} frame(s): expected at least {MIN_FRAMES}")

    norms = np.linalg.norm(arrays["body_quat_w"].astype(np.float64), axis=-1)
    off = ~(np.abs(norms - 1.0) <= QUAT_NORM_TOLERANCE)
    if np.any(off):
        t, b = (int(i) for i in np.argwhere(off)[0])
        raise fail("body_quat_w", f"quaternions must have unit norm, within {QUAT_NORM_TOLERANCE:g} (found norms "
                   f"in [{norms.min():.4f}, {norms.max():.4f}]; first off at frame {t}, body {names[b]!r})")
    arrays["body_quat_w"] /= norms[..., None].astype(np.float32)

    clip = MotionClip(fps=fps, body_names=names, source=src, **arrays)
    if body_names is not None:
        missing = [n for n in body_names if n not in names]
        if missing:
            raise fail("body_names", f"missing required bodies {missing}")
        clip = clip.select_bodies(body_names)
    return clip


def _check_joint_names(data: Mapping[str, np.ndarray], num_joints: int, expected: Optional[Sequence[str]],
                       fail) -> None:
    """The optional `joint_names` field: `num_joints` names, and where `expected` is given, those in order (the
    columns of joint_pos are the actuators', in the robot's order)."""
    if JOINT_NAMES_FIELD not in data:
        return
    names_arr = np.asarray(data[JOINT_NAMES_FIELD])
    if names_arr.ndim != 1 or names_arr.dtype.kind not in "US":
        raise fail(JOINT_NAMES_FIELD, f"expected a 1-D array of str, got shape {names_arr.shape} dtype "
                   f"{names_arr.dtype}")
    names = tuple(str(n) for n in names_arr)
    if len(names) != num_joints:
        raise fail(JOINT_NAMES_FIELD, f"names {len(names)} joints, expected {num_joints}")
    if expected is not None and names != tuple(expected):
        j = next((i for i, (a, b) in enumerate(zip(names, expected)) if a != b), 0)
        raise fail(JOINT_NAMES_FIELD, f"joint {j} is {names[j]!r}, expected {expected[j]!r}: the columns of "
                   "joint_pos must be the G1's joints in actuator order (unilab.assets.g1.G1_JOINT_NAMES)")

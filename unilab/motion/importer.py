"""`unilab motion import`: G1 motions from other pipelines as clips in our layout (unilab.motion.clip).

Sources:

* npz in the mjlab / BeyondMimic layout (fps, joint_pos (T, 29), body_pos_w (T, B, 3), body_quat_w
  (T, B, 4) wxyz, ..., usually without body_names, bodies in the G1 model order) and the holosoma
  layout (joint_pos (T, 36) = the free joint's qpos then the joints, with joint_names and body_names);
* CSV from LAFAN1 -> G1 retargeting: one row per frame, root x y z, root quaternion (4, --quat-order),
  29 joint angles in G1_JOINT_NAMES order.

Only the root pose (the pelvis) and the joint angles are taken from the source. They are resampled
to the control rate (linear for positions, slerp for the root orientation), every body state is the
forward kinematics of OUR G1 model, and velocities are central differences of the resampled qpos,
measured like the tracking env measures the robot (linear: the body frame origin; angular: world).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from unilab.exit_codes import EXIT_USAGE
from unilab.motion.clip import MAX_FPS, MIN_FPS, MotionClip, save_motion_clip

CSV_ROOT_COLUMNS = 3 + 4
CSV_COLUMNS = CSV_ROOT_COLUMNS + 29
MIN_FRAMES = 10
MIN_DURATION_S = 1.0  # shorter clips leave the tracker too few reset points to learn from
JOINT_LIMIT_TOL = 0.05  # rad: retargeting solvers overshoot the limits a little; more means another model
ROOT_Z_RANGE = (0.2, 1.5)  # m: a pelvis outside this for most frames is a unit or up-axis mistake
ROOT_Z_MAX_OUTSIDE = 0.5  # share of frames; a fall or a crawl dips below for a part of the clip
FK_WARN_M = 0.01  # source body positions further than this from our FK: another model or body order
FK_COMPARE_FRAMES = 200  # enough frames to see a model mismatch, few enough to stay quick


class MotionImportError(ValueError):
    """Bad input: the message starts with the name of the check that failed."""

    def __init__(self, check: str, what: str):
        super().__init__(f"check '{check}': {what}")
        self.check = check


@dataclass
class SourceMotion:
    """What is taken from a source file: root pose, joints, and the source's own body positions."""

    fps: Optional[float]  # None: the file does not say (CSV)
    root_pos: np.ndarray  # (T, 3)
    root_quat: np.ndarray  # (T, 4) wxyz, not yet normalised
    joint_pos: np.ndarray  # (T, 29) G1_JOINT_NAMES order
    body_pos: Optional[np.ndarray] = None  # (T, B, 3) as the source computed them
    body_names: Optional[tuple[str, ...]] = None  # None: the G1 model order is assumed


def _check_finite(name: str, a: np.ndarray, columns: Optional[Sequence[str]] = None) -> None:
    bad = ~np.isfinite(a)
    if bad.any():
        idx = np.argwhere(bad)[0]
        where = f"column {idx[1]} ({columns[idx[1]]})" if columns is not None else f"index {tuple(int(i) for i in idx[1:])}"
        raise MotionImportError("finite values", f"{name}: NaN or inf at frame {idx[0]}, {where} "
                                f"({int(bad.any(axis=tuple(range(1, a.ndim))).sum())} frames affected)")


def csv_column_names(quat_order: str) -> list[str]:
    from unilab.assets.g1 import G1_JOINT_NAMES

    return ["root_x", "root_y", "root_z", *(f"root_q{c}" for c in quat_order), *G1_JOINT_NAMES]


def read_csv(path: Path, quat_order: str) -> SourceMotion:
    rows = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        cells = [c.strip() for c in line.replace(";", ",").split(",")]
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            row = [float(c) for c in cells]
        except ValueError:
            if not rows:  # a header line
                continue
            raise MotionImportError("csv parse", f"{path} line {lineno}: not a number in {line[:80]!r}") from None
        if len(row) != CSV_COLUMNS:
            raise MotionImportError("column count", f"{path} line {lineno}: {len(row)} columns, expected "
                                    f"{CSV_COLUMNS} = 3 root position + 4 root quaternion + 29 joint angles")
        rows.append(row)
    if not rows:
        raise MotionImportError("too short", f"{path}: no data rows")
    table = np.asarray(rows, dtype=np.float64)
    _check_finite(str(path), table, csv_column_names(quat_order))
    q = table[:, 3:7]
    return SourceMotion(
        fps=None,
        root_pos=table[:, :3],
        root_quat=q if quat_order == "wxyz" else q[:, [3, 0, 1, 2]],
        joint_pos=table[:, CSV_ROOT_COLUMNS:],
    )


def read_npz(path: Path) -> SourceMotion:
    from unilab.assets.g1 import G1_JOINT_NAMES

    try:
        with np.load(path, allow_pickle=False) as npz:
            data = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, EOFError) as e:
        raise MotionImportError("npz layout", f"{path}: unreadable ({type(e).__name__}: {e})") from None
    missing = [k for k in ("fps", "joint_pos") if k not in data]
    if missing:
        raise MotionImportError("npz layout", f"{path}: missing {missing} (file has {sorted(data)})")
    fps_arr = np.asarray(data["fps"])
    if fps_arr.size != 1 or not np.issubdtype(fps_arr.dtype, np.number):
        raise MotionImportError("npz layout", f"{path}: fps must be one number, got shape {fps_arr.shape}")
    names = tuple(str(n) for n in data["body_names"]) if "body_names" in data else None
    joints = np.asarray(data["joint_pos"], dtype=np.float64)
    if joints.ndim != 2 or joints.shape[1] not in (29, 36):
        raise MotionImportError("npz layout", f"{path}: joint_pos must be (T, 29) joint angles or (T, 36) "
                                f"free-joint qpos + joint angles, got {joints.shape}")
    _check_finite(f"{path} joint_pos", joints)
    root_qpos, joints = (joints[:, :7], joints[:, 7:]) if joints.shape[1] == 36 else (None, joints)
    if "joint_names" in data:
        src_joints = [str(n) for n in data["joint_names"]]
        absent = [j for j in G1_JOINT_NAMES if j not in src_joints]
        if absent or len(src_joints) != joints.shape[1]:
            raise MotionImportError("npz layout", f"{path}: joint_names must name the 29 G1 joints once each "
                                    f"(missing {absent}, {len(src_joints)} names for {joints.shape[1]} columns)")
        joints = joints[:, [src_joints.index(j) for j in G1_JOINT_NAMES]]

    body_pos = body_quat = None
    if "body_pos_w" in data and "body_quat_w" in data:
        body_pos = np.asarray(data["body_pos_w"], dtype=np.float64)
        body_quat = np.asarray(data["body_quat_w"], dtype=np.float64)
        if body_pos.ndim != 3 or body_pos.shape[2] != 3 or body_quat.shape != body_pos.shape[:2] + (4,) \
                or body_pos.shape[0] != joints.shape[0]:
            raise MotionImportError("npz layout", f"{path}: body_pos_w {body_pos.shape} / body_quat_w "
                                    f"{body_quat.shape} must be (T, B, 3) / (T, B, 4) with T = {joints.shape[0]}")
        if names is not None and len(names) != body_pos.shape[1]:
            raise MotionImportError("npz layout", f"{path}: {len(names)} body_names for {body_pos.shape[1]} bodies")
        _check_finite(f"{path} body_pos_w", body_pos)
        _check_finite(f"{path} body_quat_w", body_quat)
    if body_pos is not None and (names is None or "pelvis" in names):
        root = names.index("pelvis") if names is not None else 0  # the G1 model order starts at the pelvis
        root_pos, root_quat = body_pos[:, root], body_quat[:, root]
    elif root_qpos is not None:
        root_pos, root_quat = root_qpos[:, :3], root_qpos[:, 3:7]
    else:
        raise MotionImportError("npz layout", f"{path}: no root pose (needs body_pos_w/body_quat_w with the "
                                "pelvis first or named, or a (T, 36) joint_pos)")
    return SourceMotion(fps=float(fps_arr.reshape(())), root_pos=root_pos, root_quat=root_quat,
                        joint_pos=joints, body_pos=body_pos, body_names=names)


def _upright_share(quat_wxyz: np.ndarray) -> float:
    """Share of frames whose body z axis points up (world z component of R e_z > 0.5)."""
    w, x, y, _ = quat_wxyz.T
    return float(np.mean(1.0 - 2.0 * (x * x + y * y) > 0.5))


def check_source(src: SourceMotion, fps: float, *, quat_order: Optional[str], clip_to_limits: bool,
                 joint_range: np.ndarray, warn) -> SourceMotion:
    """All input checks, in the order a user would fix them; returns the motion with unit quaternions
    (and clamped joints with `clip_to_limits`)."""
    from unilab.assets.g1 import G1_JOINT_NAMES

    n = len(src.joint_pos)
    duration = (n - 1) / fps
    if n < MIN_FRAMES or duration < MIN_DURATION_S:
        raise MotionImportError("too short", f"{n} frames at {fps:g} fps = {duration:.2f} s; a clip to track "
                                f"needs at least {MIN_FRAMES} frames and {MIN_DURATION_S:g} s")

    norms = np.linalg.norm(src.root_quat, axis=1)
    if np.any(norms < 1e-6):
        raise MotionImportError("quaternion", f"root quaternion at frame {int(np.argmax(norms < 1e-6))} has zero "
                                "norm and cannot be normalised")
    if np.any(np.abs(norms - 1.0) > 1e-2):
        warn(f"root quaternion norms span [{norms.min():.3f}, {norms.max():.3f}]: normalised")
    quat = src.root_quat / norms[:, None]
    # A wrong --quat-order still gives unit quaternions; it shows as a pelvis that is upside down or on
    # its side for most of the clip while the other order stands it up.
    if quat_order is not None:
        other = "xyzw" if quat_order == "wxyz" else "wxyz"
        swapped = quat[:, [3, 0, 1, 2]] if quat_order == "wxyz" else quat[:, [1, 2, 3, 0]]
        # `swapped` is what the file's four numbers mean under the other order (wxyz either way).
        if _upright_share(quat) < 0.5 <= _upright_share(swapped):
            raise MotionImportError("quaternion order", f"with --quat-order {quat_order} the pelvis is upright in "
                                    f"{_upright_share(quat):.0%} of frames, with {other} in "
                                    f"{_upright_share(swapped):.0%}: the file is probably {other}")

    z = src.root_pos[:, 2]
    lo, hi = ROOT_Z_RANGE
    outside = (z < lo) | (z > hi)
    if outside.mean() > ROOT_Z_MAX_OUTSIDE:
        raise MotionImportError("root height", f"pelvis z is outside [{lo:g}, {hi:g}] m in {outside.mean():.0%} "
                                f"of frames (median {np.median(z):.3f} m, first at frame {int(np.argmax(outside))}): "
                                "not metres with z up, or not a standing G1")

    joints = src.joint_pos
    below, above = joint_range[:, 0] - joints, joints - joint_range[:, 1]
    excess = np.maximum(below, above)  # (T, 29): > 0 outside the range
    if np.any(excess > JOINT_LIMIT_TOL):
        t, j = (int(i) for i in np.unravel_index(np.argmax(excess), excess.shape))
        what = (f"{G1_JOINT_NAMES[j]} = {joints[t, j]:.3f} rad at frame {t} is {excess[t, j]:.3f} rad outside "
                f"its range [{joint_range[j, 0]:.3f}, {joint_range[j, 1]:.3f}] (tolerance {JOINT_LIMIT_TOL:g} rad; "
                f"{int((excess > JOINT_LIMIT_TOL).any(axis=1).sum())} frames affected)")
        if not clip_to_limits:
            raise MotionImportError("joint limits", what + "; --clip-to-limits clamps them")
        warn(f"joint limits: {what}; clamped")
    if clip_to_limits:
        joints = np.clip(joints, joint_range[:, 0], joint_range[:, 1])
    return SourceMotion(fps=fps, root_pos=src.root_pos, root_quat=quat, joint_pos=joints,
                        body_pos=src.body_pos, body_names=src.body_names)


def slerp(q0: np.ndarray, q1: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Row-wise spherical interpolation of unit quaternions, the short way round."""
    dot = np.sum(q0 * q1, axis=1)
    q1 = np.where(dot[:, None] < 0, -q1, q1)
    dot = np.abs(dot)
    theta = np.arccos(np.clip(dot, -1.0, 1.0))
    sin = np.sin(theta)
    near = sin < 1e-8  # (almost) the same rotation: linear is exact enough and avoids 0/0
    safe = np.where(near, 1.0, sin)
    w0 = np.where(near, 1.0 - s, np.sin((1.0 - s) * theta) / safe)
    w1 = np.where(near, s, np.sin(s * theta) / safe)
    q = w0[:, None] * q0 + w1[:, None] * q1
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def resample_qpos(src: SourceMotion, fps_in: float, fps_out: float) -> np.ndarray:
    """(N, 7 + 29) free-joint qpos + joints at `fps_out` over the source's duration."""
    n_in = len(src.joint_pos)
    duration = (n_in - 1) / fps_in
    n_out = int(math.floor(duration * fps_out + 1e-9)) + 1
    x = np.arange(n_out) * fps_in / fps_out  # fractional source frame of each output frame
    i0 = np.minimum(np.floor(x + 1e-9).astype(int), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    s = np.clip(x - i0, 0.0, 1.0)

    def lerp(a):
        return (1.0 - s)[:, None] * a[i0] + s[:, None] * a[i1]

    return np.concatenate([lerp(src.root_pos), slerp(src.root_quat[i0], src.root_quat[i1], s),
                           lerp(src.joint_pos)], axis=1)


def fk_deviation(model, src: SourceMotion) -> Optional[tuple[float, str, int]]:
    """(max distance in m, body, bodies compared) between the source's body positions and our FK of the
    source's own root + joints, on up to FK_COMPARE_FRAMES frames; None when the bodies cannot be matched."""
    from unilab.sim.headless import mujoco

    if src.body_pos is None:
        return None
    ours = [model.body(b).name for b in range(1, model.nbody)]
    if src.body_names is not None:
        pairs = [(i, ours.index(n) + 1) for i, n in enumerate(src.body_names) if n in ours]
    elif src.body_pos.shape[1] == len(ours):
        pairs = [(i, i + 1) for i in range(len(ours))]
    else:
        return None
    if not pairs:
        return None
    d = mujoco.MjData(model)
    src_idx, our_idx = (np.array(p) for p in zip(*pairs))
    worst, worst_body = 0.0, ""
    for t in np.unique(np.linspace(0, len(src.joint_pos) - 1, FK_COMPARE_FRAMES).astype(int)):
        d.qpos[:3], d.qpos[3:7], d.qpos[7:] = src.root_pos[t], src.root_quat[t], src.joint_pos[t]
        mujoco.mj_kinematics(model, d)
        err = np.linalg.norm(d.xpos[our_idx] - src.body_pos[t, src_idx], axis=1)
        if err.max() > worst:
            worst, worst_body = float(err.max()), ours[our_idx[int(err.argmax())] - 1]
    return worst, worst_body, len(pairs)


def control_fps() -> float:
    """The tracking task's control rate: one policy step every sim timestep x decimation."""
    from unilab.sim.config import MjWarpSimConfig

    cfg = MjWarpSimConfig()
    return 1.0 / (cfg.timestep * cfg.decimation)


def import_motion(path: Path, *, fmt: str = "auto", fps: Optional[float] = None, quat_order: str = "xyzw",
                  clip_to_limits: bool = False, out_fps: Optional[float] = None, lift_feet: bool = False,
                  warn=None, info=None) -> MotionClip:
    """Read, check and convert `path`; raises MotionImportError on bad input (nothing is written here)."""
    from unilab.assets import g1
    from unilab.motion.synth import G1Kinematics, clip_from_qpos

    warn = warn or (lambda msg: None)
    info = info or (lambda msg: None)
    if fmt == "auto":
        fmt = path.suffix.lower().lstrip(".")
        if fmt not in ("csv", "npz"):
            raise MotionImportError("format", f"{path}: cannot tell the format from {path.suffix!r}; "
                                    "give --format csv or --format npz")
    if not path.is_file():
        raise MotionImportError("source file", f"{path}: not a file")
    if fps is not None and not (math.isfinite(fps) and fps > 0):
        raise MotionImportError("fps", f"--fps {fps}: expected a positive number")
    if fmt == "csv":
        src = read_csv(path, quat_order)
        if fps is None:
            raise MotionImportError("fps", f"{path}: a CSV does not store its frame rate: give --fps "
                                    "(the LAFAN1 -> G1 retargeting CSVs are 30 fps)")
    else:
        src = read_npz(path)
        if not (math.isfinite(src.fps) and src.fps > 0):
            raise MotionImportError("fps", f"{path}: fps {src.fps} is not a positive number")
        if fps is not None and abs(fps - src.fps) > 1e-6 * src.fps:
            raise MotionImportError("fps mismatch", f"{path} says {src.fps:g} fps but --fps {fps:g} was given; "
                                    "drop --fps to use the file's rate")
        fps = src.fps

    model = g1.build_g1_model(with_floor=False)
    kin = G1Kinematics(model, g1.G1_JOINT_NAMES, g1.G1_FOOT_BODIES)
    src = check_source(src, fps, quat_order=quat_order if fmt == "csv" else None,
                       clip_to_limits=clip_to_limits, joint_range=kin.joint_range, warn=warn)
    dev = fk_deviation(model, src)
    if dev is not None:
        worst, body, count = dev
        line = f"source body positions vs our G1 forward kinematics ({count} bodies): max {worst * 1000:.1f} mm at {body}"
        if worst > FK_WARN_M:
            warn(line + ": another robot model or body order; the clip keeps our model's kinematics")
        else:
            info(line)
    out_fps = out_fps or control_fps()
    qpos = resample_qpos(src, fps, out_fps)
    qpos = check_feet(kin, qpos, out_fps, lift_feet, warn, info)
    clip = clip_from_qpos(model, qpos, out_fps, kin, source=str(path))
    info(f"resampled {len(src.joint_pos)} frames at {fps:g} fps to {clip.num_frames} frames at {out_fps:g} fps")
    return clip


def check_feet(kin, qpos: np.ndarray, fps: float, lift: bool, warn, info) -> np.ndarray:
    """qpos lifted out of the floor (`lift`), or as it is with a warning when a sole stays more than
    BELOW_FLOOR_M below it for FLOOR_WARN_S or longer: a robot standing on the floor cannot follow it there.
    Either way, a warning when the whole body stays more than ABOVE_FLOOR_M above the floor that long."""
    from unilab.motion.feet import ABOVE_FLOOR_M, BELOW_FLOOR_M, FLOOR_WARN_S, floor_heights, lift_to_floor, \
        longest_run

    soles, lowest = floor_heights(kin, qpos)
    if lift:
        qpos, amount = lift_to_floor(qpos, soles)
        lowest = lowest + amount  # the whole body rises with the root
        if amount.max() > 0:
            info(f"lifted the root out of the floor in {np.mean(amount > 0):.0%} of frames, by up to "
                 f"{amount.max() * 1000:.1f} mm")
    else:
        below = soles.min(axis=1) < -BELOW_FLOOR_M
        frames, first = longest_run(below)
        if frames / fps >= FLOOR_WARN_S:
            warn(f"a sole is more than {BELOW_FLOOR_M * 1000:.0f} mm below the floor for {frames / fps:.2f} s "
                 f"(from {first / fps:.2f} s; {below.mean():.0%} of all frames): a tracker cannot follow the feet "
                 "there; --lift-to-floor raises the root out of it")
    above = lowest > ABOVE_FLOOR_M
    frames, first = longest_run(above)
    if frames / fps >= FLOOR_WARN_S:
        warn(f"the whole body is more than {ABOVE_FLOOR_M * 1000:.0f} mm above the floor for {frames / fps:.2f} s "
             f"(from {first / fps:.2f} s; {above.mean():.0%} of all frames): the clip stands on something the "
             "world does not have (a slope, a box, a step), and a tracker on flat ground cannot follow it there")
    return qpos


def add_parser(motsub) -> None:
    p = motsub.add_parser("import", help="convert a G1 motion (mjlab/BeyondMimic/holosoma npz, retargeted CSV) "
                          "to a clip: body states from our G1 forward kinematics, at the control rate")
    p.add_argument("src", type=Path, help="source file (.npz or .csv)")
    p.add_argument("--out", required=True, type=Path, help="output clip (.npz)")
    p.add_argument("--format", dest="fmt", choices=("auto", "csv", "npz"), default="auto",
                   help="source format (default: from the file suffix)")
    p.add_argument("--fps", type=float, help="source frame rate: required for CSV; for npz it must match the file's")
    p.add_argument("--quat-order", choices=("xyzw", "wxyz"), default="xyzw",
                   help="root quaternion order of a CSV (default xyzw, as LAFAN1 -> G1 retargeting writes)")
    p.add_argument("--clip-to-limits", action="store_true",
                   help=f"clamp joint angles to the joint ranges instead of refusing those more than "
                   f"{JOINT_LIMIT_TOL:g} rad outside")
    p.add_argument("--out-fps", type=float, help="output frame rate (default: the tracking task's control rate)")
    p.add_argument("--lift-to-floor", action="store_true",
                   help="raise the root, frame by frame, by how far the lower sole is below the floor (frames "
                        "whose feet are on or above it keep their root)")
    p.set_defaults(func=main)


def main(args) -> int:
    def say(prefix):
        return lambda msg: print(f"unilab motion import: {prefix}{msg}", file=sys.stderr)

    if args.out.is_dir():
        print(f"unilab motion import: --out {args.out}: is a directory; give a file name, e.g. "
              f"{args.out / 'clip.npz'}", file=sys.stderr)
        return EXIT_USAGE
    if args.out_fps is not None and not MIN_FPS <= args.out_fps <= MAX_FPS:  # what a clip may have; NaN fails too
        print(f"unilab motion import: --out-fps {args.out_fps}: expected frames per second in [{MIN_FPS:g}, "
              f"{MAX_FPS:g}] (what a motion clip may have)", file=sys.stderr)
        return EXIT_USAGE
    try:
        clip = import_motion(args.src, fmt=args.fmt, fps=args.fps, quat_order=args.quat_order,
                             clip_to_limits=args.clip_to_limits, out_fps=args.out_fps,
                             lift_feet=args.lift_to_floor,
                             warn=say("warning: "), info=lambda msg: print(msg))
    except MotionImportError as exc:
        say("")(str(exc))
        return EXIT_USAGE
    try:
        path = save_motion_clip(clip, args.out)
    except OSError as exc:
        say("")(f"--out {args.out}: {exc.strerror or exc}")
        return EXIT_USAGE
    print(f"wrote {path}: {clip.num_frames} frames at {clip.fps:g} fps ({clip.duration:.2f} s), "
          f"{len(clip.body_names)} bodies")
    return 0

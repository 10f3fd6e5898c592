"""Keyframed kinematic motions of the G1, written as motion clips (``unilab motion synth``).

A preset is a list of segments; each segment is a few keyframes of joint-angle and base
roll/pitch/yaw offsets from the standing pose, starting and ending at the standing pose.
Per channel the keyframes are joined by minimum-jerk curves. Then, frame by frame:

1. the ankles are solved (a few Newton steps) so each sole stays as level as in the standing pose;
2. the base is placed so the lowest foot point touches z = 0 and the feet do not slide: the
   horizontal shift keeps a height-weighted mean of the feet where they stand in the
   standing pose, so a foot on the ground stays put while the other one lifts;
3. velocities come from central differences of qpos, body states from forward kinematics.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from unilab.exit_codes import EXIT_USAGE
from unilab.motion.clip import MAX_FPS, MIN_FPS, MotionClip, save_motion_clip
from unilab.sim.headless import mujoco

BASE_CHANNELS = ("base_roll", "base_pitch", "base_yaw")
FOOT_CONTACT_SCALE = 0.01  # m: feet lower than the other by a few of these carry the anchor weight


@dataclass(frozen=True)
class Keyframe:
    t: float  # seconds from the start of the segment
    pose: dict[str, float]  # channel -> offset from the standing pose (joint names, base_roll/pitch/yaw)


Segment = tuple[str, tuple[Keyframe, ...]]


def _side(side: str, pose: dict[str, float]) -> dict[str, float]:
    return {f"{side}_{k}_joint": v for k, v in pose.items()}


def _sym(pose: dict[str, float]) -> dict[str, float]:
    """`{"hip_pitch": v}` on both sides (for pitch joints, whose axes are not mirrored)."""
    return {**_side("left", pose), **_side("right", pose)}


_SWAY = 0.22  # rad of hip roll: with the torso lean, puts the centre of mass ~1 cm inside the stance foot
_TORSO_PER_SWAY = 0.25 / 0.22


def _shift(lean: float) -> dict[str, float]:
    """Sway the pelvis sideways over one foot (positive: towards the left foot): the same hip roll on
    both legs makes a parallelogram whose soles the ankle solve keeps level; the torso leans the same
    way so the centre of mass ends up over the stance foot (the ankle roll range caps the leg tilt)."""
    return {"left_hip_roll_joint": -lean, "right_hip_roll_joint": -lean, "waist_roll_joint": -_TORSO_PER_SWAY * lean}


def _merge(*poses: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for p in poses:
        out.update(p)
    return out


_KNEE_UP = {"hip_pitch": -0.75, "knee": 1.0}
_SQUAT = _merge(
    {"base_pitch": 0.3},
    _sym({"hip_pitch": -0.75, "knee": 0.75, "shoulder_pitch": -0.7, "elbow": -0.3}),
)

DEFAULT_PRESET: tuple[Segment, ...] = (
    ("weight_shift", (
        Keyframe(0.0, {}),
        Keyframe(0.8, _merge(_shift(+1.0 * _SWAY), _side("right", {"shoulder_roll": -0.3}))),
        Keyframe(1.8, _merge(_shift(-1.0 * _SWAY), _side("left", {"shoulder_roll": 0.3}))),
        Keyframe(2.6, {}),
    )),
    ("squat", (
        Keyframe(0.0, {}),
        Keyframe(1.0, _SQUAT),
        Keyframe(1.4, _SQUAT),
        Keyframe(2.4, {}),
    )),
    ("steps_in_place", (
        Keyframe(0.0, {}),
        Keyframe(0.5, _shift(-_SWAY)),
        Keyframe(0.9, _merge(_shift(-_SWAY), _side("left", _KNEE_UP),
                             _side("left", {"shoulder_pitch": 0.3}), _side("right", {"shoulder_pitch": -0.4}))),
        Keyframe(1.3, _shift(-_SWAY)),
        Keyframe(1.9, _shift(+_SWAY)),
        Keyframe(2.3, _merge(_shift(+_SWAY), _side("right", _KNEE_UP),
                             _side("right", {"shoulder_pitch": 0.3}), _side("left", {"shoulder_pitch": -0.4}))),
        Keyframe(2.7, _shift(+_SWAY)),
        Keyframe(3.2, {}),
    )),
    ("arm_swing", (
        Keyframe(0.0, {}),
        Keyframe(0.6, _merge({"waist_yaw_joint": 0.3}, _side("left", {"shoulder_pitch": -0.8}),
                             _side("right", {"shoulder_pitch": 0.5}))),
        Keyframe(1.2, _merge({"waist_yaw_joint": -0.3}, _side("left", {"shoulder_pitch": 0.5}),
                             _side("right", {"shoulder_pitch": -0.8}))),
        Keyframe(1.8, {}),
    )),
)
PRESETS: dict[str, tuple[Segment, ...]] = {"default": DEFAULT_PRESET}


def min_jerk(s: np.ndarray) -> np.ndarray:
    """0 -> 1 with zero velocity and acceleration at both ends."""
    return s * s * s * (10.0 - 15.0 * s + 6.0 * s * s)


def build_timeline(
    segments: Sequence[Segment], duration: float, rng: Optional[np.random.Generator]
) -> list[tuple[float, dict[str, float]]]:
    """Absolute (time, pose) keyframes covering `duration`: segments in order, repeated as needed.
    With an `rng` each pass shuffles the segments and scales amplitudes and timing a little."""
    timeline: list[tuple[float, dict[str, float]]] = [(0.0, {})]
    t0 = 0.0
    while t0 < duration:
        order = list(range(len(segments))) if rng is None else list(rng.permutation(len(segments)))
        for i in order:
            _, keys = segments[i]
            amp = 1.0 if rng is None else float(rng.uniform(0.7, 1.15))
            speed = 1.0 if rng is None else float(rng.uniform(0.85, 1.2))
            for k in keys[1:]:
                timeline.append((t0 + k.t * speed, {c: amp * v for c, v in k.pose.items()}))
            t0 = timeline[-1][0]
    return timeline


def interpolate(timeline: list[tuple[float, dict[str, float]]], channels: Sequence[str], times: np.ndarray) -> np.ndarray:
    """(len(times), len(channels)) offsets; channels absent from a keyframe are 0 there."""
    key_t = np.array([t for t, _ in timeline])
    key_v = np.array([[pose.get(c, 0.0) for c in channels] for _, pose in timeline])
    seg = np.clip(np.searchsorted(key_t, times, side="right") - 1, 0, len(key_t) - 2)
    s = np.clip((times - key_t[seg]) / (key_t[seg + 1] - key_t[seg]), 0.0, 1.0)
    w = min_jerk(s)[:, None]
    return (1.0 - w) * key_v[seg] + w * key_v[seg + 1]


def quat_from_rpy(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """wxyz of R = Rz(yaw) Ry(pitch) Rx(roll)."""
    cr, sr = math.cos(roll / 2), math.sin(roll / 2)
    cp, sp = math.cos(pitch / 2), math.sin(pitch / 2)
    cy, sy = math.cos(yaw / 2), math.sin(yaw / 2)
    return np.array([
        cr * cp * cy + sr * sp * sy,
        sr * cp * cy - cr * sp * sy,
        cr * sp * cy + sr * cp * sy,
        cr * cp * sy - sr * sp * cy,
    ])


class G1Kinematics:
    """Forward kinematics helpers on one MjData (clip synthesis and import)."""

    def __init__(self, model: mujoco.MjModel, joint_names: Sequence[str], foot_bodies: Sequence[str]):
        self.m = model
        self.d = mujoco.MjData(model)
        free = [j for j in range(model.njnt) if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]
        if len(free) != 1 or model.jnt_qposadr[free[0]] != 0:
            raise ValueError("expected one free joint at qpos[0:7]")
        self.joint_qadr = np.array([model.joint(n).qposadr[0] for n in joint_names])
        self.joint_dadr = np.array([model.joint(n).dofadr[0] for n in joint_names])
        self.joint_range = np.array([model.joint(n).range for n in joint_names])
        self.foot_ids = [model.body(n).id for n in foot_bodies]
        # The robot's collision geoms: those that take part in contacts, on any body but the world.
        self.collision_geoms = [g for g in range(model.ngeom) if model.geom_bodyid[g] != 0
                                and (model.geom_contype[g] or model.geom_conaffinity[g])]
        # Collision geoms of each foot: their lowest point defines the ground contact.
        self.foot_geoms = []
        for b in self.foot_ids:
            geoms = [g for g in self.collision_geoms if model.geom_bodyid[g] == b]
            if not geoms:
                raise ValueError(f"foot body {model.body(b).name!r} has no collision geoms")
            self.foot_geoms.append(geoms)

    def fk(self, qpos: np.ndarray) -> None:
        self.d.qpos[:] = qpos
        mujoco.mj_kinematics(self.m, self.d)

    def foot_lowest_z(self) -> np.ndarray:
        """(num_feet,): per foot the lowest point of its collision geoms' bounding boxes."""
        out = []
        for geoms in self.foot_geoms:
            rot = self.d.geom_xmat[geoms].reshape(-1, 3, 3)
            center_z = self.d.geom_xpos[geoms, 2] + np.einsum("gj,gj->g", rot[:, 2], self.m.geom_aabb[geoms, :3])
            out.append(np.min(center_z - np.einsum("gj,gj->g", np.abs(rot[:, 2]), self.m.geom_aabb[geoms, 3:])))
        return np.array(out)

    def foot_xy(self) -> np.ndarray:
        return np.array([self.d.xpos[b, :2] for b in self.foot_ids])

    def foot_up_axes(self) -> np.ndarray:
        return np.array([self.d.xmat[b].reshape(3, 3)[:, 2] for b in self.foot_ids])


def _solve_ankles(kin: G1Kinematics, qpos: np.ndarray, ankle_qadr: np.ndarray, target_up: np.ndarray,
                  iters: int = 4, eps: float = 1e-5) -> None:
    """Newton on (ankle pitch, ankle roll) per foot so the foot's up axis matches `target_up`, in place."""
    for _ in range(iters):
        kin.fk(qpos)
        err = (kin.foot_up_axes() - target_up)[:, :2]
        if np.abs(err).max() < 1e-9:
            return
        jac = np.zeros((len(ankle_qadr), 2, 2))
        for k in range(2):
            q = qpos.copy()
            q[ankle_qadr[:, k]] += eps
            kin.fk(q)
            jac[:, :, k] = ((kin.foot_up_axes() - target_up)[:, :2] - err) / eps
        for f in range(len(ankle_qadr)):
            qpos[ankle_qadr[f]] -= np.linalg.solve(jac[f], err[f])


def synthesize(
    *,
    duration: float = 10.0,
    fps: float = 50.0,
    seed: Optional[int] = None,
    preset: str = "default",
    model: Optional[mujoco.MjModel] = None,
) -> MotionClip:
    """Build a clip of the G1 (all bodies but the world body). `seed=None` gives the nominal preset."""
    from unilab.assets import g1

    if duration <= 0 or fps <= 0:
        raise ValueError(f"duration and fps must be positive (got {duration}, {fps})")
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; known: {sorted(PRESETS)}")
    model = model if model is not None else g1.build_g1_model(with_floor=False)
    joint_names = list(g1.G1_JOINT_NAMES)
    foot_bodies = list(g1.G1_FOOT_BODIES)
    kin = G1Kinematics(model, joint_names, foot_bodies)
    sides = [b.split("_")[0] for b in foot_bodies]
    ankle_qadr = np.array([[model.joint(f"{s}_ankle_pitch_joint").qposadr[0],
                            model.joint(f"{s}_ankle_roll_joint").qposadr[0]] for s in sides])

    stand = g1.default_qpos(model).astype(np.float64)
    stand[:3] = 0.0
    stand[3:7] = (1.0, 0.0, 0.0, 0.0)
    kin.fk(stand)
    target_up = kin.foot_up_axes()
    stand_feet_xy = kin.foot_xy()

    rng = None if seed is None else np.random.default_rng(seed)
    num_frames = int(round(duration * fps)) + 1
    times = np.arange(num_frames) / fps
    timeline = build_timeline(PRESETS[preset], duration, rng)
    known = set(joint_names) | set(BASE_CHANNELS)
    unknown = {c for _, pose in timeline for c in pose} - known
    if unknown:
        raise ValueError(f"preset {preset!r} uses unknown channels {sorted(unknown)}")
    channels = joint_names + list(BASE_CHANNELS)
    offsets = interpolate(timeline, channels, times)

    lo, hi = kin.joint_range[:, 0] + 0.02, kin.joint_range[:, 1] - 0.02
    qpos_traj = np.zeros((num_frames, model.nq))
    q = stand.copy()
    for i in range(num_frames):
        q[kin.joint_qadr] = np.clip(stand[kin.joint_qadr] + offsets[i, : len(joint_names)], lo, hi)
        roll, pitch, yaw = offsets[i, len(joint_names):]
        q[:3] = 0.0
        q[3:7] = quat_from_rpy(roll, pitch, yaw)
        _solve_ankles(kin, q, ankle_qadr, target_up)
        q[kin.joint_qadr] = np.clip(q[kin.joint_qadr], lo, hi)  # a sole may tilt where an ankle hits its range
        kin.fk(q)
        feet_z = kin.foot_lowest_z()
        w = np.exp(-(feet_z - feet_z.min()) / FOOT_CONTACT_SCALE)
        w /= w.sum()
        q[:2] = w @ (stand_feet_xy - kin.foot_xy())
        q[2] = -feet_z.min()
        qpos_traj[i] = q

    return clip_from_qpos(model, qpos_traj, fps, kin, source=f"<synth preset={preset} seed={seed}>")


def clip_from_qpos(model: mujoco.MjModel, qpos_traj: np.ndarray, fps: float, kin: G1Kinematics,
                   source: str) -> MotionClip:
    """A clip from a root + joint trajectory: velocities by central differences, body states by forward
    kinematics (synthesis and `unilab motion import` build their clips this way)."""
    num_frames = len(qpos_traj)
    dt = 1.0 / fps
    qvel_traj = np.zeros((num_frames, model.nv))
    for i in range(num_frames):
        a, b = max(i - 1, 0), min(i + 1, num_frames - 1)
        mujoco.mj_differentiatePos(model, qvel_traj[i], (b - a) * dt, qpos_traj[a], qpos_traj[b])

    nb = model.nbody - 1  # skip the world body
    pos = np.zeros((num_frames, nb, 3))
    quat = np.zeros((num_frames, nb, 4))
    lin = np.zeros((num_frames, nb, 3))
    ang = np.zeros((num_frames, nb, 3))
    d = kin.d
    vel6 = np.zeros(6)
    for i in range(num_frames):
        d.qpos[:] = qpos_traj[i]
        d.qvel[:] = qvel_traj[i]
        mujoco.mj_kinematics(model, d)
        mujoco.mj_comPos(model, d)
        mujoco.mj_comVel(model, d)
        pos[i] = d.xpos[1:]
        quat[i] = d.xquat[1:]
        for b in range(1, model.nbody):
            # XBODY: the velocity of the body frame origin (BODY would give it at the centre of mass).
            mujoco.mj_objectVelocity(model, d, mujoco.mjtObj.mjOBJ_XBODY, b, vel6, 0)
            ang[i, b - 1] = vel6[:3]
            lin[i, b - 1] = vel6[3:]

    return MotionClip(
        fps=float(fps),
        joint_pos=qpos_traj[:, kin.joint_qadr].astype(np.float32),
        joint_vel=qvel_traj[:, kin.joint_dadr].astype(np.float32),
        body_names=tuple(model.body(b).name for b in range(1, model.nbody)),
        body_pos_w=pos.astype(np.float32),
        body_quat_w=quat.astype(np.float32),
        body_lin_vel_w=lin.astype(np.float32),
        body_ang_vel_w=ang.astype(np.float32),
        source=source,
    )


def synth_params_hash(**params) -> str:
    """Content hash of the synth parameters, this module's source and the G1 model description:
    a change to any of them changes the clip, so it changes the hash."""
    from unilab.assets import g1

    model_xml = g1.build_g1_spec(with_floor=False).to_xml()
    source = Path(__file__).read_text()
    blob = json.dumps({"params": params, "source": source, "model": model_xml}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


MAX_DURATION_S = 3600.0  # an hour of motion: synthesis is ~ms per frame, and the clip is held in memory


def check_clip_size(duration: float, fps: float) -> Optional[str]:
    """None for a clip that can be built, else what is wrong (nan, inf, too long, fewer than two frames)."""
    if not (math.isfinite(duration) and 0 < duration <= MAX_DURATION_S):
        return f"--duration {duration}: expected seconds in (0, {MAX_DURATION_S:g}]"
    if not MIN_FPS <= fps <= MAX_FPS:  # the clip loader's range (unilab.motion.clip); NaN fails too
        return f"--fps {fps}: expected frames per second in [{MIN_FPS:g}, {MAX_FPS:g}]"
    if round(duration * fps) < 1:
        return f"--duration {duration} at --fps {fps:g} is less than one frame interval: a clip needs two frames"
    return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="unilab motion synth",
        description="Write a keyframed kinematic G1 motion clip (npz, all bodies).",
    )
    parser.add_argument("--out", required=True, type=Path, help="output .npz path")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds (default 10)")
    parser.add_argument("--fps", type=float, default=50.0, help="frames per second (default 50)")
    parser.add_argument("--seed", type=int, default=None,
                        help="randomise segment order, amplitudes and timing (default: the nominal preset)")
    parser.add_argument("--preset", default="default", choices=sorted(PRESETS))
    argv = list(argv) if argv is not None else None
    if argv and argv[0] == "synth":  # `unilab motion synth ...` may hand over its sub-command word too
        argv = argv[1:]
    args = parser.parse_args(argv)
    problem = check_clip_size(args.duration, args.fps)
    if problem:
        parser.error(problem)
    if args.out.is_dir():
        parser.error(f"--out {args.out}: is a directory; give a file name, e.g. {args.out / 'clip.npz'}")
    clip = synthesize(duration=args.duration, fps=args.fps, seed=args.seed, preset=args.preset)
    try:
        path = save_motion_clip(clip, args.out)
    except OSError as exc:
        print(f"unilab motion synth: --out {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"wrote {path}: {clip.num_frames} frames at {clip.fps:g} fps ({clip.duration:.2f} s), "
          f"{clip.num_joints} joints, {len(clip.body_names)} bodies")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

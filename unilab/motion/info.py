"""`unilab motion info`: what a G1 clip asks of a tracker (duration, speeds, flight, joint speeds, feet
below the floor, a body held above it).

Reads our clip layout and the mjlab / BeyondMimic layout (no body_names: the G1 model's body order).
Speeds come from finite differences of positions, so a source's own velocity fields are not trusted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from unilab.exit_codes import EXIT_USAGE
from unilab.motion.clip import MotionClip, MotionClipError, clip_from_arrays
from unilab.motion.feet import ABOVE_FLOOR_M, BELOW_FLOOR_M, FLOOR_WARN_S, floor_heights, longest_run

# m above the lowest the foot body gets in the clip: the ankle-roll link origin sits a few cm above the
# sole and rises a little at heel-off, so walking stays below this while a jog's flight phase clears it.
FLIGHT_HEIGHT_M = 0.05
FLAT_WORLD_NOTE = ": it stands on something the world does not have, and a tracker on flat ground cannot follow it there"


def clip_floor_heights(clip: MotionClip) -> "tuple[np.ndarray, np.ndarray] | None":
    """(frames, feet) sole heights and (frames,) the whole body's lowest point (unilab.motion.feet) of the
    clip's pelvis pose and joints on our G1; None for a clip that is not in the G1's joint order or has no
    pelvis."""
    from unilab.assets.g1 import G1_FOOT_BODIES, G1_JOINT_NAMES, build_g1_model
    from unilab.motion.synth import G1Kinematics

    if clip.num_joints != len(G1_JOINT_NAMES) or "pelvis" not in clip.body_names:
        return None
    pelvis = clip.body_index("pelvis")
    qpos = np.concatenate((clip.body_pos_w[:, pelvis], clip.body_quat_w[:, pelvis], clip.joint_pos), axis=1)
    kin = G1Kinematics(build_g1_model(with_floor=False), G1_JOINT_NAMES, G1_FOOT_BODIES)
    return floor_heights(kin, qpos.astype(np.float64))


def load_any_clip(path: Path) -> MotionClip:
    """Our layout, or the mjlab one (filled in with the G1 body names when the body count matches)."""
    from unilab.assets.g1 import G1_BODY_NAMES

    try:
        with np.load(path, allow_pickle=False) as npz:
            data = {k: npz[k] for k in npz.files}
    except FileNotFoundError:
        raise MotionClipError(f"{path}: file not found") from None
    except (OSError, ValueError, EOFError) as e:
        raise MotionClipError(f"{path}: unreadable motion clip ({type(e).__name__}: {e})") from None
    if "body_names" not in data and "body_pos_w" in data:
        num_bodies = np.shape(data["body_pos_w"])[1] if np.ndim(data["body_pos_w"]) == 3 else -1
        if num_bodies != len(G1_BODY_NAMES):
            raise MotionClipError(f"{path}: field 'body_names': missing, and {num_bodies} bodies are not the "
                                  f"{len(G1_BODY_NAMES)} of the G1 model to assume its order")
        data["body_names"] = np.asarray(G1_BODY_NAMES)
    return clip_from_arrays(data, str(path))


def motion_stats(clip: MotionClip) -> dict:
    from unilab.assets.g1 import G1_FOOT_BODIES, G1_JOINT_NAMES

    pelvis = clip.body_index("pelvis") if "pelvis" in clip.body_names else 0
    xy = clip.body_pos_w[:, pelvis, :2].astype(np.float64)
    speed = np.linalg.norm(np.diff(xy, axis=0), axis=1) * clip.fps
    feet_z = clip.body_pos_w[:, [clip.body_index(b) for b in G1_FOOT_BODIES], 2].astype(np.float64)
    flight = np.all(feet_z - feet_z.min() > FLIGHT_HEIGHT_M, axis=1)
    joint_speed = np.abs(np.gradient(clip.joint_pos.astype(np.float64), clip.dt, axis=0))
    p50, p95, p99 = np.percentile(joint_speed, [50, 95, 99])
    fastest = int(np.argmax(joint_speed.max(axis=0)))
    names = G1_JOINT_NAMES if clip.num_joints == len(G1_JOINT_NAMES) else [f"joint_{j}" for j in range(clip.num_joints)]
    heights = clip_floor_heights(clip)
    soles, lowest = heights if heights is not None else (None, None)
    below = soles.min(axis=1) < -BELOW_FLOOR_M if soles is not None else None
    above = lowest > ABOVE_FLOOR_M if lowest is not None else None
    above_run, above_from = longest_run(above) if above is not None else (0, 0)
    return {
        "file": clip.source,
        "duration_s": clip.duration,
        "fps": clip.fps,
        "frames": clip.num_frames,
        "root_speed_mean_m_s": float(speed.mean()),
        "root_speed_peak_m_s": float(speed.max()),
        "flight_share": float(flight.mean()),
        "flight_height_m": FLIGHT_HEIGHT_M,
        "joint_speed_p50_rad_s": float(p50),
        "joint_speed_p95_rad_s": float(p95),
        "joint_speed_p99_rad_s": float(p99),
        "fastest_joint": names[fastest],
        "fastest_joint_peak_rad_s": float(joint_speed[:, fastest].max()),
        # Feet below the floor (null for a clip that is not the G1's): the lowest sole, the share of frames
        # with a sole more than below_floor_m down, and the longest such stretch.
        "sole_lowest_m": float(soles.min()) if soles is not None else None,
        "below_floor_m": BELOW_FLOOR_M,
        "below_floor_share": float(below.mean()) if below is not None else None,
        "below_floor_longest_s": longest_run(below)[0] / clip.fps if below is not None else None,
        # The whole body above the floor (null likewise): its lowest point at the clip's highest, the share of
        # frames with every point more than above_floor_m up, and the longest such stretch and its start.
        "body_lowest_max_m": float(lowest.max()) if lowest is not None else None,
        "above_floor_m": ABOVE_FLOOR_M,
        "above_floor_share": float(above.mean()) if above is not None else None,
        "above_floor_longest_s": above_run / clip.fps if above is not None else None,
        "above_floor_from_s": above_from / clip.fps if above is not None else None,
    }


def render(stats: dict) -> str:
    rows = [
        ("file", stats["file"]),
        ("duration", f"{stats['duration_s']:.2f} s"),
        ("fps", f"{stats['fps']:g}"),
        ("frames", str(stats["frames"])),
        ("root horizontal speed", f"mean {stats['root_speed_mean_m_s']:.2f} m/s, peak {stats['root_speed_peak_m_s']:.2f} m/s"),
        ("flight phase", f"{stats['flight_share']:.1%} of frames (both feet > {stats['flight_height_m']:g} m up)"),
        ("joint speed", f"p50 {stats['joint_speed_p50_rad_s']:.2f}, p95 {stats['joint_speed_p95_rad_s']:.2f}, "
                        f"p99 {stats['joint_speed_p99_rad_s']:.2f} rad/s"),
        ("fastest joint", f"{stats['fastest_joint']} (peak {stats['fastest_joint_peak_rad_s']:.2f} rad/s)"),
    ]
    if stats["sole_lowest_m"] is not None:
        lowest_mm = round(1000 * stats["sole_lowest_m"]) + 0  # + 0: no "-0"
        rows.append(("feet below the floor",
                     f"lowest sole {lowest_mm:+d} mm; {stats['below_floor_share']:.1%} of frames with a sole more "
                     f"than {1000 * stats['below_floor_m']:.0f} mm down, the longest stretch "
                     f"{stats['below_floor_longest_s']:.2f} s"))
        rows.append(("whole body off the floor",
                     f"{stats['above_floor_share']:.1%} of frames with every point more than "
                     f"{1000 * stats['above_floor_m']:.0f} mm up, the longest stretch "
                     f"{stats['above_floor_longest_s']:.2f} s from {stats['above_floor_from_s']:.2f} s"
                     + (FLAT_WORLD_NOTE if stats["above_floor_longest_s"] >= FLOOR_WARN_S else "")))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def render_table(all_stats: list[dict]) -> str:
    """One row per clip of a directory: what `render` says of each, in short."""
    def feet(st):
        return "-" if st["sole_lowest_m"] is None else f"{st['below_floor_share']:.0%}, {st['below_floor_longest_s']:.2f} s"

    def off(st):
        return "-" if st["sole_lowest_m"] is None else f"{st['above_floor_share']:.0%}, {st['above_floor_longest_s']:.2f} s"

    rows = [("clip", "s", "speed m/s", "flight", "joint p95", "off floor", "feet in floor")]
    rows += [(Path(st["file"]).stem, f"{st['duration_s']:.1f}",
              f"{st['root_speed_mean_m_s']:.2f} / {st['root_speed_peak_m_s']:.2f}", f"{st['flight_share']:.0%}",
              f"{st['joint_speed_p95_rad_s']:.2f}", off(st), feet(st)) for st in all_stats]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    return "\n".join(lines) + ("\n\nspeed: the pelvis's mean / peak; joint p95: rad/s; off floor: frames with the whole "
                               f"body more than {1000 * ABOVE_FLOOR_M:.0f} mm up, the longest stretch; feet in floor: "
                               f"frames with a sole more than {1000 * BELOW_FLOOR_M:.0f} mm down, the longest stretch")


def add_parser(motsub) -> None:
    p = motsub.add_parser("info", help="duration, root speed, flight phase, joint speeds, feet below the floor and "
                                       "a body held above it, of a clip or of each clip of a directory")
    p.add_argument("file", type=Path, help="clip (.npz: ours or the mjlab layout), or a directory of them")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=main)


def main(args) -> int:
    from unilab.motion.library import motion_files

    try:
        files = motion_files(args.file) if args.file.is_dir() else [args.file]
        all_stats = [motion_stats(load_any_clip(f)) for f in files]
    except MotionClipError as exc:
        print(f"unilab motion info: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.file.is_dir():
        print(json.dumps(all_stats, indent=2) if args.json else render_table(all_stats))
    else:
        print(json.dumps(all_stats[0], indent=2) if args.json else render(all_stats[0]))
    return 0

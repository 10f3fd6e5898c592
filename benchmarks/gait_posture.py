"""The posture of walk policies along `unilab demo`'s tour, in plain MuJoCo on the CPU: per leg of the tour, the
torso's pitch and roll, the pelvis height, how fast the legs move (mean |joint velocity| of the hips, knees and
ankles: near 0 where the robot stands still), and how the arms are carried (each shoulder and elbow joint's mean
offset from the policy's default pose, and its swing: the standard deviation about that mean).

    python benchmarks/gait_posture.py POLICY.onnx [POLICY.onnx ...] [--seconds S] [--json FILE] [--picture FILE.png]

Each leg is measured over its second half, after the change of command has settled. A held arm shows as an
offset, an arm swinging against the legs as swing; `arm offset` and `arm swing` are the root mean square over
the arm joints, `widest offset` names the joint held furthest from its default. `--picture` draws the robot
from the front at the SNAPSHOTS below: one row per policy, one column per moment (it needs OpenGL, as `unilab
demo --video` does).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

ARM_JOINTS = ("shoulder", "elbow")
LEG_JOINTS = ("hip", "knee", "ankle")
# (leg of the tour, share of its length), in the tour's order (the picture's columns): mid-stride at the fast walk,
# and the last stand, after walking backward.
SNAPSHOTS = (("walk forward at 1.0 m/s", 0.75), ("stand still", 1.0))
TILE = (320, 360)  # width, height of one drawing


def arm_carriage(q: np.ndarray, default: np.ndarray, names: list[str]) -> dict:
    """q: (steps, joints) joint positions over one stretch of walking. The arm joints' offsets and swings."""
    arm = [i for i, n in enumerate(names) if any(k in n for k in ARM_JOINTS)]
    offset = (q[:, arm] - default[arm]).mean(0)
    swing = q[:, arm].std(0)
    widest = int(np.argmax(np.abs(offset)))
    return {"arm_offset_rad": float(np.sqrt(np.mean(offset ** 2))), "arm_swing_rad": float(np.sqrt(np.mean(swing ** 2))),
            "widest_offset_joint": names[arm[widest]], "widest_offset_rad": float(offset[widest])}


def tilt_deg(torso_xmat: np.ndarray) -> tuple[float, float]:
    """Pitch (forward +) and roll (to the right +) of a body's z axis from the vertical, in degrees."""
    z = np.asarray(torso_xmat).reshape(3, 3)[:, 2]
    return float(np.degrees(np.arctan2(z[0], z[2]))), float(np.degrees(np.arctan2(-z[1], z[2])))


def posture(path: str, seconds: float | None = None, snapshots: list | None = None) -> dict:
    """The report of one policy; with `snapshots` (a list), the full qpos at each of SNAPSHOTS appended to it."""
    from unilab.deploy import model as models
    from unilab.deploy.demo import scaled_tour, walk_tour
    from unilab.deploy.policy import OnnxPolicy
    from unilab.sim.headless import mujoco

    policy = OnnxPolicy(path, tasks=("g1_walk_flat",))
    model, _ = models.build_model(policy.meta, "ours")
    names, default = policy.meta["joint_names"], np.asarray(policy.meta["default_joint_pos"])
    joints = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n) for n in names]
    qadr = [model.jnt_qposadr[j] for j in joints]
    legs_v = [model.jnt_dofadr[j] for j, n in zip(joints, names) if any(k in n for k in LEG_JOINTS)]
    torso = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "torso_link")
    frames: list[tuple] = []
    tour = scaled_tour(seconds)
    log = walk_tour(model, policy, tour, say=lambda _: None,
                    on_frame=lambda d: frames.append((d.qpos[qadr].copy(), d.xmat[torso].copy(), float(d.qpos[2]),
                                                      float(np.abs(d.qvel[legs_v]).mean()), d.qpos.copy())))
    legs, start = [], 0
    for i, leg in enumerate(tour):
        steps = int(round(leg.seconds / policy.meta["control_dt"]))
        for label, share in SNAPSHOTS if snapshots is not None else ():
            if leg.label == label and all(later.label != label for later in tour[i + 1:]):  # its last leg
                snapshots.append(frames[start + max(0, min(steps, round(share * steps)) - 1)][4])
        half = frames[start + steps // 2:start + steps]
        start += steps
        tilts = np.array([tilt_deg(f[1]) for f in half])
        legs.append({"leg": leg.label, "command": list(leg.command),
                     "torso_pitch_deg": float(tilts[:, 0].mean()), "torso_roll_deg": float(tilts[:, 1].mean()),
                     "pelvis_height_m": float(np.mean([f[2] for f in half])),
                     "leg_speed_rad_s": float(np.mean([f[3] for f in half])),
                     **arm_carriage(np.array([f[0] for f in half]), default, names)})
    return {"policy": path, "falls": log.falls, "legs": legs}


def picture(rows: list[list[np.ndarray]], policy_path: str, path: str) -> None:
    """Each row's poses (full qpos of our G1, as the policy at `policy_path` walked it) drawn from the front, the
    camera on the pelvis and turned with its heading, tiled into one PNG."""
    import imageio.v3 as iio

    from unilab.deploy import model as models
    from unilab.deploy.policy import OnnxPolicy
    from unilab.viz.render import FrameRenderer

    walked, _ = models.build_model(OnnxPolicy(policy_path, tasks=("g1_walk_flat",)).meta, "ours")
    renderer = FrameRenderer(walked, width=TILE[0], height=TILE[1])  # one world, the camera on the pelvis
    camera = renderer.cameras[0]
    camera.distance, camera.elevation = 2.6, -8.0
    tiles = []
    try:
        for poses in rows:
            drawn = []
            for qpos in poses:
                w, x, y, z = qpos[3:7]
                heading = np.degrees(np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))
                camera.azimuth = heading + 180.0  # looking back at the robot's face
                drawn.append(renderer.frame(qpos[None]))
            tiles.append(np.concatenate(drawn, axis=1))
    finally:
        renderer.close()
    iio.imwrite(path, np.concatenate(tiles, axis=0))


def table(report: dict) -> list[str]:
    lines = [f"{report['policy']} ({report['falls']} falls)",
             f"  {'leg':<26} {'pitch deg':>9} {'roll deg':>8} {'pelvis m':>8} {'legs rad/s':>10} {'arm offset':>10} "
             f"{'arm swing':>9}  widest offset"]
    for r in report["legs"]:
        lines.append(f"  {r['leg']:<26} {r['torso_pitch_deg']:>+9.1f} {r['torso_roll_deg']:>+8.1f} "
                     f"{r['pelvis_height_m']:>8.3f} {r['leg_speed_rad_s']:>10.2f} {r['arm_offset_rad']:>10.2f} "
                     f"{r['arm_swing_rad']:>9.2f}  "
                     f"{r['widest_offset_joint']} {r['widest_offset_rad']:+.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("policies", nargs="+", help="walk policies exported by `unilab export` (.onnx)")
    ap.add_argument("--seconds", type=float, default=None, help="the tour's length (default: as `unilab demo`)")
    ap.add_argument("--json", default=None, help="write the reports here")
    ap.add_argument("--picture", default=None, help="draw each policy at the SNAPSHOTS into this PNG")
    args = ap.parse_args(argv)
    from unilab.deploy.policy import DeployError

    for flag, out in (("--json", args.json), ("--picture", args.picture)):
        if out and not os.path.isdir(os.path.dirname(os.path.abspath(out))):
            print(f"gait_posture: {flag} {out}: no such directory", file=sys.stderr)
            return 2
    if args.picture and not args.picture.lower().endswith(".png"):
        print(f"gait_posture: --picture {args.picture}: give a .png file", file=sys.stderr)
        return 2
    try:
        if args.picture:
            from unilab.deploy.video import prepare

            prepare()  # OpenGL and imageio, chosen before mujoco is first imported
        rows: list[list] = [[] for _ in args.policies]
        reports = [posture(p, args.seconds, row if args.picture else None) for p, row in zip(args.policies, rows)]
    except DeployError as exc:
        print(f"gait_posture: {exc}", file=sys.stderr)
        return 2
    for report in reports:
        print("\n".join(table(report)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports, f, indent=2)
    if args.picture:
        picture(rows, args.policies[0], args.picture)
        print(f"gait_posture: wrote {args.picture} (rows: {', '.join(args.policies)}; columns: "
              f"{', '.join(label for label, _ in SNAPSHOTS)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The posture of walk policies along `unilab demo`'s tour, in plain MuJoCo on the CPU: per leg of the tour, the
torso's pitch and roll, the pelvis height, how fast the legs move (mean |joint velocity| of the hips, knees and
ankles: near 0 where the robot stands still), and how the arms are carried (each shoulder and elbow joint's mean
offset from the policy's default pose, and its swing: the standard deviation about that mean).

    python benchmarks/gait_posture.py POLICY.onnx [POLICY.onnx ...] [--seconds S] [--json FILE]

Each leg is measured over its second half, after the change of command has settled. A held arm shows as an
offset, an arm swinging against the legs as swing; `arm offset` and `arm swing` are the root mean square over
the arm joints, `widest offset` names the joint held furthest from its default.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

ARM_JOINTS = ("shoulder", "elbow")
LEG_JOINTS = ("hip", "knee", "ankle")


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


def posture(path: str, seconds: float | None = None) -> dict:
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
                                                      float(np.abs(d.qvel[legs_v]).mean()))))
    legs, start = [], 0
    for leg in tour:
        steps = int(round(leg.seconds / policy.meta["control_dt"]))
        half = frames[start + steps // 2:start + steps]
        start += steps
        tilts = np.array([tilt_deg(f[1]) for f in half])
        legs.append({"leg": leg.label, "command": list(leg.command),
                     "torso_pitch_deg": float(tilts[:, 0].mean()), "torso_roll_deg": float(tilts[:, 1].mean()),
                     "pelvis_height_m": float(np.mean([f[2] for f in half])),
                     "leg_speed_rad_s": float(np.mean([f[3] for f in half])),
                     **arm_carriage(np.array([f[0] for f in half]), default, names)})
    return {"policy": path, "falls": log.falls, "legs": legs}


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
    args = ap.parse_args(argv)
    from unilab.deploy.policy import DeployError

    if args.json and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        print(f"gait_posture: --json {args.json}: no such directory", file=sys.stderr)
        return 2

    try:
        reports = [posture(p, args.seconds) for p in args.policies]
    except DeployError as exc:
        print(f"gait_posture: {exc}", file=sys.stderr)
        return 2
    for report in reports:
        print("\n".join(table(report)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

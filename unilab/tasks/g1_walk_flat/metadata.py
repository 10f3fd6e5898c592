"""The walk task's part of an exported policy's metadata (unilab.tasks.common.metadata): each observation term's
frame and unit, the gait clock, the command, the start state and how to rebuild the model. Plain data: no torch."""

from __future__ import annotations

PELVIS = "pelvis (the root body; MuJoCo free-joint convention)"
OBSERVATION_FRAMES = {
    "base_ang_vel": f"angular velocity of the {PELVIS} in its own body frame, rad/s x scale (qvel[3:6])",
    "projected_gravity": "unit gravity vector in the pelvis body frame ((0, 0, -1) upright): R_pelvis^T (0, 0, -1)",
    "joint_pos_rel": "joint positions minus default_joint_pos, actuator order, rad",
    "joint_vel": "joint velocities, actuator order, rad/s x scale",
    "last_action": "the previous action as applied (clipped to [-1, 1]), actuator order; zeros at episode start",
    "command": "(vx, vy) m/s in the pelvis body frame, wz rad/s about the pelvis z axis",
    "gait_phase_sin_cos": "(sin 2 pi phase, cos 2 pi phase), phase per `gait`",
}
PHASE_RULE = ("phase = (steps since the episode's reset * control_dt / period_s) mod 1; 0 in the observation of the "
              "reset state, then one control step more per policy step")


def deploy_description(*, gait_period_s: float, stance_fraction: float, base_height: float, min_base_height: float,
                       max_tilt_rad: float) -> dict:
    """What a deployer needs beyond the layout: frames and units, the gait clock, the command, the start state."""
    return {
        "observation_frames": OBSERVATION_FRAMES,
        "gait": {"period_s": float(gait_period_s), "phase": PHASE_RULE,
                 "sin_cos": "(sin(2 pi phase), cos(2 pi phase))",
                 "leg_phase_offset": {"left": 0.0, "right": 0.5}, "stance_fraction": float(stance_fraction)},
        "command": {"names": ["vx", "vy", "wz"], "units": ["m/s", "m/s", "rad/s"], "frame": "pelvis body frame",
                    "standing": "all three zero"},
        "episode_start": {"base_pos": [0.0, 0.0, float(base_height)], "base_quat": [1.0, 0.0, 0.0, 0.0],
                          "joint_pos": "default_joint_pos", "velocities": "zero", "last_action": "zero",
                          "observation": "of the start state, before any step"},
        "terminations": {"min_base_height": float(min_base_height), "max_tilt_rad": float(max_tilt_rad),
                         "rule": "pelvis height below min_base_height (m) or its tilt from upright above max_tilt_rad"},
        "model_builder": {"builder": "unilab.assets.g1.build_g1_model", "kwargs": {}},
    }

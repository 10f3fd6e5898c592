"""The motion tracking task's part of an exported policy's metadata (unilab.tasks.common.metadata): each
observation term's frame and unit, how the clip is played, the start state and how to rebuild the model. Plain
data: no torch."""

from __future__ import annotations

ANCHOR = "the anchor body (motion.anchor_body)"
OBSERVATION_FRAMES = {
    "ref_joint_pos": "the clip frame's joint positions, actuator order, rad",
    "ref_joint_vel": "the clip frame's joint velocities, actuator order, rad/s",
    "anchor_pos_b": f"reference minus robot position of {ANCHOR}, in the robot anchor's body frame, m",
    "anchor_ori_b": ("R_anchor^T R_ref_anchor, its first two columns row by row (r00, r01, r10, r11, r20, r21); "
                     "R_ref_anchor from the clip frame's world quaternion (w, x, y, z)"),
    "base_lin_vel_b": "linear velocity of the pelvis (root, qvel[0:3] is world frame) in its body frame, m/s",
    "base_ang_vel_b": "angular velocity of the pelvis in its body frame, rad/s (qvel[3:6])",
    "joint_pos_rel": "joint positions minus default_joint_pos, actuator order, rad",
    "joint_vel": "joint velocities, actuator order, rad/s",
    "last_action": "the previous action as applied (clipped to [-1, 1]), actuator order; zeros at episode start",
}
FRAME_RULE = ("clip frame = start frame + round(steps since the episode's reset * fps * control_dt), at most the "
              "clip's last frame; the episode ends (truncated) after floor((last frame - start frame) / "
              "(fps * control_dt)) steps, at least one")


def deploy_description(*, anchor_body: str, root_body: str, tracked_bodies, end_effectors, action_offset: str,
                       terminations: dict, self_collisions: bool) -> dict:
    return {
        "observation_frames": OBSERVATION_FRAMES,
        "motion": {"frame_rule": FRAME_RULE, "anchor_body": anchor_body, "root_body": root_body,
                   "tracked_bodies": list(tracked_bodies), "end_effectors": list(end_effectors),
                   "action_offset": action_offset,
                   "reference_frame": "the clip's world frame; the tracked bodies are compared after moving the "
                                      "reference onto the robot anchor's xy and heading, at the reference height"},
        "terminations": {**terminations, "rule": "anchor height or tilt, or an end effector's height, off the "
                                                  "reference by more than these (m, m, gravity z difference)"},
        "episode_start": {"state": "the clip's start frame: root pose and velocity, joint positions and velocities",
                          "last_action": "zero", "observation": "of the start state, before any step"},
        "model_builder": {"builder": "unilab.assets.g1.build_g1_model",
                          "kwargs": {"self_collisions": bool(self_collisions)}},
    }

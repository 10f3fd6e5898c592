"""Configuration of the `g1_motion_tracking` task (BeyondMimic-style whole-body motion tracking).

Pure dataclasses (no torch / warp / mujoco imports) so Hydra's ConfigStore can register the schema
cheaply. Reward weights are per second: the env multiplies each weighted term by the control dt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

from unilab.checks import at_least_one, fields_in, integer_in, non_negative, number_in, one_of, require, text
from unilab.tasks.config_checks import (MAX_EPISODE_S, MAX_HEIGHT, MAX_SPEED, MAX_STD, check_control_steps,
                                        check_range_pairs, check_reward_weights)

# A clip lasts at least this many control steps: an episode that starts on its first frame ends (truncated) on its
# last, so a shorter clip gives episodes of a step or two, in which no tracking can be learnt.
MIN_CLIP_CONTROL_STEPS = 5
MAX_SOLVER_ITERATIONS = 1000  # as sim.iterations (unilab.sim.config)
MAX_GAIN = 100.0


@dataclass
class RewardWeights:
    anchor_pos: float = 0.5
    anchor_ori: float = 0.5
    body_pos: float = 1.0
    body_ori: float = 1.0
    body_lin_vel: float = 1.0
    body_ang_vel: float = 1.0
    action_rate: float = -0.1
    joint_limit: float = -10.0
    # Contacts between the robot's own geoms (needs self_collisions): arms through the torso, legs
    # through each other are motions the reference never shows and hardware must not do.
    self_collision: float = -10.0
    # Per second, times dt, once per terminated episode. The anchor's PPO needs none; for the off-policy
    # learners every step's reward can turn negative (the penalties above), and then, without a cost
    # for a fall, ending the episode early is the best return (docs/history/tracking.md, the ablation).
    termination: float = -200.0


@dataclass
class RewardConfig:
    weights: RewardWeights = field(default_factory=RewardWeights)
    # Standard deviations of the exp(-err^2 / std^2) kernels; body terms use the mean error over bodies.
    # The body kernels are narrower than the anchor's (0.3 m, 0.4 rad): at a few centimetres of error
    # the wide kernel is nearly flat, so the critic sees little difference between close and closer.
    anchor_pos_std: float = 0.3  # m
    anchor_ori_std: float = 0.4  # rad
    body_pos_std: float = 0.1  # m
    body_ori_std: float = 0.2  # rad
    body_lin_vel_std: float = 1.0  # m/s
    body_ang_vel_std: float = 3.14  # rad/s
    soft_joint_limit_factor: float = 0.9

    def __post_init__(self) -> None:
        check_reward_weights(self.weights)
        for name in ("anchor_pos_std", "anchor_ori_std", "body_pos_std", "body_ori_std", "body_lin_vel_std",
                     "body_ang_vel_std"):
            number_in(f"task.rewards.{name}", getattr(self, name), 0, MAX_STD, low_open=True)
        number_in("task.rewards.soft_joint_limit_factor", self.soft_joint_limit_factor, 0, 1, low_open=True)


@dataclass
class TerminationConfig:
    anchor_height: float = 0.25  # m, |z_ref - z| of the anchor body
    anchor_gravity_z: float = 0.8  # difference of the z component of gravity in the anchor frame
    end_effector_height: float = 0.25  # m, any end effector's |z_ref - z|

    def __post_init__(self) -> None:
        p = "task.terminations"
        number_in(f"{p}.anchor_height", self.anchor_height, 0, MAX_HEIGHT, "m", low_open=True)
        number_in(f"{p}.anchor_gravity_z", self.anchor_gravity_z, 0, 2, "a difference of unit vectors' z", low_open=True)
        number_in(f"{p}.end_effector_height", self.end_effector_height, 0, MAX_HEIGHT, "m", low_open=True)


_DEFAULT_COM_BODIES = ("torso_link",)


@dataclass
class RandomizationConfig:
    # Uniform noise around the reference frame at reset (0 turns a term off): the policy must recover
    # from states near, not on, the clip.
    reset_root_pos: float = 0.05  # m, x and y (z is left alone: the feet would sink into the floor)
    reset_root_yaw: float = 0.2  # rad
    reset_joint_pos: float = 0.1  # rad
    reset_vel: float = 0.5  # m/s and rad/s of the root, rad/s of the joints
    # Per-env sliding friction of every geom, redrawn at every reset; null turns it off.
    friction_range: Optional[tuple[float, float]] = (0.3, 1.2)
    # Every env is pushed at its own times, uniformly push_interval_s apart; null turns pushes off.
    push_interval_s: Optional[tuple[float, float]] = (1.0, 3.0)
    # Half-widths of the uniform root velocity kick: x, y, z (m/s, world frame), roll, pitch, yaw
    # (rad/s, root frame). Whole-body motions must survive being knocked in every direction.
    push_max_vel: tuple[float, float, float, float, float, float] = (0.5, 0.5, 0.2, 0.52, 0.52, 0.78)
    # Per-env CoM offset (m, body frame, half-widths x, y, z) of com_bodies, redrawn at every reset;
    # null turns it off. The torso carries the battery and the most mass: its CoM is the least certain.
    com_offset: Optional[tuple[float, float, float]] = (0.025, 0.05, 0.05)
    com_bodies: tuple[str, ...] = _DEFAULT_COM_BODIES

    def __post_init__(self) -> None:
        p = "task.randomization"
        for name, high in (("reset_root_pos", MAX_HEIGHT), ("reset_root_yaw", 2 * math.pi),
                           ("reset_joint_pos", math.pi), ("reset_vel", MAX_SPEED)):
            non_negative(f"{p}.{name}", getattr(self, name), high)
        check_range_pairs(p, self)
        require(len(self.push_max_vel) == 6, f"{p}.push_max_vel", list(self.push_max_vel), "six half-widths")
        for w in self.push_max_vel:
            non_negative(f"{p}.push_max_vel", w, MAX_SPEED)
        if self.com_offset is not None:
            require(len(self.com_offset) == 3, f"{p}.com_offset", list(self.com_offset), "null or [x, y, z] (m)")
            for w in self.com_offset:
                require(isinstance(w, (int, float)) and math.isfinite(w) and 0 <= w <= 0.2, f"{p}.com_offset",
                        list(self.com_offset), "half-widths in [0, 0.2] m")
            require(len(self.com_bodies) >= 1, f"{p}.com_bodies", list(self.com_bodies), "at least one G1 body")
            if tuple(self.com_bodies) != _DEFAULT_COM_BODIES:  # the asset pulls mujoco: only for a changed list
                from unilab.assets.g1 import G1_BODY_NAMES

                for body in self.com_bodies:
                    one_of(f"{p}.com_bodies", body, G1_BODY_NAMES)


@dataclass
class ObservationConfig:
    # Uniform noise half-widths of the policy's observation terms, multiplied by noise_scale (0 turns
    # the noise off). The critic always sees the clean state. The reference terms (ref_joint_pos/vel)
    # and the last action are exact and stay so.
    noise_scale: float = 1.0
    anchor_pos_noise: float = 0.25  # m
    anchor_ori_noise: float = 0.05  # 6D rotation entries
    lin_vel_noise: float = 0.5  # m/s
    ang_vel_noise: float = 0.2  # rad/s
    joint_pos_noise: float = 0.01  # rad
    joint_vel_noise: float = 0.5  # rad/s

    def __post_init__(self) -> None:
        fields_in("task.observations", self, 0, MAX_STD)


@dataclass
class SamplingConfig:
    """Where episodes start (see unilab/tasks/g1_motion_tracking/sampling.py)."""

    mode: str = "adaptive"  # adaptive: failure-weighted bins; uniform: every start frame equally likely
    bin_s: float = 1.0  # seconds of clip per bin
    uniform_share: float = 0.1  # share of starts drawn from the floor (uniform over clips, then bins)
    max_clip_share: float = 1.0  # most of the failure part one clip may take (1: no cap)
    smoothing: float = 0.001  # per-step weight of the newest failure counts in the bins' moving average
    blur: float = 0.8  # a failure in bin j also weighs bin j-k by blur**k ...
    blur_bins: int = 3  # ... for k < blur_bins, within the clip


SAMPLING_MODES = ("uniform", "adaptive")
ACTION_OFFSETS = ("stand", "reference")


def check_sampling(s: SamplingConfig) -> None:
    one_of("task.sampling.mode", s.mode, SAMPLING_MODES)
    number_in("task.sampling.bin_s", s.bin_s, 0, MAX_EPISODE_S, "seconds of clip per bin", low_open=True)
    for key in ("uniform_share", "blur"):
        number_in(f"task.sampling.{key}", getattr(s, key), 0, 1)
    number_in("task.sampling.max_clip_share", s.max_clip_share, 0, 1, "0 would start no episode from a failure",
              low_open=True)
    number_in("task.sampling.smoothing", s.smoothing, 0, 1, "0 would never change the failure rates", low_open=True)
    integer_in("task.sampling.blur_bins", s.blur_bins, 1, 1000)


@dataclass
class G1MotionTrackingConfig:
    name: str = "g1_motion_tracking"
    num_envs: int = 2048
    # npz clip, or a directory of them (all its *.npz, sorted by name, one frame rate); None: the embedded
    # default clip, synthesised on first use into $UNILAB_CACHE_DIR/motion (else $XDG_CACHE_HOME/unilab/motion,
    # else ~/.cache/unilab/motion).
    motion_file: Optional[str] = None
    episode_length_s: float = 10.0  # episodes also end (truncated) at the end of the clip
    # How an action in [-1, 1] moves each joint target from the stand pose:
    #   "per_joint": per_joint_gain * 0.25 * effort_limit / kp rad (the anchor tracker's per-joint scale,
    #     stiff strong joints move less per unit than weak soft ones);
    #   a number: that many rad for every joint (1.25 was the earlier uniform default).
    action_scale: Any = "per_joint"
    # Multiple of the per-joint scale an action of +-1 reaches. The anchor's Gaussian actions are
    # unbounded; ours are squashed to [-1, 1], and the learner's exploration noise is in action units:
    # the gain multiplies that noise in joint targets. Lower is more precise, as long as the spans
    # still cover what the policy must reach (see action_offset) and leave room to catch a push: 1.5
    # held the walk and the library under pushes where 1 fell, and 2 lost the jog (docs/history/tracking.md).
    per_joint_gain: float = 1.5
    # What an action of 0 asks of each joint: "reference", the clip's joint positions one control step
    # ahead, so the policy outputs corrections to the clip; or "stand", the stand pose (the anchor
    # tracker's choice: the policy outputs the clip's joint positions itself). Around the stand pose the
    # spans must cover the clip's whole excursion (gain 2 still leaves the wrists and, in a jog, the
    # elbows short); around the reference they need to cover the corrections only, which lets the gain
    # drop, and the action-rate penalty no longer charges the clip's own joint speed.
    action_offset: str = "reference"
    # Collisions between the robot's own geoms (see unilab/assets/g1.py) and the self_collision penalty.
    self_collisions: bool = True
    # The constraint solver's iteration cap in this task's worlds (the G1 model's is 10; sim.iterations,
    # where set, overrides it). MJWarp's captured solver loop runs until its slowest world converges, and
    # with the per-env friction that is a slippery world needing nearly all of 10, in every substep, while
    # most worlds converge well below 6: the cap truncates the slowest worlds only (docs/history/tracking.md).
    solver_iterations: int = 6
    rewards: RewardConfig = field(default_factory=RewardConfig)
    terminations: TerminationConfig = field(default_factory=TerminationConfig)
    observations: ObservationConfig = field(default_factory=ObservationConfig)
    randomization: RandomizationConfig = field(default_factory=RandomizationConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)

    @property
    def action_bounds(self) -> str:
        """How an exported policy names its action mapping: per-joint spans or one uniform scale."""
        return "per_joint" if self.action_scale == "per_joint" else "uniform"

    def __post_init__(self) -> None:
        at_least_one("task", self, ("num_envs",))  # its upper bound: the simulator's sizes (unilab.config.sizes)
        integer_in("task.solver_iterations", self.solver_iterations, 1, MAX_SOLVER_ITERATIONS)
        number_in("task.episode_length_s", self.episode_length_s, 0, MAX_EPISODE_S, "seconds", low_open=True)
        check_sampling(self.sampling)
        check_action_scale(self.action_scale)
        number_in("task.per_joint_gain", self.per_joint_gain, 0, MAX_GAIN, low_open=True)
        one_of("task.action_offset", self.action_offset, ACTION_OFFSETS)
        # The shortest clip (name, seconds): check_with_sim holds it to the control step. None: the default clip.
        self._shortest_clip: Optional[tuple[str, float]] = None
        if self.motion_file is not None:
            text("task.motion_file", self.motion_file, what="a clip file or directory, or null")
            name, clip = check_motion_file(self.motion_file).shortest()
            self._shortest_clip = (name, clip.duration)

    def check_with_sim(self, sim: Any) -> None:
        """What depends on the simulator's settings: an episode lasts at least one control step, every clip
        MIN_CLIP_CONTROL_STEPS (the clips' fields themselves were checked with the config)."""
        check_control_steps("task.episode_length_s", self.episode_length_s, sim.control_dt)
        if self._shortest_clip is not None:
            name, seconds = self._shortest_clip
            need = MIN_CLIP_CONTROL_STEPS * sim.control_dt
            require(seconds >= need - 1e-9, "task.motion_file", self.motion_file,
                    f"clips of at least {MIN_CLIP_CONTROL_STEPS} control steps of {sim.control_dt:g} s = {need:g} s "
                    f"(sim.timestep x sim.decimation); clip {name!r} lasts {seconds:g} s, from its first frame to its "
                    "last (fields 'joint_pos' frames and 'fps')")

    def build_model(self):
        """This task's MuJoCo model (compiled from the G1 spec in milliseconds, no Warp): what its env simulates.
        Its solver cap is task.solver_iterations (the backend's sim.iterations, where set, wins)."""
        from unilab.assets import g1

        model = g1.build_g1_model(self_collisions=self.self_collisions)
        model.opt.iterations = self.solver_iterations
        return model

    def transition_dims(self) -> tuple[int, int, int]:
        """(obs, critic obs, action) sizes of a transition, as the env's observation terms make them (a test
        holds them to the env's): the replay's row at compose, before any env exists."""
        from unilab.assets.g1 import G1_JOINT_NAMES, G1_TRACKING_BODIES

        j = len(G1_JOINT_NAMES)
        # reference joint pos and vel; anchor position and 6D orientation; root velocities; joint pos, vel and the
        # last action
        obs = 2 * j + 3 + 6 + 3 + 3 + 3 * j
        return obs, obs + (3 + 6) * len(G1_TRACKING_BODIES), j  # critic: + every tracked body's pose (3 + 6D)


def check_action_scale(value: Any) -> None:
    if isinstance(value, str):
        one_of("task.action_scale", value, ("per_joint",))
        return
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    require(ok and math.isfinite(value) and 0 < value <= 2 * math.pi, "task.action_scale", value,
            "per_joint or a number in (0, 2 pi] (rad)")


def check_motion_file(path: str):
    """Load the clip(s) as the env will (every field, the bodies the task tracks, the G1's joints): a missing or
    invalid file fails when the config is composed, not in the collector. Returns the MotionLibrary it loaded."""
    from unilab.assets.g1 import G1_ANCHOR_BODY, G1_END_EFFECTORS, G1_JOINT_NAMES, G1_TRACKING_BODIES
    from unilab.motion.clip import MotionClipError
    from unilab.motion.library import load_motion_library

    try:
        return load_motion_library(path, body_names=list(dict.fromkeys([*G1_TRACKING_BODIES, G1_ANCHOR_BODY,
                                                                     *G1_END_EFFECTORS])),
                                   num_joints=len(G1_JOINT_NAMES), joint_names=G1_JOINT_NAMES)
    except MotionClipError as exc:
        raise ValueError(f"task.motion_file={path!r}: expected a G1 motion clip (.npz) or a directory of them "
                         f"(see unilab/motion/clip.py; `unilab motion synth` writes one): {exc}") from None

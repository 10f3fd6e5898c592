"""Configuration of the `g1_walk_flat` velocity-tracking task.

Pure dataclasses (no torch / warp / mujoco imports) so that Hydra's ConfigStore
can register the schema cheaply. Reward weights are per second: the env
multiplies each weighted term by the control step dt, as in legged_gym / mjlab.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from unilab.checks import at_least_one, integer_in, non_negative, number_in, one_of, ordered_pair
from unilab.tasks.config_checks import (MAX_EPISODE_S, MAX_HEIGHT, MAX_SPEED, MAX_STD, check_control_steps,
                                        check_range_pairs, check_reward_weights)

ACTION_BOUNDS = ("joint_limits", "uniform")
# Bounds of the robustness draws: a removed mass above the pelvis's or torso's own (a few kg) would make
# a body massless; motor factors beyond 5 are no motor the G1 has.
MAX_ADDED_MASS_KG = 3.0
MAX_GAIN_SCALE = 5.0
MAX_CONTROL_STEPS = 10**9


@dataclass
class CommandConfig:
    lin_vel_x: tuple[float, float] = (-1.0, 1.0)  # m/s, base frame
    lin_vel_y: tuple[float, float] = (-0.5, 0.5)  # m/s, base frame
    ang_vel_z: tuple[float, float] = (-1.0, 1.0)  # rad/s
    resampling_time_s: tuple[float, float] = (4.0, 8.0)
    standing_fraction: float = 0.1  # share of resamples that command zero velocity
    min_lin_speed: float = 0.1  # m/s, planar commands slower than this are zeroed
    min_ang_speed: float = 0.1  # rad/s, yaw-rate commands slower than this are zeroed
    # Share of the (non-standing) resamples that keep one axis of the three, drawn uniformly, and zero
    # the other two: pure side steps and turns, slow ones included, which a box of combined commands
    # rarely holds.
    single_axis_fraction: float = 0.0


@dataclass
class RewardWeights:
    track_lin_vel_xy: float = 1.0
    # As heavy as the linear term: at half its weight turning was barely learned.
    track_ang_vel_z: float = 1.0
    lin_vel_z: float = -2.0
    ang_vel_xy: float = -0.05
    orientation: float = -1.0
    base_height: float = -10.0
    action_rate: float = -0.01
    joint_vel: float = -1.0e-3
    joint_acc: float = -2.5e-7
    joint_pos_limits: float = -5.0
    joint_deviation_hip: float = -1.0
    joint_deviation_upper: float = -0.1
    stand_still: float = -0.2
    # Joint speed (squared, rad^2/s^2) under a zero command: stand still instead of stepping in place.
    stand_still_motion: float = 0.0
    # Tilt of the torso (squared horizontal components of gravity in the torso frame): the pelvis term
    # (orientation) leaves the waist free to lean the torso forward.
    torso_orientation: float = 0.0
    feet_contact: float = 0.18
    feet_swing_height: float = -20.0
    feet_slip: float = -0.2
    # Feet closer than rewards.min_feet_distance (m, xy): keeps the legs from crossing each other
    # (the robot's geoms do not collide with each other).
    feet_distance: float = -10.0
    alive: float = 0.15
    termination: float = -100.0


@dataclass
class RewardConfig:
    weights: RewardWeights = field(default_factory=RewardWeights)
    tracking_std: float = 0.5  # exp(-err^2 / std^2)
    base_height_target: float | None = None  # None: the asset's default standing height
    gait_period_s: float = 0.8
    stance_fraction: float = 0.55  # share of the gait cycle a foot should be on the ground
    swing_height: float = 0.08  # m, target foot clearance while swinging
    soft_joint_limit_factor: float = 0.9
    min_feet_distance: float = 0.15  # m, between the sole points in the ground plane


@dataclass
class TerminationConfig:
    min_base_height: float = 0.3  # m, pelvis height
    max_tilt_rad: float = 1.0  # angle between the pelvis z axis and world up


@dataclass
class ObservationConfig:
    ang_vel_scale: float = 0.25
    joint_vel_scale: float = 0.05
    lin_vel_scale: float = 2.0  # critic only
    clip: float = 100.0
    # Uniform noise half-widths (in scaled units), multiplied by noise_scale (0 turns the noise off).
    noise_scale: float = 1.0
    ang_vel_noise: float = 0.05
    gravity_noise: float = 0.05
    joint_pos_noise: float = 0.01
    joint_vel_noise: float = 0.075


@dataclass
class RandomizationConfig:
    # Reset distribution.
    reset_joint_pos_noise: float = 0.1  # rad, uniform around the default pose
    reset_base_yaw: float = 3.14159  # rad, uniform heading in [-v, v]
    reset_base_vel_noise: float = 0.0  # m/s and rad/s, uniform
    # Per-env sliding friction of every geom, resampled on reset; null turns it off.
    friction_range: tuple[float, float] | None = (0.3, 1.2)
    # Every env is pushed at its own times, uniformly push_interval_s apart; null turns pushes off.
    push_interval_s: tuple[float, float] | None = (1.0, 3.0)
    # A push adds a planar velocity in a uniform direction, its size uniform in
    # [push_min_vel_xy, push_max_vel_xy] m/s.
    push_max_vel_xy: float = 0.5
    push_min_vel_xy: float = 0.0
    # Push curriculum: the push sizes grow linearly from push_curriculum_start times their full size to
    # the full size over the env's first push_curriculum_steps control steps (all worlds step together, so
    # this is the training's progress; 0: full size from the start).
    push_curriculum_steps: int = 0
    push_curriculum_start: float = 0.5
    # Mass (kg) added to the pelvis and to the torso, each drawn per env at every reset; null turns it off.
    added_mass_kg: tuple[float, float] | None = None
    # Motor strength: per env and actuator factors on the PD stiffness (kp) and damping (kd), drawn at every
    # reset; null turns them off.
    kp_scale: tuple[float, float] | None = None
    kd_scale: tuple[float, float] | None = None
    # The first episode of each env ends after a uniform share of its length, so that envs do not
    # reset in lockstep and the replay never holds one phase of the episode only.
    stagger_first_episode: bool = True


@dataclass
class G1WalkFlatConfig:
    # The env has a left-right mirror of its observations and actions (G1WalkFlatEnv.mirror), for algo.symmetry.
    MIRRORED: ClassVar[bool] = True
    name: str = "g1_walk_flat"
    num_envs: int = 4096
    episode_length_s: float = 20.0
    # How an action in [-1, 1] becomes a joint position target:
    #   "joint_limits": the default pose plus the action times the distance from the default to the
    #     soft joint limit on that side, so every target the joint can reach is reachable;
    #   "uniform": the default pose plus action_scale rad, the same for every joint.
    action_bounds: str = "joint_limits"
    action_scale: float = 0.5  # rad per unit action ("uniform" only)
    commands: CommandConfig = field(default_factory=CommandConfig)
    rewards: RewardConfig = field(default_factory=RewardConfig)
    terminations: TerminationConfig = field(default_factory=TerminationConfig)
    observations: ObservationConfig = field(default_factory=ObservationConfig)
    randomization: RandomizationConfig = field(default_factory=RandomizationConfig)

    def __post_init__(self) -> None:
        at_least_one("task", self, ("num_envs",))  # its upper bound: the simulator's sizes (unilab.config.sizes)
        number_in("task.episode_length_s", self.episode_length_s, 0, MAX_EPISODE_S, "seconds", low_open=True)
        one_of("task.action_bounds", self.action_bounds, ACTION_BOUNDS)
        number_in("task.action_scale", self.action_scale, 0, 2 * math.pi, "rad per unit action", low_open=True)
        c = self.commands
        for name in ("lin_vel_x", "lin_vel_y", "ang_vel_z"):
            ordered_pair(f"task.commands.{name}", getattr(c, name), -MAX_SPEED, MAX_SPEED)
        ordered_pair("task.commands.resampling_time_s", c.resampling_time_s, 0, MAX_EPISODE_S, low_open=True)
        number_in("task.commands.standing_fraction", c.standing_fraction, 0, 1, "a share of the resamples")
        for name in ("min_lin_speed", "min_ang_speed"):
            non_negative(f"task.commands.{name}", getattr(c, name), MAX_SPEED)
        number_in("task.commands.single_axis_fraction", c.single_axis_fraction, 0, 1, "a share of the resamples")
        self._check_rewards()
        number_in("task.terminations.min_base_height", self.terminations.min_base_height, 0, MAX_HEIGHT, "m")
        number_in("task.terminations.max_tilt_rad", self.terminations.max_tilt_rad, 0, math.pi, low_open=True)
        o = self.observations
        for name in ("ang_vel_scale", "joint_vel_scale", "lin_vel_scale", "noise_scale", "ang_vel_noise",
                     "gravity_noise", "joint_pos_noise", "joint_vel_noise"):
            non_negative(f"task.observations.{name}", getattr(o, name), MAX_STD)
        number_in("task.observations.clip", o.clip, 0, 1e6, "scaled units", low_open=True)
        rnd = self.randomization
        non_negative("task.randomization.reset_joint_pos_noise", rnd.reset_joint_pos_noise, math.pi)
        non_negative("task.randomization.reset_base_yaw", rnd.reset_base_yaw, 2 * math.pi)
        for name in ("reset_base_vel_noise", "push_max_vel_xy"):
            non_negative(f"task.randomization.{name}", getattr(rnd, name), MAX_SPEED)
        number_in("task.randomization.push_min_vel_xy", rnd.push_min_vel_xy, 0, rnd.push_max_vel_xy,
                  "m/s, at most push_max_vel_xy")
        integer_in("task.randomization.push_curriculum_steps", rnd.push_curriculum_steps, 0, MAX_CONTROL_STEPS,
                   "control steps; 0: no curriculum")
        number_in("task.randomization.push_curriculum_start", rnd.push_curriculum_start, 0, 1,
                  "a share of the full push")
        check_range_pairs("task.randomization", rnd)
        if rnd.added_mass_kg is not None:
            ordered_pair("task.randomization.added_mass_kg", rnd.added_mass_kg, -MAX_ADDED_MASS_KG, MAX_ADDED_MASS_KG)
        for name in ("kp_scale", "kd_scale"):
            if getattr(rnd, name) is not None:
                ordered_pair(f"task.randomization.{name}", getattr(rnd, name), 0, MAX_GAIN_SCALE, low_open=True)

    def _check_rewards(self) -> None:
        r = self.rewards
        check_reward_weights(r.weights)
        number_in("task.rewards.tracking_std", r.tracking_std, 0, MAX_STD, low_open=True)
        if r.base_height_target is not None:
            number_in("task.rewards.base_height_target", r.base_height_target, 0, MAX_HEIGHT, "m, or null",
                      low_open=True)
        number_in("task.rewards.gait_period_s", r.gait_period_s, 0, MAX_EPISODE_S, low_open=True)
        number_in("task.rewards.stance_fraction", r.stance_fraction, 0, 1, "a share of the gait cycle")
        non_negative("task.rewards.swing_height", r.swing_height, MAX_HEIGHT)
        number_in("task.rewards.soft_joint_limit_factor", r.soft_joint_limit_factor, 0, 1, low_open=True)
        non_negative("task.rewards.min_feet_distance", r.min_feet_distance, MAX_HEIGHT)

    def check_with_sim(self, sim: Any) -> None:
        """What depends on the simulator's settings: an episode lasts at least one control step."""
        check_control_steps("task.episode_length_s", self.episode_length_s, sim.control_dt)

    def build_model(self):
        """This task's MuJoCo model (compiled from the G1 spec in milliseconds, no Warp): what its env simulates."""
        from unilab.assets import g1

        return g1.build_g1_model()

    def transition_dims(self) -> tuple[int, int, int]:
        """(obs, critic obs, action) sizes of a transition, as the env's observation terms make them (a test
        holds them to the env's): the replay's row at compose, before any env exists."""
        from unilab.assets.g1 import G1_JOINT_NAMES

        j = len(G1_JOINT_NAMES)
        obs = 3 + 3 + 3 * j + 3 + 2  # angular velocity, gravity; joint pos, vel, last action; command; gait phase
        return obs, obs + 3 + 2 + 2 + 1, j  # critic: + linear velocity, foot contacts and heights, base height

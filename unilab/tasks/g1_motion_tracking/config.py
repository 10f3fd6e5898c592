"""Configuration of the `g1_motion_tracking` task (BeyondMimic-style whole-body motion tracking).

Pure dataclasses (no torch / warp / mujoco imports) so Hydra's ConfigStore can register the schema
cheaply. Reward weights are per second: the env multiplies each weighted term by the control dt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from unilab.checks import at_least_one


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
    termination: float = 0.0


@dataclass
class RewardConfig:
    weights: RewardWeights = field(default_factory=RewardWeights)
    # Standard deviations of the exp(-err^2 / std^2) kernels; body terms use the mean error over bodies.
    anchor_pos_std: float = 0.3  # m
    anchor_ori_std: float = 0.4  # rad
    body_pos_std: float = 0.3  # m
    body_ori_std: float = 0.4  # rad
    body_lin_vel_std: float = 1.0  # m/s
    body_ang_vel_std: float = 3.14  # rad/s
    soft_joint_limit_factor: float = 0.9


@dataclass
class TerminationConfig:
    anchor_height: float = 0.25  # m, |z_ref - z| of the anchor body
    anchor_gravity_z: float = 0.8  # difference of the z component of gravity in the anchor frame
    end_effector_height: float = 0.25  # m, any end effector's |z_ref - z|


@dataclass
class RandomizationConfig:
    # Uniform noise around the reference frame at reset; all off by default.
    reset_root_pos: float = 0.0  # m, x and y (z is left alone: the feet would sink into the floor)
    reset_root_yaw: float = 0.0  # rad
    reset_joint_pos: float = 0.0  # rad
    reset_vel: float = 0.0  # m/s and rad/s of the root, rad/s of the joints


@dataclass
class SamplingConfig:
    """Where episodes start (see unilab/tasks/g1_motion_tracking/sampling.py)."""

    mode: str = "adaptive"  # adaptive: failure-weighted bins; uniform: every start frame equally likely
    bin_s: float = 1.0  # seconds of clip per bin
    uniform_share: float = 0.1  # share of starts drawn from the floor (uniform over clips, then bins)
    smoothing: float = 0.001  # per-step weight of the newest failure counts in the bins' moving average
    blur: float = 0.8  # a failure in bin j also weighs bin j-k by blur**k ...
    blur_bins: int = 3  # ... for k < blur_bins, within the clip


SAMPLING_MODES = ("uniform", "adaptive")


def check_sampling(s: SamplingConfig) -> None:
    if s.mode not in SAMPLING_MODES:
        raise ValueError(f"task.sampling.mode={s.mode!r}: expected one of {', '.join(SAMPLING_MODES)}")
    if not s.bin_s > 0:
        raise ValueError(f"task.sampling.bin_s={s.bin_s}: must be positive")
    for key in ("uniform_share", "smoothing", "blur"):
        value = getattr(s, key)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"task.sampling.{key}={value}: must be in [0, 1]")
    if s.smoothing == 0.0:
        raise ValueError("task.sampling.smoothing=0: the failure rates would never change")
    if s.blur_bins < 1:
        raise ValueError(f"task.sampling.blur_bins={s.blur_bins}: must be at least 1")


@dataclass
class G1MotionTrackingConfig:
    name: str = "g1_motion_tracking"
    num_envs: int = 2048
    # npz clip, or a directory of them (all its *.npz, sorted by name, one frame rate); None: the embedded
    # default clip, synthesised on first use into $XDG_CACHE_HOME/unilab/motion
    # (or ~/.cache/unilab/motion).
    motion_file: Optional[str] = None
    episode_length_s: float = 10.0  # episodes also end (truncated) at the end of the clip
    # rad per unit action around the stand pose; the default clip needs up to 1 rad offsets (knee raise).
    action_scale: float = 1.25
    rewards: RewardConfig = field(default_factory=RewardConfig)
    terminations: TerminationConfig = field(default_factory=TerminationConfig)
    randomization: RandomizationConfig = field(default_factory=RandomizationConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)

    def __post_init__(self) -> None:
        at_least_one("task", self, ("num_envs",))
        check_sampling(self.sampling)
        if self.motion_file is not None:
            check_motion_file(self.motion_file)


def check_motion_file(path: str) -> None:
    """Load the clip(s) as the env will (every field, the bodies the task tracks): a missing or invalid file
    fails when the config is composed, not in the collector."""
    from unilab.assets.g1 import G1_ANCHOR_BODY, G1_END_EFFECTORS, G1_TRACKING_BODIES
    from unilab.motion.clip import MotionClipError
    from unilab.motion.library import load_motion_library

    try:
        load_motion_library(path, body_names=list(dict.fromkeys([*G1_TRACKING_BODIES, G1_ANCHOR_BODY,
                                                              *G1_END_EFFECTORS])))
    except MotionClipError as exc:
        raise ValueError(f"task.motion_file={path!r}: expected a G1 motion clip (.npz) or a directory of them "
                         f"(see unilab/motion/clip.py; `unilab motion synth` writes one): {exc}") from None

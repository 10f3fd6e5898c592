"""Published figures of the Unitree G1 29-DoF (rev 1.0): kinematics, inertia, joints, motors.

Source of every number in this file (read by hand, re-typed as data; no file copied):
  PyPI package ``mjlab`` 1.6.0 (wheel ``mjlab-1.6.0-py3-none-any.whl``):
    - ``mjlab/asset_zoo/robots/unitree_g1/xmls/g1.xml`` (model "g1_29dof_rev_1_0"):
      body offsets, inertials, joint axes and ranges, IMU site positions;
    - ``mjlab/asset_zoo/robots/unitree_g1/g1_constants.py``: rotor inertias and
      gear ratios of the Unitree motors, effort/velocity limits, the 10 Hz natural
      frequency / damping ratio 2 PD rule and the knees-bent keyframe.
Only the left side and the centre line are listed; the right side is its mirror
image through the sagittal (x-z) plane, built in ``unilab.assets.g1``.
"""

from __future__ import annotations

from typing import NamedTuple

Vec3 = tuple[float, float, float]
Quat = tuple[float, float, float, float]  # (w, x, y, z)


class Motor(NamedTuple):
    rotor_inertia: Vec3  # kg m^2 of the rotor and the two planetary stages
    gears: Vec3  # stage ratios (first is 1)
    effort_limit: float  # N m
    velocity_limit: float  # rad/s


class Link(NamedTuple):
    name: str
    parent: str
    pos: Vec3  # body frame in the parent frame
    quat: Quat | None
    mass: float
    com: Vec3
    inertia_quat: Quat  # principal axes frame
    diaginertia: Vec3
    joint: str | None  # hinge joint name (None: the free-floating pelvis)
    axis: str  # "x" | "y" | "z"
    range: tuple[float, float]
    motor: str  # key of MOTORS, or "5020x2" for the two-motor linkages


MOTORS: dict[str, Motor] = {
    "5020": Motor((0.139e-4, 0.017e-4, 0.169e-4), (1.0, 1.0 + 46 / 18, 1.0 + 56 / 16), 25.0, 37.0),
    "7520_14": Motor((0.489e-4, 0.098e-4, 0.533e-4), (1.0, 4.5, 1.0 + 48 / 22), 88.0, 32.0),
    "7520_22": Motor((0.489e-4, 0.109e-4, 0.738e-4), (1.0, 4.5, 5.0), 139.0, 20.0),
    "4010": Motor((0.068e-4, 0.0, 0.0), (1.0, 5.0, 5.0), 5.0, 22.0),
}

# PD rule of mjlab / BeyondMimic: kp = J w^2, kd = 2 zeta J w.
NATURAL_FREQ_HZ = 10.0
DAMPING_RATIO = 2.0

_NO_Q = None
PELVIS = Link(
    "pelvis", "world", (0.0, 0.0, 0.0), _NO_Q, 3.813, (0.0, 0.0, -0.07605),
    (1.0, 0.0, -0.000399148, 0.0), (0.010549, 0.0093089, 0.0079184),
    None, "z", (0.0, 0.0), "",
)

LEFT_LEG: tuple[Link, ...] = (
    Link("left_hip_pitch_link", "pelvis", (0.0, 0.064452, -0.1027), _NO_Q, 1.35,
         (0.002741, 0.047791, -0.02606), (0.954862, 0.293964, 0.0302556, 0.030122),
         (0.00181517, 0.00153422, 0.00116212),
         "left_hip_pitch_joint", "y", (-2.5307, 2.8798), "7520_14"),
    Link("left_hip_roll_link", "left_hip_pitch_link", (0.0, 0.052, -0.030465),
         (0.996179, 0.0, -0.0873386, 0.0), 1.52,
         (0.029812, -0.001045, -0.087934), (0.977808, -1.97119e-05, 0.205576, -0.0403793),
         (0.00254986, 0.00241169, 0.00148755),
         "left_hip_roll_joint", "x", (-0.5236, 2.9671), "7520_22"),
    Link("left_hip_yaw_link", "left_hip_roll_link", (0.025001, 0.0, -0.12412), _NO_Q, 1.702,
         (-0.057709, -0.010981, -0.15078), (0.600598, 0.15832, 0.223482, 0.751181),
         (0.00776166, 0.00717575, 0.00160139),
         "left_hip_yaw_joint", "z", (-2.7576, 2.7576), "7520_14"),
    Link("left_knee_link", "left_hip_yaw_link", (-0.078273, 0.0021489, -0.17734),
         (0.996179, 0.0, 0.0873386, 0.0), 1.932,
         (0.005457, 0.003964, -0.12074), (0.923418, -0.0327699, 0.0158246, 0.382067),
         (0.0113804, 0.0112778, 0.00146458),
         "left_knee_joint", "y", (-0.087267, 2.8798), "7520_22"),
    Link("left_ankle_pitch_link", "left_knee_link", (0.0, -9.4445e-05, -0.30001), _NO_Q, 0.074,
         (-0.007269, 0.0, 0.011137), (0.603053, 0.369225, 0.369225, 0.603053),
         (1.89e-05, 1.40805e-05, 6.9195e-06),
         "left_ankle_pitch_joint", "y", (-0.87267, 0.5236), "5020x2"),
    Link("left_ankle_roll_link", "left_ankle_pitch_link", (0.0, 0.0, -0.017558), _NO_Q, 0.608,
         (0.026505, 0.0, -0.016425), (-0.000481092, 0.728482, -0.000618967, 0.685065),
         (0.00167218, 0.0016161, 0.000217621),
         "left_ankle_roll_joint", "x", (-0.2618, 0.2618), "5020x2"),
)

WAIST: tuple[Link, ...] = (
    Link("waist_yaw_link", "pelvis", (0.0, 0.0, 0.0), _NO_Q, 0.214,
         (0.003494, 0.000233, 0.018034), (0.289697, 0.591001, -0.337795, 0.672821),
         (0.000163531, 0.000107714, 0.000102205),
         "waist_yaw_joint", "z", (-2.618, 2.618), "7520_14"),
    Link("waist_roll_link", "waist_yaw_link", (-0.0039635, 0.0, 0.044), _NO_Q, 0.086,
         (0.0, 2.3e-05, 0.0), (0.5, 0.5, -0.5, 0.5), (8.245e-06, 7.079e-06, 6.339e-06),
         "waist_roll_joint", "x", (-0.52, 0.52), "5020x2"),
    Link("torso_link", "waist_roll_link", (0.0, 0.0, 0.0), _NO_Q, 7.818,
         (0.00203158, 0.000339683, 0.184568), (0.999803, -6.03319e-05, 0.0198256, 0.00131986),
         (0.121847, 0.109825, 0.0273735),
         "waist_pitch_joint", "y", (-0.52, 0.52), "5020x2"),
)

LEFT_ARM: tuple[Link, ...] = (
    Link("left_shoulder_pitch_link", "torso_link", (0.0039563, 0.10022, 0.24778),
         (0.990264, 0.139201, 1.38722e-05, -9.86868e-05), 0.718,
         (0.0, 0.035892, -0.011628), (0.654152, 0.0130458, -0.326267, 0.68225),
         (0.000465864, 0.000432842, 0.000406394),
         "left_shoulder_pitch_joint", "y", (-3.0892, 2.6704), "5020"),
    Link("left_shoulder_roll_link", "left_shoulder_pitch_link", (0.0, 0.038, -0.013831),
         (0.990268, -0.139172, 0.0, 0.0), 0.643,
         (-0.000227, 0.00727, -0.063243), (0.701256, -0.0196223, -0.00710317, 0.712604),
         (0.000691311, 0.000618011, 0.000388977),
         "left_shoulder_roll_joint", "x", (-1.5882, 2.2515), "5020"),
    Link("left_shoulder_yaw_link", "left_shoulder_roll_link", (0.0, 0.00624, -0.1032), _NO_Q, 0.734,
         (0.010773, -0.002949, -0.072009), (0.716879, -0.0964829, -0.0679942, 0.687134),
         (0.00106187, 0.00103217, 0.000400661),
         "left_shoulder_yaw_joint", "z", (-2.618, 2.618), "5020"),
    Link("left_elbow_link", "left_shoulder_yaw_link", (0.015783, 0.0, -0.080518), _NO_Q, 0.6,
         (0.064956, 0.004454, -0.010062), (0.541765, 0.636132, 0.388821, 0.388129),
         (0.000443035, 0.000421612, 0.000259353),
         "left_elbow_joint", "y", (-1.0472, 2.0944), "5020"),
    Link("left_wrist_roll_link", "left_elbow_link", (0.1, 0.00188791, -0.01), _NO_Q, 0.085445,
         (0.0171394, 0.000537591, 4.8864e-07), (0.575338, 0.411667, -0.574906, 0.411094),
         (5.48211e-05, 4.96646e-05, 3.57798e-05),
         "left_wrist_roll_joint", "x", (-1.97222, 1.97222), "5020"),
    Link("left_wrist_pitch_link", "left_wrist_roll_link", (0.038, 0.0, 0.0), _NO_Q, 0.48405,
         (0.0229999, -0.00111685, -0.00111658), (0.249998, 0.661363, 0.293036, 0.643608),
         (0.000430353, 0.000429873, 0.000164648),
         "left_wrist_pitch_joint", "y", (-1.61443, 1.61443), "4010"),
    Link("left_wrist_yaw_link", "left_wrist_pitch_link", (0.046, 0.0, 0.0), _NO_Q, 0.254576,
         (0.0708244, 0.000191745, 0.00161742), (0.510571, 0.526295, 0.468078, 0.493188),
         (0.000646113, 0.000559993, 0.000147566),
         "left_wrist_yaw_joint", "z", (-1.61443, 1.61443), "4010"),
)

# IMU mounting points (in the pelvis / torso frames).
IMU_PELVIS_POS: Vec3 = (0.04525, 0.0, -0.08339)
IMU_TORSO_POS: Vec3 = (-0.03959, -0.00224, 0.14792)

# Knees-bent standing keyframe (g1_constants.py KNEES_BENT_KEYFRAME); both sides
# share pitch angles, roll angles are mirrored in unilab.assets.g1.
STAND_POSE_LEFT: dict[str, float] = {
    "left_hip_pitch_joint": -0.312,
    "left_knee_joint": 0.669,
    "left_ankle_pitch_joint": -0.363,
    "left_shoulder_pitch_joint": 0.2,
    "left_shoulder_roll_joint": 0.2,
    "left_elbow_joint": 0.6,
}

# Sum of the link masses of the description above (33.341142 kg). Unitree's spec
# sheet quotes "about 35 kg" for the G1 including its battery pack.
PUBLISHED_MASS_KG = 33.341142

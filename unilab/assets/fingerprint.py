"""What identifies a compiled robot model to a deployer: a hash of the figures the dynamics depend on, and the few
totals a reader can compare by eye. Exported with a policy (the `model` entry of its metadata) and checked again
when `unilab sim2sim` rebuilds the model (numpy and mujoco only)."""

from __future__ import annotations

import hashlib

import numpy as np

# The MjModel fields the hash covers: inertial figures, the kinematic tree, joints, actuators, collision geoms.
FINGERPRINT_FIELDS = (
    "body_mass", "body_inertia", "body_ipos", "body_iquat", "body_pos", "body_quat", "body_parentid",
    "jnt_type", "jnt_range", "jnt_axis", "dof_armature", "dof_damping", "dof_frictionloss",
    "actuator_gainprm", "actuator_biasprm", "actuator_forcerange",
    "geom_type", "geom_size", "geom_pos", "geom_quat", "geom_friction", "geom_contype", "geom_conaffinity",
)


def model_fingerprint(model) -> str:
    """sha256 (first 16 hex digits) of the model's figures, rounded to 6 significant digits so that a float32
    round trip or a compiler's last bit does not change it."""
    digest = hashlib.sha256()
    for name in FINGERPRINT_FIELDS:
        values = np.asarray(getattr(model, name), dtype=np.float64)
        digest.update(name.encode())
        digest.update(np.array2string(values.ravel(), precision=6, separator=",", threshold=10**9,
                                      floatmode="maxprec").encode())
    return digest.hexdigest()[:16]


def model_totals(model) -> dict:
    """Figures a reader can compare between two models: total mass, bodies, joints, collision geoms."""
    return {
        "mass_kg": round(float(np.sum(model.body_mass)), 4),
        "bodies": int(model.nbody),
        "joints": int(model.njnt),
        "geoms": int(model.ngeom),
    }

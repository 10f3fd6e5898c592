"""Per-world contact / constraint capacities derived from a model's collision geoms."""

from __future__ import annotations

import numpy as np

from unilab.sim.headless import mujoco

# Most contacts MuJoCo's primitive colliders make between a geom of this type and a plane.
_PLANE_CONTACTS = {
    mujoco.mjtGeom.mjGEOM_SPHERE: 1,
    mujoco.mjtGeom.mjGEOM_CAPSULE: 2,
    mujoco.mjtGeom.mjGEOM_ELLIPSOID: 1,
    mujoco.mjtGeom.mjGEOM_CYLINDER: 4,
    mujoco.mjtGeom.mjGEOM_BOX: 4,
}
_SELF_CONTACT_MARGIN = 8  # extra room for limb-limb contacts
_ROUND = 8


def _round_up(n: int) -> int:
    return int(-(-n // _ROUND) * _ROUND)


def derive_capacity(mjm: mujoco.MjModel, nconmax: int | None, njmax: int | None) -> tuple[int, int]:
    """(nconmax, njmax) per world: every collidable geom resting on the floor at once,
    plus a margin; rows = contacts x rows per contact + joint limits + equalities + friction."""
    if nconmax is None:
        colliding = (mjm.geom_contype | mjm.geom_conaffinity) != 0
        planes = colliding & (mjm.geom_type == mujoco.mjtGeom.mjGEOM_PLANE)
        bodies = colliding & ~planes
        per_geom = [_PLANE_CONTACTS.get(int(t), 4) for t in mjm.geom_type[bodies]]
        nconmax = _round_up(sum(per_geom) * max(1, int(planes.sum())) + _SELF_CONTACT_MARGIN)
    if njmax is None:
        condim = int(np.max(mjm.geom_condim, initial=1))
        pyramidal = mjm.opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL
        rows_per_contact = max(1, 2 * (condim - 1)) if pyramidal else condim
        limits = int(mjm.jnt_limited.sum())
        friction = int((mjm.dof_frictionloss > 0).sum())
        equality = 6 * mjm.neq
        njmax = _round_up(nconmax * rows_per_contact + limits + friction + equality)
    return int(nconmax), int(njmax)

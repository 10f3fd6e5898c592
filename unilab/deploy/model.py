"""The MuJoCo model a policy is deployed on, set up as its metadata's `model` says (step, solver, actuators).

- `ours`: the G1 that training simulated, rebuilt by unilab.assets.g1; its fingerprint is checked against the
  metadata's (a different one means the asset changed since the export).
- `mjlab`: the Unitree G1 MJCF of mjlab 1.6.0's wheel (unilab.assets.mjlab_g1; meshes, its own masses, inertias
  and collision capsules, no actuators), given position actuators with the metadata's gains and effort limits and
  the metadata's armature, each mapped by joint name, and a floor like ours.
"""

from __future__ import annotations

import math

import numpy as np

from unilab.assets.fingerprint import model_fingerprint, model_totals
from unilab.sim.headless import mujoco

from .policy import DeployError

MODELS = ("ours", "mjlab")
DEFAULT_TIMESTEP = 0.005  # schema 1 metadata names no model: the G1's own step


def _joint_dofs(model: mujoco.MjModel, names: list[str]) -> np.ndarray:
    ids = []
    for name in names:
        j = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        if j < 0:
            raise DeployError(f"the model has no joint {name!r} that the policy drives")
        ids.append(j)
    return np.asarray(ids)


def set_actuation(spec: mujoco.MjSpec, meta: dict) -> None:
    """Position actuators (kp, kd, effort limit) and armature on the joints the metadata names, in its actuator
    order, replacing any the spec has: target = ctrl, torque = kp (target - q) - kd qdot, clipped to the limit."""
    model = meta["model"] or {}
    effort = model.get("effort_limit")
    armature = model.get("armature")
    if effort is None or armature is None:
        raise DeployError("the policy's metadata names no effort limits or armature (schema 1); re-export it with "
                          "`unilab export` to run it on another model")
    for act in list(spec.actuators):
        spec.delete(act)
    joints = {j.name: j for j in spec.joints}
    for name, kp, kd, limit, arm in zip(meta["joint_names"], meta["kp"], meta["kd"], effort, armature, strict=True):
        if name not in joints:
            raise DeployError(f"the model has no joint {name!r} that the policy drives")
        joints[name].armature = float(arm)
        act = spec.add_actuator(name=name, target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
        act.gaintype = mujoco.mjtGain.mjGAIN_FIXED
        act.biastype = mujoco.mjtBias.mjBIAS_AFFINE
        act.gainprm[0] = kp
        act.biasprm[1] = -kp
        act.biasprm[2] = -kd
        act.ctrllimited = mujoco.mjtLimited.mjLIMITED_FALSE
        act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.forcerange = (-limit, limit)


def _set_options(spec: mujoco.MjSpec, meta: dict) -> None:
    model = meta["model"] or {}
    spec.option.timestep = float(model.get("timestep", DEFAULT_TIMESTEP))
    if "integrator" in model:
        spec.option.integrator = getattr(mujoco.mjtIntegrator, model["integrator"])
    for key in ("iterations", "ls_iterations"):
        if key in model:
            setattr(spec.option, key, int(model[key]))


def decimation(meta: dict, model: mujoco.MjModel) -> int:
    """Physics steps per policy step."""
    if meta["model"] is not None:
        return int(meta["model"]["decimation"])
    return max(1, int(round(meta["control_dt"] / model.opt.timestep)))


def ours_spec(meta: dict) -> mujoco.MjSpec:
    from unilab.assets import g1

    builder = (meta["model"] or {}).get("builder", "unilab.assets.g1.build_g1_model")
    if builder != "unilab.assets.g1.build_g1_model":
        raise DeployError(f"the policy was trained on a model built by {builder}; `--model ours` builds the G1")
    spec = g1.build_g1_spec(**(meta["model"] or {}).get("kwargs", {}))
    _set_options(spec, meta)
    return spec


def mjlab_spec(meta: dict) -> mujoco.MjSpec:
    """mjlab's G1 with our actuators and armature by joint name, a floor, and collisions with the floor only (as
    ours, unless the policy was trained with self-collisions)."""
    from unilab.assets import mjlab_g1
    from unilab.assets.wheels import WheelUnavailable

    try:
        xml = mjlab_g1.g1_xml()
    except WheelUnavailable as exc:
        raise DeployError(f"--model mjlab: {exc}") from None
    spec = mujoco.MjSpec.from_file(str(xml))
    self_collisions = bool((meta["model"] or {}).get("kwargs", {}).get("self_collisions", False))
    for geom in spec.geoms:
        if geom.contype or geom.conaffinity:
            geom.contype, geom.conaffinity = (2, 3) if self_collisions else (0, 1)
    spec.worldbody.add_geom(name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=(0.0, 0.0, 0.05),
                            contype=1, conaffinity=0, condim=3)
    set_actuation(spec, meta)
    _set_options(spec, meta)
    return spec


def build_model(meta: dict, kind: str) -> tuple[mujoco.MjModel, list[str]]:
    """The model and notes on it for the console (its figures; a fingerprint that differs from the metadata's)."""
    if kind not in MODELS:
        raise DeployError(f"--model {kind}: choose from {', '.join(MODELS)}")
    model = (ours_spec if kind == "ours" else mjlab_spec)(meta).compile()
    notes = [f"model {kind}: {_figures(model)}"]
    expected = (meta["model"] or {}).get("fingerprint")
    if kind == "ours" and expected and model_fingerprint(model) != expected:
        notes.append(f"note: this G1 (fingerprint {model_fingerprint(model)}) differs from the one the policy was "
                     f"trained on ({expected}): the asset changed since the export")
    return model, notes


def _figures(model: mujoco.MjModel) -> str:
    t = model_totals(model)
    collide = int(np.sum((model.geom_contype | model.geom_conaffinity) > 0)) - 1  # less the floor
    return (f"{t['mass_kg']:.2f} kg, {t['bodies']} bodies, {collide} collision geoms, "
            f"timestep {model.opt.timestep:g} s, {mujoco.mjtIntegrator(model.opt.integrator).name}")


def _body_figures(model: mujoco.MjModel) -> dict[str, tuple[float, float]]:
    return {model.body(b).name: (float(model.body_mass[b]), float(np.sum(model.body_inertia[b])))
            for b in range(1, model.nbody)}


def _foot_geoms(model: mujoco.MjModel, body: str) -> list[str]:
    b = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, body)
    kinds = [mujoco.mjtGeom(model.geom_type[g]).name[len("mjGEOM_"):].lower()
             for g in range(model.ngeom) if model.geom_bodyid[g] == b and model.geom_conaffinity[g]]
    return [f"{kinds.count(k)} {k}" for k in sorted(set(kinds))]


def compare(ours: mujoco.MjModel, theirs: mujoco.MjModel) -> list[str]:
    """How two G1 models differ, as console lines: masses, inertias, kinematics, collision geoms, feet."""
    a, b = _body_figures(ours), _body_figures(theirs)
    common = [n for n in a if n in b]
    mass = max(common, key=lambda n: abs(a[n][0] - b[n][0]))
    inertia = max(common, key=lambda n: abs(math.log(max(a[n][1], 1e-12) / max(b[n][1], 1e-12))))
    # the root's position is where the file puts the robot, no part of its kinematics
    linked = [n for n in common if ours.body(n).parentid[0] != 0] or common
    offset = max(linked, key=lambda n: float(np.linalg.norm(ours.body(n).pos - theirs.body(n).pos)))
    ranges = [n for n in (ours.joint(j).name for j in range(ours.njnt))
              if mujoco.mj_name2id(theirs, mujoco.mjtObj.mjOBJ_JOINT, n) >= 0
              and not np.allclose(ours.joint(n).range, theirs.joint(n).range, atol=1e-3)]
    lines = [f"ours vs mjlab: total mass {np.sum(ours.body_mass):.2f} vs {np.sum(theirs.body_mass):.2f} kg; bodies "
             f"only in one: {', '.join(sorted(set(a) ^ set(b))) or 'none'}",
             f"  largest body mass difference: {mass} {a[mass][0]:.3f} vs {b[mass][0]:.3f} kg; largest inertia ratio "
             f"(trace): {inertia} x{b[inertia][1] / max(a[inertia][1], 1e-12):.3f}",
             f"  kinematics: largest body offset difference {offset} "
             f"{1000 * np.linalg.norm(ours.body(offset).pos - theirs.body(offset).pos):.1f} mm; joint ranges differ "
             f"on {len(ranges)} joints"]
    for name, model in (("ours", ours), ("mjlab", theirs)):
        types = [mujoco.mjtGeom(t).name[len("mjGEOM_"):].lower()
                 for t, c in zip(model.geom_type, model.geom_conaffinity) if c and t != mujoco.mjtGeom.mjGEOM_PLANE]
        feet = "; ".join(f"{side} {', '.join(_foot_geoms(model, f'{side}_ankle_roll_link'))}"
                         for side in ("left", "right"))
        lines.append(f"  {name}: collision geoms " + ", ".join(f"{types.count(k)} {k}" for k in sorted(set(types)))
                     + f"; feet: {feet}")
    return lines

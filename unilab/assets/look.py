"""How the G1 looks in a render: Unitree's meshes on our bodies, a sky, a checkered floor and a light that casts
shadows. Only a render-side copy of a model is dressed; the model a task simulates stays as it is.

`dress(spec)` adds to a spec, by body name, the visual mesh geoms of mjlab 1.6.0's G1 (`xmls/g1.xml`, fetched at
first use by unilab.assets.mjlab_g1; nothing is copied into the repository), with that MJCF's poses and materials.
Our G1's body frames are Unitree's, so each mesh sits where its link is. The meshes are visual only: no contacts
(contype = conaffinity = 0), no mass (density 0; the bodies' inertials are explicit anyway) and geom group 2,
which MuJoCo shows by default; the collision primitives keep group 3, which it hides. `scene_option(model,
collision=True)` swaps the two. Without the wheel (offline, no such version) the dressed model has no meshes and
shows its collision geoms, and one console line says why.

`render_model(mj_model)` is the dressed G1 for the model an env simulates (rebuilt from our spec, checked to have
the same bodies, joints and geoms, so that its qpos is the env's); it is compiled once per process.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from unilab.assets import g1, mjlab_g1, wheels
from unilab.sim.headless import mujoco

VISUAL_GROUP = 2  # MuJoCo shows geom groups 0-2 by default
COLLISION_GROUP = g1.G1_COLLISION_GROUP
FLOOR_MATERIAL = "look_floor"
SKY_TEXTURE = "look_sky"
SKY_RGB = ((0.45, 0.62, 0.82), (0.93, 0.95, 0.98))  # zenith, horizon
FLOOR_RGB = ((0.32, 0.36, 0.42), (0.26, 0.30, 0.36))  # the checker's two squares
FLOOR_LINES = (0.55, 0.6, 0.66)  # each square's edge: one line per metre with FLOOR_REPEAT = 1
FLOOR_REPEAT = 1.0  # texture repeats per metre (texuniform)
LIGHT_HEIGHT = 3.0  # the shadow light above the robot's centre of mass (m)
SHADOW_SIZE = 2048  # shadow map side (MuJoCo's default 4096): ~3 mm a texel under the light's cone


def _print(line: str) -> None:
    print(line, flush=True)  # before a download that takes seconds


@dataclass(frozen=True)
class VisualGeom:
    """One visual mesh geom of mjlab's G1, in its body's frame."""

    body: str
    mesh: str
    pos: tuple[float, float, float]
    quat: tuple[float, float, float, float]
    material: str


@dataclass(frozen=True)
class Meshes:
    """What dressing needs of mjlab's G1, read once per process: its visual geoms, their meshes' files
    (name -> (file name, scale)), the files' bytes and the materials (name -> rgba, specular, shininess)."""

    geoms: tuple[VisualGeom, ...]
    meshes: dict[str, tuple[str, tuple[float, float, float]]]
    files: dict[str, bytes]
    materials: dict[str, tuple[tuple[float, ...], float, float]]


def read_meshes(xml: Path) -> Meshes:
    """The visual mesh geoms of an MJCF (mesh geoms that touch nothing) with their meshes and materials."""
    src = mujoco.MjSpec.from_file(str(xml))
    mesh_dir = Path(src.modelfiledir) / src.meshdir
    geoms, meshes, files, materials = [], {}, {}, {}
    for geom in src.geoms:
        if geom.type != mujoco.mjtGeom.mjGEOM_MESH or geom.contype or geom.conaffinity:
            continue
        if geom.alt.type == mujoco.mjtOrientation.mjORIENTATION_QUAT:
            quat = tuple(float(v) for v in geom.quat)
        else:  # euler, axisangle, ... in the MJCF: the quaternion it stands for
            quat = tuple(mujoco.MjSpec.resolve_orientation(src.compiler.degree, src.compiler.eulerseq, geom.alt))
        geoms.append(VisualGeom(geom.parent.name, geom.meshname, tuple(float(v) for v in geom.pos), quat,
                                geom.material))
        if geom.meshname not in meshes:
            mesh = src.mesh(geom.meshname)
            name = Path(mesh.file).name
            meshes[geom.meshname] = (name, tuple(float(v) for v in mesh.scale))
            files[name] = (mesh_dir / mesh.file).read_bytes()
        if geom.material and geom.material not in materials:
            mat = src.material(geom.material)
            materials[geom.material] = (tuple(float(v) for v in mat.rgba), float(mat.specular), float(mat.shininess))
    return Meshes(tuple(geoms), meshes, files, materials)


_MESHES: dict[tuple, Meshes | str] = {}  # per wheel cache and index: the meshes, or why there are none


def unitree_meshes(*, offline: bool = False, say: Callable[[str], None] = _print) -> Meshes | str:
    """mjlab's G1 meshes (fetched at first use, read once per process), or a sentence saying why there are none."""
    key = (str(wheels.cache_root()), os.environ.get(wheels.INDEX_ENV), offline)
    if key not in _MESHES:
        if not wheels.is_unpacked(mjlab_g1.MJLAB_G1) and not offline:
            say(f"unilab: fetching the G1 meshes ({mjlab_g1.MJLAB_G1.requirement}) into {wheels.cache_root()}")
        try:
            _MESHES[key] = read_meshes(mjlab_g1.g1_xml(offline=offline))
        except (wheels.WheelUnavailable, OSError, ValueError) as exc:  # ValueError: mujoco cannot parse the MJCF
            _MESHES[key] = str(exc)
    return _MESHES[key]


def _has_meshes(spec: mujoco.MjSpec) -> bool:
    return any(geom.type == mujoco.mjtGeom.mjGEOM_MESH for geom in spec.geoms)


def add_meshes(spec: mujoco.MjSpec, meshes: Meshes) -> int:
    """The visual geoms onto the spec's bodies of the same names (bodies it lacks get none); how many."""
    bodies = {body.name: body for body in spec.bodies}
    wanted = [g for g in meshes.geoms if g.body in bodies]
    assets = dict(spec.assets)
    for name in {g.mesh for g in wanted}:
        file, scale = meshes.meshes[name]
        assets[file] = meshes.files[file]
        spec.add_mesh(name=name, file=file, scale=scale)
    spec.assets = assets  # the bytes read once: compiling reads no file
    for name in {g.material for g in wanted if g.material}:
        rgba, specular, shininess = meshes.materials[name]
        spec.add_material(name=name, rgba=rgba, specular=specular, shininess=shininess)
    for g in wanted:
        bodies[g.body].add_geom(
            type=mujoco.mjtGeom.mjGEOM_MESH, meshname=g.mesh, pos=g.pos, quat=g.quat, material=g.material,
            contype=0, conaffinity=0, density=0.0, mass=0.0, group=VISUAL_GROUP,
        )
    return len(wanted)


def dress_scene(spec: mujoco.MjSpec) -> mujoco.MjSpec:
    """A gradient sky, a checkered floor (the spec's plane geoms) and a light above the robot that casts shadows.
    Nothing here touches a body's mass, a joint or a contact."""
    spec.add_texture(name=SKY_TEXTURE, type=mujoco.mjtTexture.mjTEXTURE_SKYBOX,
                     builtin=mujoco.mjtBuiltin.mjBUILTIN_GRADIENT, rgb1=SKY_RGB[0], rgb2=SKY_RGB[1],
                     width=512, height=3072)
    spec.add_texture(name=FLOOR_MATERIAL, type=mujoco.mjtTexture.mjTEXTURE_2D,
                     builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER, mark=mujoco.mjtMark.mjMARK_EDGE,
                     rgb1=FLOOR_RGB[0], rgb2=FLOOR_RGB[1], markrgb=FLOOR_LINES, width=300, height=300)
    # No reflectance: a mirrored floor draws the scene twice, and the meshes are most of a frame's cost.
    floor = spec.add_material(name=FLOOR_MATERIAL, texrepeat=(FLOOR_REPEAT, FLOOR_REPEAT), texuniform=True)
    floor.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = FLOOR_MATERIAL
    for geom in spec.worldbody.geoms:
        if geom.type == mujoco.mjtGeom.mjGEOM_PLANE:
            geom.material = FLOOR_MATERIAL
    spec.visual.headlight.ambient = (0.3, 0.3, 0.3)
    spec.visual.headlight.diffuse = (0.45, 0.45, 0.45)
    spec.visual.headlight.specular = (0.0, 0.0, 0.0)
    spec.visual.rgba.haze = (*SKY_RGB[1], 1.0)
    spec.visual.quality.shadowsize = SHADOW_SIZE
    root = _root_body(spec)
    spec.worldbody.add_light(name="look_sun", type=mujoco.mjtLightType.mjLIGHT_DIRECTIONAL, dir=(-0.3, 0.3, -1.0),
                             diffuse=(0.35, 0.35, 0.35), castshadow=False)
    if root is not None:
        # A spotlight that keeps its offset from the robot's centre of mass: its shadow follows a walking robot,
        # where a fixed light's shadow map would cover only the start. From behind the default camera's left, so
        # the shadow falls to the robot's side in view.
        root.add_light(name="look_shadow", type=mujoco.mjtLightType.mjLIGHT_SPOT,
                       mode=mujoco.mjtCamLight.mjCAMLIGHT_TRACKCOM, pos=(-1.0, -1.2, LIGHT_HEIGHT), dir=(1.0, 1.2, -LIGHT_HEIGHT), cutoff=45.0, exponent=1.0,
                       diffuse=(0.6, 0.6, 0.6), castshadow=True)
    return spec


def _root_body(spec: mujoco.MjSpec):
    """The body of the spec's free joint (the robot's root), or None."""
    for joint in spec.joints:
        if joint.type == mujoco.mjtJoint.mjJNT_FREE:
            return joint.parent
    return None


def dress(spec: mujoco.MjSpec, *, collision: bool = False, offline: bool = False,
          say: Callable[[str], None] = _print) -> mujoco.MjSpec:
    """The spec dressed for rendering, in place (and returned): Unitree's meshes on the G1's bodies (none with
    `collision`, or when the wheel cannot be had: `say` tells why) and the scene (dress_scene). A spec that has
    meshes already (mjlab's own G1) keeps them. Render it with `scene_option(model, collision=...)`."""
    if not collision and not _has_meshes(spec):
        meshes = unitree_meshes(offline=offline, say=say)
        if isinstance(meshes, str):
            say(f"unilab: the G1 is drawn with its collision geoms: its meshes are not available ({meshes})")
        else:
            add_meshes(spec, meshes)
    return dress_scene(spec)


def has_visual_meshes(model: mujoco.MjModel) -> bool:
    return bool(np.any((model.geom_type == mujoco.mjtGeom.mjGEOM_MESH) & (model.geom_group == VISUAL_GROUP)))


def scene_option(model: mujoco.MjModel, *, collision: bool = False) -> mujoco.MjvOption:
    """Which geoms a render shows: the meshes, or the collision geoms with `collision` or when the model has no
    meshes (not dressed, or dressed without the wheel)."""
    option = mujoco.MjvOption()
    show_collision = collision or not has_visual_meshes(model)
    option.geomgroup[VISUAL_GROUP] = int(not show_collision)
    option.geomgroup[COLLISION_GROUP] = int(show_collision)
    return option


def set_geom_groups(geomgroup, model: mujoco.MjModel, *, collision: bool = False) -> None:
    """`scene_option`'s groups written into an existing geomgroup array (a viewer's `opt.geomgroup`)."""
    geomgroup[:] = scene_option(model, collision=collision).geomgroup


def is_dressed(model: mujoco.MjModel) -> bool:
    """Whether the model's floor has the look's texture (the renderer then draws no grid lines of its own)."""
    mat = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_MATERIAL, FLOOR_MATERIAL)
    return mat >= 0 and bool(np.any(model.geom_matid == mat))


def _names(model: mujoco.MjModel, obj, count: int) -> list[str]:
    return [mujoco.mj_id2name(model, obj, i) or "" for i in range(count)]


def _layout(model: mujoco.MjModel) -> tuple:
    """What a render model must share with the simulated one: bodies, joints and their qpos addresses, and the
    named geoms (the dressing adds only unnamed ones)."""
    geoms = [n for n in _names(model, mujoco.mjtObj.mjOBJ_GEOM, model.ngeom) if n]
    return (model.nq, _names(model, mujoco.mjtObj.mjOBJ_BODY, model.nbody),
            _names(model, mujoco.mjtObj.mjOBJ_JOINT, model.njnt), model.jnt_qposadr.tolist(), geoms)


_RENDER_MODELS: dict[tuple, mujoco.MjModel] = {}


def render_model(mj_model: mujoco.MjModel, *, collision: bool = False, offline: bool = False,
                 say: Callable[[str], None] = _print) -> mujoco.MjModel:
    """A model to render `mj_model`'s states with: our G1 rebuilt and dressed (same bodies, joints and named
    geoms, so the env's qpos poses it), compiled once per process; a copy each call, so a caller may change its
    visual settings. A model that is not our G1 is returned as it is (its own geoms, no scene)."""
    self_collisions = mujoco.mj_name2id(mj_model, mujoco.mjtObj.mjOBJ_SENSOR, g1.G1_SELF_COLLISION_SENSOR) >= 0
    with_floor = mujoco.mj_name2id(mj_model, mujoco.mjtObj.mjOBJ_GEOM, "floor") >= 0
    key = (collision, offline, self_collisions, with_floor, str(wheels.cache_root()),
           os.environ.get(wheels.INDEX_ENV))
    if key not in _RENDER_MODELS:
        spec = g1.build_g1_spec(with_floor=with_floor, self_collisions=self_collisions)
        if _layout(spec.compile()) != _layout(mj_model):
            say("unilab: the model is not unilab's G1 (other bodies, joints or geoms): it is drawn as it is")
            return mj_model
        try:
            _RENDER_MODELS[key] = dress(spec, collision=collision, offline=offline, say=say).compile()
        except ValueError as exc:  # a mesh file MuJoCo cannot read (a broken download)
            say(f"unilab: the G1 is drawn with its collision geoms: its meshes do not compile ({exc}); delete "
                f"{wheels.cache_root()} to fetch them again")
            spec = g1.build_g1_spec(with_floor=with_floor, self_collisions=self_collisions)
            _RENDER_MODELS[key] = dress(spec, collision=True, say=say).compile()
    return copy.copy(_RENDER_MODELS[key])

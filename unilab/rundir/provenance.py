"""What produced a run, for runtime_manifest.json: the unilab source checkout (git commit, dirty flag) and the
versions of the libraries and the driver underneath.

Nothing here imports torch, Warp or MuJoCo (the launcher never does): versions come from the installed
packages' metadata, torch's CUDA version from its `torch/version.py` read as text, the driver's through NVML
(which creates no CUDA context). Every lookup answers None when it cannot tell (no git, not a checkout, no
driver, a CPU host) and never raises.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import subprocess
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict

SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the unilab package
GIT_TIMEOUT_S = 5.0
DISTRIBUTIONS = {"torch": "torch", "warp": "warp-lang", "mujoco": "mujoco", "mujoco_warp": "mujoco-warp"}


class SourceEvidence(BaseModel):
    """The unilab source the run came from: None when it is not a git checkout (an installed wheel) or git
    is missing."""

    model_config = ConfigDict(extra="forbid")

    git_commit: Optional[str] = None
    git_dirty: Optional[bool] = None  # tracked files modified or untracked files present (git status)


class VersionEvidence(BaseModel):
    """Installed versions (None: not installed, or no driver on this host)."""

    model_config = ConfigDict(extra="forbid")

    torch: Optional[str] = None
    warp: Optional[str] = None
    mujoco: Optional[str] = None
    mujoco_warp: Optional[str] = None
    cuda: Optional[str] = None  # the CUDA version torch was built with (torch.version.cuda); None for a CPU build
    nvidia_driver: Optional[str] = None  # through NVML; None on a host without the driver


def _git(root: Path, *args: str) -> Optional[str]:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):  # git missing, hung
        return None
    return done.stdout if done.returncode == 0 else None


def source_evidence(root: Path = SOURCE_ROOT) -> SourceEvidence:
    top = _git(root, "rev-parse", "--show-toplevel")
    # A checkout of unilab itself, not an installed copy inside some other repository (a venv in a project).
    if top is None or Path(top.strip()).resolve() != Path(root).resolve():
        return SourceEvidence()
    commit = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain")
    return SourceEvidence(git_commit=commit.strip() if commit else None,
                          git_dirty=None if status is None else bool(status.strip()))


def _distribution_version(name: str) -> Optional[str]:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def torch_cuda_version() -> Optional[str]:
    """torch.version.cuda without importing torch: the assignment in its version.py."""
    try:
        spec = importlib.util.find_spec("torch")
        locations = list(spec.submodule_search_locations or []) if spec else []
        if not locations:
            return None
        tree = ast.parse((Path(locations[0]) / "version.py").read_text())
    except (OSError, SyntaxError, ValueError, ImportError):
        return None
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(
            node, "target", None)
        if isinstance(target, ast.Name) and target.id == "cuda" and node.value is not None:
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            return value if isinstance(value, str) else None
    return None


def nvidia_driver_version(nvml=None) -> Optional[str]:
    from unilab.mps.nvml import SystemNvml

    try:
        return (nvml or SystemNvml()).driver_version()
    except Exception:  # NvmlUnavailable, or an NVML error of a driver in a bad state: recorded as unknown
        return None


def version_evidence(nvml=None) -> VersionEvidence:
    return VersionEvidence(**{key: _distribution_version(dist) for key, dist in DISTRIBUTIONS.items()},
                           cuda=torch_cuda_version(), nvidia_driver=nvidia_driver_version(nvml))

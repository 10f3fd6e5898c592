"""Where compiled kernels are kept between runs, so that only the first run on a machine compiles them.

A cold start spends most of its time compiling: Warp's kernels for the MJWarp physics (the collector) and
TorchInductor's and Triton's for the compiled losses (the learner). Each library has its own default place
(Warp under ~/.cache/warp, Inductor and Triton under /tmp, which a cluster node often loses between jobs).
unilab points all three at one root, `$UNILAB_CACHE_DIR/kernels` (default `~/.cache/unilab/kernels`), in the
environment its learner, collector and play processes start with, so that one directory can be kept, shared
or pre-warmed (`unilab warmup`). A variable the user set for a library itself is left as it is.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

CACHE_ROOT_ENV = "UNILAB_CACHE_DIR"
LIBRARY_DIRS = {"WARP_CACHE_PATH": "warp", "TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}


def kernel_cache_root(env: Mapping[str, str] = os.environ) -> Path:
    return Path(env.get(CACHE_ROOT_ENV) or Path.home() / ".cache" / "unilab") / "kernels"


def kernel_cache_env(env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The variables a child starts with: each library's cache under the root, unless the user set it."""
    root = kernel_cache_root(env)
    return {var: str(root / sub) for var, sub in LIBRARY_DIRS.items() if not env.get(var)}


def kernel_cache_dirs(env: Mapping[str, str] = os.environ) -> dict[str, Path]:
    """Each library's cache directory as a child sees it (the user's own where set)."""
    wanted = {**kernel_cache_env(env), **{var: env[var] for var in LIBRARY_DIRS if env.get(var)}}
    return {var: Path(wanted[var]) for var in LIBRARY_DIRS}


def size_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0

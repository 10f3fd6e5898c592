"""The embedded default clip: synthesised on first use into a cache directory, keyed by a content hash.

No binary data is committed: the file name carries a hash of the synth parameters, the synth version
and the G1 model description, so a change to any of them makes a fresh clip. Works offline.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

DEFAULT_SYNTH_PARAMS = {"preset": "default", "duration": 10.0, "fps": 50.0, "seed": None}


def cache_dir() -> Path:
    """$UNILAB_CACHE_DIR/motion (the root of unilab's other caches: kernels, wheels), else
    $XDG_CACHE_HOME/unilab/motion, else ~/.cache/unilab/motion."""
    if os.environ.get("UNILAB_CACHE_DIR"):
        return Path(os.environ["UNILAB_CACHE_DIR"]) / "motion"
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "unilab" / "motion"


def default_clip_path(directory: Optional[Path] = None) -> Path:
    """Path of the default clip, synthesising it if it is not cached yet."""
    from unilab.motion.clip import save_motion_clip
    from unilab.motion.synth import synth_params_hash, synthesize

    directory = Path(directory) if directory is not None else cache_dir()
    path = directory / f"g1_default_{synth_params_hash(**DEFAULT_SYNTH_PARAMS)}.npz"
    if not path.exists():
        # save_motion_clip renames into place, so concurrent first uses each write a whole file.
        save_motion_clip(synthesize(**DEFAULT_SYNTH_PARAMS), path)
    return path

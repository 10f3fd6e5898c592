"""Starts the rank-local learner and collector processes for a prepared run."""

from __future__ import annotations

import sys

from omegaconf import DictConfig

from .prepare import PreparedRun


def launch(prepared: PreparedRun, cfg: DictConfig) -> int:
    mode = prepared.manifest.cuda_process_sharing
    print(
        f"unilab: run {prepared.run_dir} (cuda_process_sharing configured={mode.configured} "
        f"validated={mode.validated})",
        file=sys.stderr,
    )
    return 0

"""The names inside a run directory, in one place: every writer and reader takes them from here.

    <training.run.log_dir>/<run name>/
      run_config.json        run_config.py: the resolved config
      runtime_manifest.json  manifest.py: how the run executed (ranks, PIDs, MPS evidence)
      metrics.jsonl          metrics.py: one row per iteration (rank 0; rank r under rank_<r>/)
      rank_<r>/              rank r > 0: its metrics; under torchrun or srun also its own run_config.json,
                             runtime_manifest.json, run_summary.json and run.lock (ranks.py)
      tensorboard/           metrics.py: the same rows for TensorBoard
      wandb/                 wandb_sink.py: the same rows for W&B (training.outputs.logger; written by wandb)
      checkpoints/           checkpoint.py: iter_NNNNNNN.pt and the latest.pt link
      run_summary.json       summary.py: how the run ended
      policy.onnx            training.outputs.export_onnx=true (with unilab export's metadata)
      logs/                  the children's stderr (learner.stderr, collector.stderr; other ranks by name)
      videos/                training.outputs.video_interval: clips of world 0 (unilab.viz.clip)
      play.json              unilab.runtime.play
      eval.json              unilab.eval (default place; `--out` may put it elsewhere)
      no_mps_pipe/           training.mps.block_ambient_mps: an empty MPS pipe directory
      segments/<n>/          create.py: the evidence of a resumed run's earlier segments
      run.lock               lock.py: flock'ed by the launcher for the run's life (holds its pid)
"""

from __future__ import annotations

import os
from pathlib import Path

RUN_CONFIG_FILE = "run_config.json"
MANIFEST_FILE = "runtime_manifest.json"
SUMMARY_FILE = "run_summary.json"
METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
CHECKPOINT_DIR = "checkpoints"
LATEST_CHECKPOINT = "latest.pt"
CHECKPOINT_GLOB = "iter_*.pt"  # zero-padded, so that name order is iteration order
POLICY_ONNX_FILE = "policy.onnx"
PLAY_FILE = "play.json"
EVAL_FILE = "eval.json"
NO_MPS_PIPE_DIR = "no_mps_pipe"
SEGMENTS_DIR = "segments"
LOCK_FILE = "run.lock"
# What a resumed run archives under segments/<n>/ before writing its own; metrics and
# checkpoints continue in place instead (the metrics are truncated at the resumed iteration).
SEGMENT_FILES = (RUN_CONFIG_FILE, MANIFEST_FILE, SUMMARY_FILE)


def checkpoint_name(iteration: int) -> str:
    return f"iter_{iteration:07d}.pt"


def rank_dir(run_dir: str | os.PathLike, rank: int) -> Path:
    """Where a rank writes its metrics: the run directory for rank 0, rank_<r>/ below it otherwise."""
    return Path(run_dir) if rank == 0 else Path(run_dir) / f"rank_{rank}"


def is_run_dir(path: str | os.PathLike) -> bool:
    """A unilab run directory is one with a run_config.json (it is written before anything runs)."""
    return (Path(path) / RUN_CONFIG_FILE).is_file()

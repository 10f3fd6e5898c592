"""runtime_manifest.json: how a run actually executed (versioned, validated by pydantic)."""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from unilab import __version__
from unilab.mps.record import CudaProcessSharingEvidence

from unilab.atomic import write_json_atomic
from .layout import MANIFEST_FILE
from .provenance import SourceEvidence, VersionEvidence

MANIFEST_SCHEMA_VERSION = 3  # 2: source and versions; 3: where each rank ran (host, node, local rank), launched_by


class RankEvidence(BaseModel):
    """One rank's learner/collector pair (filled in by its launcher)."""

    model_config = ConfigDict(extra="forbid")

    rank: int  # global rank
    hostname: Optional[str] = None
    node_rank: Optional[int] = None
    local_rank: Optional[int] = None
    device: str
    gpu_uuid: Optional[str] = None
    launcher_pid: Optional[int] = None  # the process that started and verified this rank's pair
    learner_pid: Optional[int] = None
    collector_pid: Optional[int] = None
    learner_gpu_uuid: Optional[str] = None
    collector_gpu_uuid: Optional[str] = None
    cuda_process_sharing: Optional[CudaProcessSharingEvidence] = None


class RuntimeManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = MANIFEST_SCHEMA_VERSION
    unilab_version: str = __version__
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    updated_at: Optional[str] = None
    hostname: str = Field(default_factory=socket.gethostname)
    python: str = Field(default_factory=lambda: platform.python_version())
    argv: list[str] = Field(default_factory=lambda: list(sys.argv))
    run_dir: str
    algo: str
    task: str
    backend: str
    world_size: int = 1
    # train (training.run.devices: every rank from this launcher), torchrun or srun (one launcher per rank)
    launched_by: str = "train"
    # What produced the run (None in a manifest written before schema 2): the unilab checkout's git commit and
    # dirty flag, and the torch / warp / mujoco / mujoco-warp / CUDA / NVIDIA driver versions.
    source: Optional[SourceEvidence] = None
    versions: Optional[VersionEvidence] = None
    cuda_process_sharing: CudaProcessSharingEvidence
    ranks: list[RankEvidence] = Field(default_factory=list)

    def write(self, run_dir: str | os.PathLike | None = None) -> Path:
        target = Path(run_dir or self.run_dir) / MANIFEST_FILE
        stamped = self.model_copy(update={"updated_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
        return write_json_atomic(target, stamped.model_dump(mode="json"))

    @classmethod
    def read(cls, run_dir: str | os.PathLike) -> "RuntimeManifest":
        return cls.model_validate(json.loads((Path(run_dir) / MANIFEST_FILE).read_text()))


def manifest_json_schema() -> dict:
    return RuntimeManifest.model_json_schema()

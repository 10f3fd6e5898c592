"""The MPS part of a run's evidence: what the probe found and what the launcher later verified,
as frozen, JSON-serialisable records (`runtime_manifest.json` is written by unilab.rundir.manifest)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

RECORD_SCHEMA_VERSION = 1

Mode = Optional[Literal["mps"]]


class CudaProcessSharingEvidence(BaseModel):
    """The `cuda_process_sharing` section of runtime_manifest.json.

    `validated` means every host prerequisite held when probed. `effective` becomes "mps"
    only after the runtime saw both learner and collector PIDs among the daemon's clients.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = RECORD_SCHEMA_VERSION
    configured: Mode
    effective: Mode = None
    validated: bool = False
    backend: str
    platform: str
    learner_device: str
    collector_device: str
    cuda_visible_devices: Optional[str] = None
    gpu_uuid: Optional[str] = None
    gpu_name: Optional[str] = None
    compute_mode: Optional[str] = None
    pipe_directory: Optional[str] = None
    pipe_directory_source: Optional[Literal["env", "default"]] = None
    control_pipe: Optional[str] = None
    daemon_reachable: Optional[bool] = None
    control_daemon_pid: Optional[int] = None
    server_pid: Optional[int] = None
    server_pids: list[int] = Field(default_factory=list)
    client_pids: dict[str, int] = Field(default_factory=dict)
    clients_verified: bool = False
    notes: list[str] = Field(default_factory=list)
    probed_at: str


class MpsClientReport(BaseModel):
    """Which of the given PIDs are clients of an MPS server of the probed daemon."""

    model_config = ConfigDict(frozen=True)

    server_pids: list[int]
    attached: dict[int, bool]
    clients_by_server: dict[int, list[int]]
    error: Optional[str] = None

    @property
    def all_attached(self) -> bool:
        return bool(self.attached) and all(self.attached.values())

    def missing(self) -> list[int]:
        return [pid for pid, ok in self.attached.items() if not ok]

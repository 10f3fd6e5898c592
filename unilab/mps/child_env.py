"""The environment both children start with: the MPS variables are there before any CUDA init.

`child_device_and_env` gives what both roles of a rank share (the pipe directory, the pinned GPU);
`role_mps_env` what each role gets on its own (its thread share and client priority), checked while the
config is composed.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Mapping

from .errors import MpsSettingError
from .record import CudaProcessSharingEvidence

MPS_PRIORITY_LEVEL = {"normal": "0", "below_normal": "1"}  # CUDA_MPS_CLIENT_PRIORITY values


def child_device_and_env(
    evidence: CudaProcessSharingEvidence, device: str, no_mps_pipe_dir: str | None = None
) -> tuple[str, dict[str, str]]:
    """(device string inside the children, environment overrides for them). In null mode with
    ``no_mps_pipe_dir`` (an empty directory) the children cannot reach any MPS daemon."""
    if evidence.configured != "mps":
        return device, ({"CUDA_MPS_PIPE_DIRECTORY": no_mps_pipe_dir} if no_mps_pipe_dir else {})
    env = {
        "CUDA_MPS_PIPE_DIRECTORY": evidence.pipe_directory,
        # Pin the probed GPU by UUID: inside the children it is cuda:0, whatever the ordinal was.
        "CUDA_VISIBLE_DEVICES": evidence.gpu_uuid,
    }
    log_dir = os.environ.get("CUDA_MPS_LOG_DIRECTORY")
    if log_dir:
        env["CUDA_MPS_LOG_DIRECTORY"] = log_dir
    # The probe has checked that the device is CUDA; the pinned GPU is ordinal 0 in the children.
    return ("cuda:0" if device.startswith("cuda") else device), env


def role_mps_env(thread_percentage: Mapping | None, client_priority: Mapping | None,
                 mode: str | None) -> dict[str, dict[str, str]]:
    """role -> the CUDA_MPS_* variables its child starts with, from training.mps.mps_active_thread_percentage
    (`thread_percentage`) and training.mps.mps_client_priority (`client_priority`) under the requested `mode`
    (training.mps.cuda_process_sharing). A value that cannot be used raises MpsSettingError."""
    shares = {role: value for role, value in (thread_percentage or {}).items() if value is not None}
    for role, value in shares.items():
        if not 1 <= int(value) <= 100:
            raise MpsSettingError(f"training.mps.mps_active_thread_percentage.{role}={value}: expected 1 to 100 "
                                  "(percent of the GPU's SMs a role's kernels may use), or null")
    priorities = {role: str(getattr(value, "value", value))
                  for role, value in (client_priority or {}).items() if value is not None}
    for role, value in priorities.items():
        if value not in MPS_PRIORITY_LEVEL:
            raise MpsSettingError(f"training.mps.mps_client_priority.{role}={value}: expected normal, below_normal "
                                  "or null")
    for key, given in (("mps_active_thread_percentage", shares), ("mps_client_priority", priorities)):
        if given and mode != "mps":
            raise MpsSettingError(f"training.mps.{key} applies to MPS clients only: add +execution=mps or leave it "
                                  "null")
    env: dict[str, dict[str, str]] = {}
    for role, value in shares.items():
        env.setdefault(role, {})["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(int(value))
    for role, value in priorities.items():
        env.setdefault(role, {})["CUDA_MPS_CLIENT_PRIORITY"] = MPS_PRIORITY_LEVEL[value]
    return env


@contextmanager
def environ(overrides: dict[str, str]):
    saved = {k: os.environ.get(k) for k in overrides}
    os.environ.update(overrides)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

"""The environment both children start with: the MPS variables are there before any CUDA init."""

from __future__ import annotations

import os
from contextlib import contextmanager

from .record import CudaProcessSharingEvidence


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

"""probe_cuda_process_sharing: check a requested mode against the host, in a fixed order.

The probe reads host facts only (NVML, the pipe directory, the control daemon); it never
creates a CUDA context, never starts or repairs a daemon, and stops at the first unmet
prerequisite with a CudaProcessSharingError that names the fix.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path

from .control import (
    ControlBinaryMissing,
    DaemonNoAnswer,
    MpsControl,
    PipeDirectory,
    daemon_pid,
    is_socket,
    pipe_directory,
)
from .errors import CudaProcessSharingError, Prerequisite
from .host import HostFacts
from .layout import Layout, layout_for, start_daemon_commands
from .nvml import GpuInfo, MigEntry, NvmlUnavailable, visible_devices
from .record import CudaProcessSharingEvidence

SUPPORTED_MODES = ("mps",)
SUPPORTED_BACKENDS = ("mjwarp",)
_CUDA_DEVICE = re.compile(r"^cuda(?::(\d+))?$")


def _mode_value(requested) -> str | None:
    if isinstance(requested, Enum):
        requested = requested.value
    if requested is None or requested in SUPPORTED_MODES:
        return requested
    raise CudaProcessSharingError(
        Prerequisite.MODE_VALUE,
        "training.mps.cuda_process_sharing must be null or one of: " + ", ".join(SUPPORTED_MODES),
        found=repr(requested),
        fix=["train +execution=mps      # or omit it for the default (null)"],
    )


def probe_cuda_process_sharing(
    requested,
    learner_device: str,
    collector_device: str,
    *,
    backend: str,
    host: HostFacts | None = None,
    timeout_s: float = 5.0,
) -> CudaProcessSharingEvidence:
    host = host or HostFacts()
    mode = _mode_value(requested)
    base = dict(
        configured=mode,
        backend=str(backend),
        platform=host.platform,
        learner_device=str(learner_device),
        collector_device=str(collector_device),
        cuda_visible_devices=host.env.get("CUDA_VISIBLE_DEVICES"),
        probed_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    if mode is None:
        return _ambient(base, host)
    return _probe_mps(base, host, timeout_s)


def _ambient(base: dict, host: HostFacts) -> CudaProcessSharingEvidence:
    """null mode never fails; it only notes whether a daemon could be in effect anyway."""
    pipe = pipe_directory(host.env)
    reachable = False
    if is_socket(pipe.control):
        try:
            MpsControl(pipe, host.env, timeout_s=1.0, which=host.which).server_pids()
            reachable = True
        except (ControlBinaryMissing, DaemonNoAnswer):
            reachable = False
    notes = []
    if reachable:
        notes.append(
            f"an MPS control daemon answers at {pipe.control}: CUDA processes that reach it run "
            "under MPS even though this run did not request it"
        )
    return CudaProcessSharingEvidence(
        **base,
        pipe_directory=pipe.path,
        pipe_directory_source=pipe.source,
        control_pipe=pipe.control,
        daemon_reachable=reachable,
        control_daemon_pid=daemon_pid(pipe) if reachable else None,
        notes=notes,
    )


def _probe_mps(base: dict, host: HostFacts, timeout_s: float) -> CudaProcessSharingEvidence:
    _check_backend(base["backend"])
    _check_platform(host.platform)
    learner_idx = _cuda_index(base["learner_device"], Prerequisite.LEARNER_CUDA, "learner")
    collector_idx = _cuda_index(base["collector_device"], Prerequisite.COLLECTOR_CUDA, "collector")
    gpu = _same_physical_gpu(host, learner_idx, collector_idx, base)
    pipe = _check_pipe(host, pipe_directory(host.env), gpu)
    control = MpsControl(pipe, host.env, timeout_s=timeout_s, which=host.which)
    servers = _ask_daemon(control, pipe)
    notes = []
    if gpu.compute_mode == "PROHIBITED":
        raise CudaProcessSharingError(
            Prerequisite.COMPUTE_MODE,
            "the GPU's compute mode is PROHIBITED: no CUDA context can be created on it",
            found=f"{gpu.uuid} compute mode {gpu.compute_mode}",
            fix=[f"sudo nvidia-smi -i {gpu.uuid} -c DEFAULT"],
        )
    if gpu.compute_mode == "DEFAULT":
        notes.append("compute mode DEFAULT: allowed; EXCLUSIVE_PROCESS keeps non-MPS contexts off this GPU")
    if not servers:
        notes.append("no MPS server is running yet: the daemon starts one when the first client connects")
    return CudaProcessSharingEvidence(
        **base,
        validated=True,
        gpu_uuid=gpu.uuid,
        gpu_name=gpu.name,
        compute_mode=gpu.compute_mode,
        pipe_directory=pipe.path,
        pipe_directory_source=pipe.source,
        control_pipe=pipe.control,
        daemon_reachable=True,
        control_daemon_pid=daemon_pid(pipe),
        server_pid=servers[0] if len(servers) == 1 else None,
        server_pids=servers,
        notes=notes,
    )


def _check_backend(backend: str) -> None:
    if backend not in SUPPORTED_BACKENDS:
        raise CudaProcessSharingError(
            Prerequisite.BACKEND,
            "cuda_process_sharing=mps is supported on the MJWarp backend only",
            found=f"sim.backend={backend}",
            fix=["train --sim mjwarp +execution=mps ...", "or drop +execution=mps for this backend"],
        )


def _check_platform(platform: str) -> None:
    if not platform.startswith("linux"):
        raise CudaProcessSharingError(
            Prerequisite.PLATFORM,
            "CUDA MPS exists on Linux only",
            found=f"platform {platform}",
            fix=["run on a Linux host, or drop +execution=mps"],
        )


def _cuda_index(device: str, prerequisite: Prerequisite, role: str) -> int:
    m = _CUDA_DEVICE.match(device.strip())
    if m is None:
        raise CudaProcessSharingError(
            prerequisite,
            f"the {role} must be a CUDA device ('cuda' or 'cuda:N') under MPS",
            found=f"{role} device {device!r}",
            fix=["train training.run.device=cuda:0 +execution=mps ..."],
        )
    return int(m.group(1) or 0)


def _same_physical_gpu(host: HostFacts, learner_idx: int, collector_idx: int, base: dict) -> GpuInfo:
    try:
        gpus = host.nvml.gpus()
    except NvmlUnavailable as exc:
        raise CudaProcessSharingError(
            Prerequisite.NVML,
            "NVML (the NVIDIA driver library) cannot be read, so no GPU can be identified",
            found=str(exc),
            fix=["nvidia-smi    # must list the GPU; install or load the NVIDIA driver if it fails"],
        ) from exc
    cvd = host.env.get("CUDA_VISIBLE_DEVICES")
    visible = visible_devices(cvd, gpus)
    picked = []
    for role, idx, device in (("learner", learner_idx, base["learner_device"]),
                              ("collector", collector_idx, base["collector_device"])):
        if idx >= len(visible):
            raise CudaProcessSharingError(
                Prerequisite.DEVICE_VISIBLE,
                f"the {role} device {device} is not among the visible GPUs",
                found=f"{len(visible)} visible GPU(s); CUDA_VISIBLE_DEVICES={cvd!r}; NVML sees {len(gpus)}",
                fix=["nvidia-smi -L    # list GPU indices and UUIDs",
                     "export CUDA_VISIBLE_DEVICES=<GPU-UUID>   # then use training.run.device=cuda:0"],
            )
        entry = visible[idx]
        if isinstance(entry, MigEntry) or entry.mig_enabled:
            name = entry.token if isinstance(entry, MigEntry) else entry.uuid
            raise CudaProcessSharingError(
                Prerequisite.NO_MIG,
                f"the {role} device is a MIG instance or a GPU in MIG mode, which unilab does not support under MPS",
                found=name,
                fix=["use a GPU with MIG disabled:  sudo nvidia-smi -i <index> -mig 0",
                     "or drop +execution=mps"],
            )
        picked.append(entry)
    learner, collector = picked
    if learner.uuid != collector.uuid:
        raise CudaProcessSharingError(
            Prerequisite.SAME_GPU,
            "learner and collector must share one physical GPU (rank-local placement)",
            found=f"learner {base['learner_device']} = {learner.uuid}, "
            f"collector {base['collector_device']} = {collector.uuid}",
            fix=["train training.run.device=cuda:0 +execution=mps ...   # one device for both roles"],
        )
    return learner


def _daemon_layout(host: HostFacts, gpu: GpuInfo, pipe: PipeDirectory | None = None) -> Layout:
    """The directories `unilab mps start --gpu <uuid>` uses for the probed GPU; `pipe`, when given,
    keeps the pipe directory the user exported (the log directory stays the convention's)."""
    layout = layout_for(host.root(), gpu.uuid)
    return layout if pipe is None else replace(layout, pipe_dir=Path(pipe.path))


def _check_pipe(host: HostFacts, pipe: PipeDirectory, gpu: GpuInfo) -> PipeDirectory:
    where = f"{pipe.path} ({'CUDA_MPS_PIPE_DIRECTORY' if pipe.source == 'env' else 'NVIDIA default, CUDA_MPS_PIPE_DIRECTORY unset'})"
    start = start_daemon_commands(_daemon_layout(host, gpu, pipe if pipe.source == "env" else None))
    if not os.path.isdir(pipe.path):
        raise CudaProcessSharingError(
            Prerequisite.PIPE_DIRECTORY,
            "the MPS pipe directory does not exist: no control daemon has been started there",
            found=where,
            fix=start,
        )
    if not host.access(pipe.path, os.R_OK | os.X_OK):
        raise CudaProcessSharingError(
            Prerequisite.CONTROL_PIPE_ACCESS,
            "the MPS pipe directory is not accessible to this user",
            found=where,
            fix=["start a daemon as this user in a directory it owns:", *start],
        )
    if not os.path.lexists(pipe.control):
        raise CudaProcessSharingError(
            Prerequisite.CONTROL_PIPE,
            "no MPS control pipe in the pipe directory: the control daemon is not running there",
            found=f"{pipe.control} missing; pipe directory {where}",
            fix=start,
        )
    if not is_socket(pipe.control):
        raise CudaProcessSharingError(
            Prerequisite.CONTROL_PIPE_SOCKET,
            "the MPS control pipe is not a Unix socket (a stale or foreign file)",
            found=f"{pipe.control} is not a socket",
            fix=[f"rm {pipe.control}    # only if no daemon uses this directory", *start],
        )
    if not host.access(pipe.control, os.R_OK | os.W_OK):
        raise CudaProcessSharingError(
            Prerequisite.CONTROL_PIPE_ACCESS,
            "the MPS control pipe belongs to another user or denies access",
            found=f"{pipe.control}: permission denied",
            fix=["start a daemon as this user in a directory it owns:",
                 *start_daemon_commands(_daemon_layout(host, gpu))],
        )
    return pipe


def _ask_daemon(control: MpsControl, pipe: PipeDirectory) -> list[int]:
    try:
        return control.server_pids()
    except ControlBinaryMissing as exc:
        raise CudaProcessSharingError(
            Prerequisite.CONTROL_BINARY,
            "the MPS control binary nvidia-cuda-mps-control is not on PATH",
            found=str(exc),
            fix=["install the NVIDIA driver utilities that ship nvidia-cuda-mps-control",
                 "export PATH=$PATH:/usr/bin    # wherever it is installed"],
        ) from exc
    except DaemonNoAnswer as exc:
        raise CudaProcessSharingError(
            Prerequisite.DAEMON_ANSWERS,
            "the MPS control daemon does not answer get_server_list",
            found=f"{pipe.control}: {exc}",
            fix=[f"export CUDA_MPS_PIPE_DIRECTORY={pipe.path}",
                 "echo quit | nvidia-cuda-mps-control    # stop a wedged daemon, then start again:",
                 "nvidia-cuda-mps-control -d"],
        ) from exc

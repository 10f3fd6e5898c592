"""The one facade over the host: what the probe, the client verification and `unilab mps` read from it and do
to it. Tests substitute fakes here."""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping

from unilab.exit_codes import EXIT_USAGE
from unilab.processes import stat_fields

from .control import DAEMON_PID_FILE, MpsControl, PipeDirectory
from .errors import MpsToolError
from .layout import TMP, default_root
from .nvml import GpuInfo, MigEntry, NvmlReader, NvmlUnavailable, SystemNvml, visible_devices

NVIDIA_SMI = "nvidia-smi"


@dataclass
class HostFacts:
    """Everything read from the host and done to it; tests substitute fakes here."""

    platform: str = sys.platform
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    nvml: NvmlReader = field(default_factory=lambda: SystemNvml())
    access: Callable[[str, int], bool] = os.access
    which: Callable[..., str | None] = shutil.which
    euid: Callable[[], int] = os.geteuid  # owner of the directories it creates
    is_root: Callable[[], bool] = lambda: os.geteuid() == 0  # may change the compute mode
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    proc: Path = Path("/proc")
    tmp: Path = TMP  # holds the daemons' root directory (layout.py)

    def with_env(self, overrides: Mapping[str, str]) -> HostFacts:
        """This host as a process started with `overrides` in its environment sees it (e.g. a daemon's
        CUDA_MPS_* exports)."""
        return replace(self, env={**self.env, **overrides})

    def root(self) -> Path:
        return default_root(self.euid(), self.tmp)

    def find(self, name: str) -> str | None:
        return self.which(name, path=self.env.get("PATH", os.defpath))

    def control(self, pipe_dir: str | os.PathLike, timeout_s: float) -> MpsControl:
        return MpsControl(PipeDirectory(str(pipe_dir), "env"), self.env, timeout_s=timeout_s, which=self.which)

    def start_time(self, pid: int) -> int | None:
        """Field 22 of /proc/<pid>/stat (clock ticks after boot); None when the pid is gone or a zombie."""
        fields = stat_fields(pid, self.proc)
        if fields is None or fields[0] in ("Z", "X"):
            return None
        return int(fields[22 - 3])

    def daemon_pid(self, pipe_dir: Path) -> int | None:
        """The control daemon's pid file in the pipe directory, else the one daemon whose environment names it."""
        try:
            return int((pipe_dir / DAEMON_PID_FILE).read_text().strip())
        except (OSError, ValueError):
            pass
        wanted = f"CUDA_MPS_PIPE_DIRECTORY={pipe_dir}".encode()
        hits = []
        for entry in self.proc.glob("[0-9]*"):
            try:
                if (entry / "comm").read_text().strip().startswith("nvidia-cuda-mps") and \
                        wanted in (entry / "environ").read_bytes().split(b"\0"):
                    hits.append(int(entry.name))
            except (OSError, ValueError):
                continue
        return hits[0] if len(hits) == 1 else None


def _nvml_gpus(host: HostFacts) -> tuple[list[GpuInfo], str]:
    """NVML's GPUs and a listing of them for messages."""
    try:
        gpus = host.nvml.gpus()
    except NvmlUnavailable as exc:
        raise MpsToolError(f"unilab mps: NVML cannot be read, so no GPU can be identified: {exc}\n"
                           "  check: nvidia-smi    # must list the GPU", code=EXIT_USAGE) from exc
    return gpus, "; ".join(f"{g.index}: {g.uuid}" for g in gpus) or "none"


def _visible(host: HostFacts) -> list[GpuInfo | MigEntry]:
    """CUDA's devices in CUDA's order (CUDA_VISIBLE_DEVICES aware); at least one."""
    gpus, listing = _nvml_gpus(host)
    visible = visible_devices(host.env.get("CUDA_VISIBLE_DEVICES"), gpus)
    if not visible:
        raise MpsToolError(f"unilab mps: no visible GPU (CUDA_VISIBLE_DEVICES="
                           f"{host.env.get('CUDA_VISIBLE_DEVICES')!r}; NVML sees {listing})", code=EXIT_USAGE)
    return visible


def resolve_visible_gpus(host: HostFacts) -> list[GpuInfo]:
    """--all-gpus: every GPU CUDA sees, in CUDA's order (cuda:i is entry i), none of them MIG."""
    return [_not_mig(gpu) for gpu in _visible(host)]


def _not_mig(gpu: GpuInfo | MigEntry) -> GpuInfo:
    if isinstance(gpu, MigEntry):
        raise MpsToolError(f"unilab mps: {gpu.token} is a MIG instance; unilab does not support MPS on MIG",
                           code=EXIT_USAGE)
    if gpu.mig_enabled:
        raise MpsToolError(f"unilab mps: {gpu.uuid} is in MIG mode; unilab does not support MPS on MIG\n"
                           f"  fix: sudo nvidia-smi -i {gpu.index} -mig 0", code=EXIT_USAGE)
    return gpu


def resolve_gpu(host: HostFacts, spec: str | None) -> GpuInfo:
    """--gpu as an NVML index or a (prefix of a) UUID; by default CUDA's device 0 (CUDA_VISIBLE_DEVICES aware)."""
    if spec is None:
        return _not_mig(_visible(host)[0])
    gpus, listing = _nvml_gpus(host)
    if spec.isdigit():
        gpu = next((g for g in gpus if g.index == int(spec)), None)
    else:
        hits = [g for g in gpus if g.uuid.startswith(spec) or g.uuid.startswith("GPU-" + spec)]
        gpu = hits[0] if len(hits) == 1 else None
    if gpu is None:
        raise MpsToolError(f"unilab mps: --gpu {spec} names no single GPU (NVML sees {listing})", code=EXIT_USAGE)
    return _not_mig(gpu)

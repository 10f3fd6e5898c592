"""GPU identity and memory through NVML, which never creates a CUDA context in the calling process."""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol, Sequence

COMPUTE_MODES = {0: "DEFAULT", 1: "EXCLUSIVE_THREAD", 2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}
MIB = 1024 * 1024


class NvmlUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class GpuInfo:
    index: int  # NVML (PCI bus) index
    uuid: str
    name: str
    mig_enabled: bool
    compute_mode: str


@dataclass(frozen=True)
class MigEntry:
    """A MIG instance named in CUDA_VISIBLE_DEVICES."""

    token: str


@dataclass(frozen=True)
class GpuMemory:
    free_mib: float
    total_mib: float


class NvmlReader(Protocol):
    def gpus(self) -> list[GpuInfo]: ...


@contextmanager
def _nvml_session():
    """pynvml, initialised for the block; NvmlUnavailable without the library or a driver."""
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - dependency declared in pyproject
        raise NvmlUnavailable(f"nvidia-ml-py is not installed ({exc})") from exc
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML could not be initialised: {exc}") from exc
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


class SystemNvml:
    """Reads every GPU through nvidia-ml-py; raises NvmlUnavailable without a driver."""

    def gpus(self) -> list[GpuInfo]:
        with _nvml_session() as pynvml:
            out = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                out.append(
                    GpuInfo(
                        index=i,
                        uuid=_text(pynvml.nvmlDeviceGetUUID(h)),
                        name=_text(pynvml.nvmlDeviceGetName(h)),
                        mig_enabled=_mig_enabled(pynvml, h),
                        compute_mode=COMPUTE_MODES.get(pynvml.nvmlDeviceGetComputeMode(h), "UNKNOWN"),
                    )
                )
            return out

    def driver_version(self) -> str:
        """The NVIDIA driver's version, e.g. "570.124.06"."""
        with _nvml_session() as pynvml:
            try:
                return _text(pynvml.nvmlSystemGetDriverVersion())
            except pynvml.NVMLError as exc:
                raise NvmlUnavailable(f"NVML gave no driver version: {exc}") from exc


    def memory(self, index: int) -> GpuMemory:
        """Free and total memory of GPU `index` (NVML's index)."""
        with _nvml_session() as pynvml:
            try:
                info = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index))
            except pynvml.NVMLError as exc:
                raise NvmlUnavailable(f"NVML gave no memory information for GPU {index}: {exc}") from exc
            return GpuMemory(free_mib=info.free / MIB, total_mib=info.total / MIB)

    def process_memory(self, index: int) -> dict[int, float]:
        """MiB per pid on GPU `index` as NVML lists them: compute processes and MPS clients (a process listed
        by both counted once); {} where this driver or GPU lists none."""
        with _nvml_session() as pynvml:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            out: dict[int, float] = {}
            for lister in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetMPSComputeRunningProcesses"):
                try:
                    processes = getattr(pynvml, lister)(handle)
                except (AttributeError, pynvml.NVMLError):  # an older library, or not supported here
                    continue
                for p in processes:
                    if p.usedGpuMemory is not None:
                        out[p.pid] = max(out.get(p.pid, 0.0), p.usedGpuMemory / MIB)
            return out


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _mig_enabled(pynvml, handle) -> bool:
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except pynvml.NVMLError:  # not supported on this GPU
        return False
    return current == pynvml.NVML_DEVICE_MIG_ENABLE


_INDEX = re.compile(r"^\d+$")


def visible_devices(cuda_visible_devices: str | None, gpus: Sequence[GpuInfo]) -> list[GpuInfo | MigEntry]:
    """CUDA's view of the GPUs: ordinal i of `cuda:i` is entry i of this list.

    Follows the CUDA rules: unset means every GPU; entries are indices or (prefixes of)
    `GPU-` UUIDs; the list ends at the first entry that names no device.
    """
    if cuda_visible_devices is None:
        return list(gpus)
    out: list[GpuInfo | MigEntry] = []
    for token in (t.strip() for t in cuda_visible_devices.split(",")):
        if token.startswith("MIG-"):
            out.append(MigEntry(token))
            continue
        match = _match(token, gpus)
        if match is None:
            break
        out.append(match)
    return out


def _match(token: str, gpus: Sequence[GpuInfo]) -> GpuInfo | None:
    if _INDEX.match(token):
        idx = int(token)
        return next((g for g in gpus if g.index == idx), None)
    if token.startswith("GPU-"):
        hits = [g for g in gpus if g.uuid.startswith(token)]
        return hits[0] if len(hits) == 1 else None
    return None

"""The packed launcher's GPU memory guard: a job starts only where its GPUs have room for it.

Everything is read through NVML, which creates no CUDA context in the launcher. What a job needs is an estimate:
the larger of `hydra.launcher.job_memory_mib` (a hint, the floor) and the largest peak measured so far for a job
of this sweep, the most GPU memory NVML has shown one job's processes (its launcher and every process below it:
learner, collector, play) holding at once. A job whose GPU has less free memory than that waits, polled, up to
`hydra.launcher.memory_wait_s`; then it fails with the numbers, and at once where the estimate exceeds the
GPU's total memory (waiting would not help). CPU jobs are not checked, nor MIG instances (NVML gives a MIG
instance's memory through another handle).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from unilab.mps.nvml import GpuInfo, GpuMemory, NvmlUnavailable, SystemNvml, visible_devices
from unilab.processes import descendants

START, WAIT, FAIL = "start", "wait", "fail"


class MemoryReader(Protocol):
    def gpus(self) -> list[GpuInfo]: ...

    def memory(self, index: int) -> GpuMemory: ...

    def process_memory(self, index: int) -> dict[int, float]: ...


@dataclass
class Verdict:
    action: str  # START, WAIT or FAIL
    message: str = ""  # WAIT and FAIL: the free and the needed MiB, and where the estimate comes from


class MemoryGuard:
    def __init__(self, hint_mib: int, wait_s: float, nvml: MemoryReader | None = None,
                 clock: Callable[[], float] = time.monotonic, process_tree: Callable[[int], list[int]] = descendants):
        self.hint_mib = hint_mib
        self.wait_s = wait_s
        self.clock = clock
        self.process_tree = process_tree
        self.peaks: dict[int, float] = {}  # job index -> its measured peak, MiB
        self._nvml = nvml
        self._waiting_since: dict[int, float] = {}

    @property
    def nvml(self) -> MemoryReader:
        if self._nvml is None:  # made on first use: a sweep of CPU jobs never loads NVML
            self._nvml = SystemNvml()
        return self._nvml

    def estimate_mib(self) -> tuple[float, str]:
        """(MiB a job is expected to need, where that comes from)."""
        if self.peaks:
            job, peak = max(self.peaks.items(), key=lambda item: item[1])
            if peak > self.hint_mib:
                return peak, f"the peak measured for job #{job}"
        return float(self.hint_mib), f"hydra.launcher.job_memory_mib={self.hint_mib}"

    def verdict(self, job: int, ordinals: list[int]) -> Verdict:
        """Whether job `job`, on CUDA devices `ordinals` (as CUDA numbers them here), starts now, waits or fails."""
        if not ordinals:
            return Verdict(START)
        need, basis = self.estimate_mib()
        try:
            short = [(o, gpu, room) for o, gpu in self._gpus(ordinals)
                     if (room := self.nvml.memory(gpu.index)).free_mib < need]
        except NvmlUnavailable as exc:
            return Verdict(FAIL, f"the GPU's free memory could not be read through NVML: {exc}")
        if not short:
            self._waiting_since.pop(job, None)
            return Verdict(START)
        ordinal, gpu, room = short[0]
        numbers = (f"cuda:{ordinal} ({gpu.uuid}) has {room.free_mib:.0f} MiB free of {room.total_mib:.0f} MiB; "
                   f"the job needs about {need:.0f} MiB ({basis})")
        if need > room.total_mib:
            return Verdict(FAIL, f"{numbers}, more than the GPU holds")
        now = self.clock()
        waited = now - self._waiting_since.setdefault(job, now)
        if waited >= self.wait_s:
            return Verdict(FAIL, f"{numbers}; waited {waited:.0f} s (hydra.launcher.memory_wait_s={self.wait_s:g})")
        return Verdict(WAIT, numbers)

    def measure(self, running: dict[int, tuple[int, list[int]]]) -> None:
        """One sample of the running jobs' GPU memory (job -> (its launcher's pid, its CUDA ordinals)); a job's
        peak is the most its processes held at once. NVML errors skip the sample."""
        ordinals = sorted({o for _pid, os_ in running.values() for o in os_})
        if not ordinals:
            return
        try:
            per_pid: dict[int, float] = {}
            for _ordinal, gpu in self._gpus(ordinals):
                for pid, mib in self.nvml.process_memory(gpu.index).items():
                    per_pid[pid] = per_pid.get(pid, 0.0) + mib
        except NvmlUnavailable:
            return
        for job, (pid, _ordinals) in running.items():
            held = sum(per_pid.get(p, 0.0) for p in self.process_tree(pid))
            self.peaks[job] = max(self.peaks.get(job, 0.0), held)

    def _gpus(self, ordinals: list[int]) -> list[tuple[int, GpuInfo]]:
        """(ordinal, GPU) for each ordinal that names a whole GPU here (CUDA_VISIBLE_DEVICES applied)."""
        visible = visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"), self.nvml.gpus())
        return [(o, visible[o]) for o in ordinals if o < len(visible) and isinstance(visible[o], GpuInfo)]


def cuda_ordinals(run: Any) -> list[int]:
    """The CUDA devices (as numbered in this process) of a job's ranks, from its `training.run` settings (device,
    devices); [] on the CPU."""
    from unilab.config.validation import rank_devices

    return [int(d.partition(":")[2] or 0) for d in rank_devices(run) if d.startswith("cuda")]

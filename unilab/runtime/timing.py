"""Stamps on a stream: CUDA events on the GPU (read later, without stalling the hot path),
perf_counter on the CPU."""

from __future__ import annotations

import time

import torch


class Stamp:
    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.event = torch.cuda.Event(enable_timing=True) if self.cuda else None
        self.t = 0.0

    def record(self, stream=None) -> None:
        if self.cuda:
            self.event.record(stream)
        else:
            self.t = time.perf_counter()

    def wait_done(self, timeout_s: float, what: str) -> None:
        """Bounded wait for the GPU to pass this stamp (polling, never an unbounded sync); it watches stop
        requests and the launcher like every wait of a child (messages.check_stop)."""
        if not self.cuda:
            return
        from .messages import StallError, check_stop

        deadline = time.monotonic() + timeout_s
        while not self.event.query():
            check_stop(what)  # a stop request (SIGTERM) or the launcher's death ends this wait too
            if time.monotonic() > deadline:
                raise StallError("gpu", what, timeout_s)
            time.sleep(0.0002)

    def ms_until(self, later: "Stamp") -> float:
        if self.cuda:
            return float(self.event.elapsed_time(later.event))
        return 1e3 * (later.t - self.t)

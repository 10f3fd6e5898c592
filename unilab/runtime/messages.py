"""Host-side signalling between the launcher, the learner and the collector.

Every wait is bounded: a phase that does not progress within its timeout raises a StallError
naming the phase, instead of hanging both processes. The messages themselves are listed in
`protocol`; one that its receiver does not take raises a ProtocolError at once.
"""

from __future__ import annotations

import os
import queue
import signal
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .protocol import ProtocolError, Stop

M = TypeVar("M")


class StallError(RuntimeError):
    def __init__(self, role: str, phase: str, timeout_s: float):
        self.phase = phase
        super().__init__(f"{role}: no progress in phase '{phase}' within {timeout_s:g} s")


class StopRequested(Exception):
    """The launcher asked this process to stop (shutdown, interrupt or a fault elsewhere)."""


class ParentGone(RuntimeError):
    pass


_terminate_requested = False


def _on_sigterm(signum, frame) -> None:
    # SIGTERM reaches the children too when a whole process group is signalled (timeout(1),
    # Slurm) or when the launcher dies (PDEATHSIG): stop like the launcher would ask us to.
    global _terminate_requested
    _terminate_requested = True


@dataclass
class Mailbox:
    """One inbound queue of protocol messages, kept per type until asked for.

    `accepts` lists the message types this inbox takes (besides `Stop`, which every child understands):
    waiting for another type, or receiving one, raises ProtocolError at once instead of stalling.
    """

    role: str
    inbox: Any
    stop_event: Any
    accepts: tuple[type, ...]
    parent_pid: int = field(default_factory=os.getppid)
    _pending: dict = field(default_factory=lambda: defaultdict(deque))

    def get(self, kind: type[M], *, phase: str, timeout_s: float) -> M:
        self._check_kind(kind)
        if self._pending[Stop] or _terminate_requested or self.stop_event.is_set():
            raise StopRequested()
        pending = self._pending[kind]
        if pending:
            return pending.popleft()
        deadline = time.monotonic() + timeout_s
        while True:
            if self.stop_event.is_set() or _terminate_requested:
                raise StopRequested()
            if os.getppid() != self.parent_pid:
                raise ParentGone(f"{self.role}: the launching process is gone")
            try:
                msg = self.inbox.get(timeout=min(0.25, max(0.0, deadline - time.monotonic())) or 0.001)
            except queue.Empty:
                if time.monotonic() >= deadline:
                    raise StallError(self.role, phase, timeout_s) from None
                continue
            if type(msg) is kind:
                return msg
            if type(msg) is Stop:
                raise StopRequested()
            self._keep(msg)

    def poll(self, kind: type[M]) -> M | None:
        """A message of type `kind` if one has arrived, without waiting."""
        self._check_kind(kind)
        self._drain()
        pending = self._pending[kind]
        return pending.popleft() if pending else None

    def _drain(self) -> None:
        while True:
            try:
                msg = self.inbox.get_nowait()
            except queue.Empty:
                return
            self._keep(msg)

    def _keep(self, msg) -> None:
        if type(msg) not in self.accepts and type(msg) is not Stop:
            raise ProtocolError(f"{self.role}: received a {type(msg).__name__}, which it does not take "
                                f"(it takes {_names(self.accepts)})")
        self._pending[type(msg)].append(msg)

    def _check_kind(self, kind: type) -> None:
        if kind not in self.accepts:
            raise ProtocolError(f"{self.role}: waits for {getattr(kind, '__name__', kind)!s}, which is never sent "
                                f"to it (it takes {_names(self.accepts)})")


def _names(kinds) -> str:
    return ", ".join(k.__name__ for k in kinds)


def become_child(role: str) -> None:
    """Process-level setup of a learner or collector: exit with the launcher, leave Ctrl-C to it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher handles SIGINT and tells us to stop
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:  # not Linux: the Mailbox still notices a vanished parent
        pass

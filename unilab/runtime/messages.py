"""Host-side signalling between the launcher, the learner and the collector.

Every wait is bounded: a phase that does not progress within its timeout raises a StallError
naming the phase, instead of hanging both processes. Every wait also watches, at least every
WATCH_S, for a stop request (the stop event, SIGTERM) and for the launcher's death; a watchdog
thread ends a child whose launcher is gone and that is stuck where no wait looks (native code). The messages themselves are listed in
`protocol`; one that its receiver does not take raises a ProtocolError at once.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time
import traceback
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, TypeVar

from unilab.processes import exit_with_parent, use_short_socket_dir

from .protocol import Failed, ProtocolError, Stop

M = TypeVar("M")

WATCH_S = 0.25  # how often a waiting child looks at its stop requests and its launcher
PARENT_GONE_GRACE_S = 1.5  # the watchdog's wait for the main thread to notice before it ends the process
# Linux's PDEATHSIG fires when the launcher's *spawning thread* exits: under kill -9 that can come before its
# other threads have gone, so for a moment the SIGTERM is here and getppid() still names the launcher
PDEATHSIG_SETTLE_S = 0.5


class StallError(RuntimeError):
    def __init__(self, role: str, phase: str, timeout_s: float):
        self.phase = phase
        super().__init__(f"{role}: no progress in phase '{phase}' within {timeout_s:g} s")


class StopRequested(Exception):
    """The launcher asked this process to stop (shutdown, interrupt or a fault elsewhere)."""


class ParentGone(RuntimeError):
    pass


_terminate_requested = False
_parent_pid: int | None = None  # the launcher, as become_child found it


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
    parent_pid: int = field(default_factory=lambda: _parent_pid or os.getppid())
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
            check_stop(self.role, self.stop_event, self.parent_pid)
            try:
                msg = self.inbox.get(timeout=min(WATCH_S, max(0.0, deadline - time.monotonic())) or 0.001)
            except queue.Empty:
                if time.monotonic() >= deadline:
                    raise StallError(self.role, phase, timeout_s) from None
                continue
            if type(msg) is kind:
                return msg
            if type(msg) is Stop:
                raise StopRequested()
            self._keep(msg)

    def wait_for_peer(self, kind: type, timeout_s: float) -> bool:
        """The last wait of a stopping child: for the peer's `kind` message, whether or not a stop was requested
        (this wait is part of the stop). Other messages are dropped. False after `timeout_s` (a peer that was
        killed never answers) or once the launcher is gone."""
        self._check_kind(kind)
        if self._pending[kind]:
            return True
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            if os.getppid() != self.parent_pid:
                return False
            try:
                msg = self.inbox.get(timeout=min(WATCH_S, left))
            except queue.Empty:
                continue
            except (EOFError, OSError):  # the queue's other end is gone
                return False
            if type(msg) is kind:
                return True
        return False

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


def flush(channel, timeout_s: float = 1.0) -> None:
    """Close `channel` (a multiprocessing queue this process writes) and push what is still buffered into its pipe,
    waiting at most `timeout_s`. An exit would otherwise drop it (the last message, e.g. Released, never arrives) or,
    with a reader that is gone and a full pipe, block forever; so the wait is bounded and then abandoned."""
    channel.close()
    pusher = threading.Thread(target=channel.join_thread, name="flush", daemon=True)
    pusher.start()
    pusher.join(timeout_s)
    channel.cancel_join_thread()  # still stuck: the exit must not wait for it


def _names(kinds) -> str:
    return ", ".join(k.__name__ for k in kinds)


def stop_requested(stop_event=None) -> bool:
    """Whether this process is asked to stop (the stop event, SIGTERM)."""
    return _terminate_requested or (stop_event is not None and stop_event.is_set())


def check_stop(role: str, stop_event=None, parent_pid: int | None = None) -> None:
    """Raise StopRequested when asked to stop (stop event, SIGTERM), ParentGone when the launcher is gone."""
    if stop_requested(stop_event):
        raise StopRequested()
    parent = parent_pid if parent_pid is not None else _parent_pid
    if parent is not None and os.getppid() != parent:
        raise ParentGone(f"{role}: the launching process is gone")


def why_stopped(parent_pid: int | None = None) -> str:
    """Why a StopRequested was raised, in words for the other ranks of a data-parallel run."""
    parent = parent_pid if parent_pid is not None else _parent_pid
    if parent is not None and _parent_left(parent, PDEATHSIG_SETTLE_S if _terminate_requested else 0.0):
        return "its launcher is gone (killed?)"
    if _terminate_requested:
        return "SIGTERM (the job was cancelled, or its node's torchrun stopped it)"
    return "its launcher stopped it (interrupted, or a fault on that rank: see its run_summary.json)"


def _parent_left(parent_pid: int, settle_s: float) -> bool:
    """Whether this process's launcher is gone, waiting up to `settle_s` for a dying one to finish."""
    deadline = time.monotonic() + settle_s
    while os.getppid() == parent_pid:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def wait_event(event, *, role: str, phase: str, timeout_s: float, stop_event=None) -> None:
    """Wait for a cross-process event (e.g. the launcher's go), watching stop requests and the launcher."""
    deadline = time.monotonic() + timeout_s
    while True:
        check_stop(role, stop_event)
        if event.wait(min(WATCH_S, max(0.0, deadline - time.monotonic()))):
            return
        if time.monotonic() >= deadline:
            raise StallError(role, phase, timeout_s)


def become_child(name: str, to_launcher=None, *, stop_on_sigterm: bool = True) -> None:
    """Process-level setup of a child of the launcher (learner, collector, play): exit with the launcher,
    leave Ctrl-C and a closed terminal's SIGHUP (both reach the whole process group) to it. SIGTERM asks a learner or collector to stop (it saves); with
    `stop_on_sigterm=False` (play: nothing to save) it ends the process at once. A message that cannot be sent
    fails the run (`to_launcher` gets the child's Failed), and multiprocessing's sockets fit however long TMPDIR is."""
    global _parent_pid
    import multiprocessing

    if to_launcher is not None:
        fail_on_unsent(name, to_launcher)
    use_short_socket_dir()
    launcher = multiprocessing.parent_process()
    _parent_pid = launcher.pid if launcher is not None else os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher handles SIGINT and tells us to stop
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # likewise; by default SIGHUP would kill us unsaved
    signal.signal(signal.SIGTERM, _on_sigterm if stop_on_sigterm else signal.SIG_DFL)
    exit_with_parent(_parent_pid)  # not on Linux, the waits and the watchdog still notice a vanished launcher
    threading.Thread(target=_watch_parent, args=(_parent_pid,), name=f"{name}-parent-watch", daemon=True).start()


def fail_on_unsent(name: str, to_launcher) -> None:
    """A message this process queues but cannot send (its pickling fails in the queue's feeder thread, e.g.
    `AF_UNIX path too long` passing a CPU tensor's file descriptor) fails the run: multiprocessing would print the
    error and drop the message, and its receiver would wait for it until its timeout."""
    import multiprocessing.queues

    reported = []

    def unsent(exc: Exception, obj) -> None:
        text = "".join(traceback.format_exception(exc))
        print(f"{name}: could not send a {type(obj).__name__} message\n{text}", file=sys.stderr, flush=True)  # its log
        if not reported:  # once: the first fault is the run's cause, and a Failed that cannot be sent is not resent
            reported.append(obj)
            to_launcher.put(Failed(name, f"sending a {type(obj).__name__} message:\n{text}"))

    multiprocessing.queues.Queue._on_queue_feeder_error = staticmethod(unsent)  # the hook queues call on that error


def _watch_parent(parent_pid: int) -> None:
    """Backstop for a main thread stuck where no wait looks: once the launcher is gone, give the main thread
    PARENT_GONE_GRACE_S to notice (it leaves within WATCH_S from a wait), then end the process."""
    while os.getppid() == parent_pid:
        time.sleep(WATCH_S)
    time.sleep(PARENT_GONE_GRACE_S)
    os._exit(1)

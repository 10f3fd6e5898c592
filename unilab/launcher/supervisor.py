"""The launcher's supervisor: one run's children, from their start to their end.

The run moves through these states:
  starting  every child reports `Ready`; once all have, `verify` runs (SIGINT/SIGTERM/SIGHUP cut it short) and
            the go event is set
  running   until the learners finish, or a fault: a `Failed` message, a child that exits with an
            error, start-up past its timeout, SIGINT/SIGTERM/SIGHUP to the launcher
  stopping  the stop event is set; after STOP_GRACE_S the children still alive get SIGTERM (they
            save and stop), STOP_GRACE_S later SIGKILL (one stuck in native code). A child that died
            without reporting (killed, aborted) leaves the others of its rank DEAD_CHILD_GRACE_S, then
            SIGKILL: they share its GPU buffers and events, are often blocked on its GPU work or stuck in a
            CUDA teardown that no stop request reaches. The other ranks share none of it and stop in order
            (rank 0's learner saves its checkpoint). A failed MPS server gives every child the short grace
  ended     every child has exited; what they had still queued is read
The first fault names the run's cause; otherwise rank 0's learner summary sets its status.
"""

from __future__ import annotations

import math
import os
import queue
import signal
import sys
import time
from contextlib import contextmanager
from typing import Any, Callable

from unilab.mps.errors import MPS_SERVER_FAULT, mps_server_fault_fix, names_mps_failure
from unilab.runtime.protocol import Failed, Finished, Phase, Progress, Ready, WorldFailed, last_line

from .console import rank_of

STOP_GRACE_S = 10.0
DEAD_CHILD_GRACE_S = 2.0


class Supervisor:
    def __init__(self, specs: list, procs: dict[str, Any], inbox, stop_event, go_event,
                 verify: Callable[[dict[str, Ready]], Any], *, mps_server_gone: Callable[[], bool] | None = None,
                 mps_log_dir: str | None = None, console: Any = None):
        self.specs = specs  # one RoleSpec per rank
        self.procs = procs  # process name -> process
        self.inbox = inbox
        self.stop_event = stop_event
        self.go_event = go_event
        # every child's Ready -> a CudaProcessSharingError, or None to go; it returns early once `interrupted_by`
        # is set (SIGINT/SIGTERM/SIGHUP), and the run then stops as interrupted
        self.verify = verify
        self.ready: dict[str, Ready] = {}
        self.verified = False
        self.status: str | None = None
        self.cause: str | None = None
        self.failed_role: str | None = None
        self.traceback: str | None = None
        self.learner_summary: dict = {}
        self.stop_deadline: float | None = None
        self.interrupted_by: str | None = None
        self.terminated = False
        self.finished: set[str] = set()  # learners that delivered their summary
        self.notes: list[str] = []
        # under MPS: whether the server the children were verified against has exited (None: not under MPS)
        self.mps_server_gone = mps_server_gone
        self.mps_log_dir = mps_log_dir
        self.console = console  # prints the children's Phase and Progress messages (None: dropped)
        self.fix: list[str] = []  # what the user does about the cause
        # name -> when it gets SIGKILL: the survivors of a dead child's rank, or every child after an MPS server fault
        self.kill_at: dict[str, float] = {}

    # ---------------------------------------------------------------- the loop

    def run(self) -> None:
        """Supervise until every child has exited."""
        startup_deadline = time.monotonic() + self.specs[0].training.loop.startup_timeout_s
        while True:
            if self.interrupted_by and not self.stop_event.is_set():
                self.fail("interrupted", f"{self.interrupted_by} received")
            self._receive()
            self._check_run_dir()
            alive = {name: p.is_alive() for name, p in self.procs.items()}
            if not any(alive.values()):
                self._conclude()
                return
            self._on_exits(alive)
            if not self.verified and time.monotonic() > startup_deadline:
                self.fail("failed", f"start-up took longer than {self.specs[0].training.loop.startup_timeout_s:g} s", "launcher")
            self._escalate()

    def _receive(self) -> None:
        try:
            msg = self.inbox.get(timeout=0.2)
        except queue.Empty:
            return
        self.handle(msg)

    def _check_run_dir(self) -> None:
        """A run directory removed (or moved away) mid-run is a named failure, not a child's traceback."""
        run_dir = getattr(self.specs[0], "run_dir", None)
        if run_dir and self.cause is None and not os.path.isdir(run_dir):
            self.fail("failed", f"the run directory {run_dir} was removed during the run", "launcher")

    def _on_exits(self, alive: dict[str, bool]) -> None:
        """Some children have exited, not all: a crash is a fault; a collector gone on its own stops the run."""
        dead = [name for name, is_alive in alive.items() if not is_alive]
        if not dead or self.stop_deadline is not None:
            return
        self._receive_pending()  # a Failed sent just before the exit names the cause, not the exit code
        if self.stop_deadline is not None:
            return
        crashed = [n for n in dead if self.procs[n].exitcode not in (0, None) and n not in self.finished]
        if crashed and self.status is None:
            self.fail("failed", self._death_cause(crashed[0]), crashed[0])
            self._kill_survivors_soon(crashed[0])
        elif not crashed and all(not alive[n] for n in self.procs if n.startswith("learner")):
            # every learner finished: the collectors were told to stop; give them the grace period
            self.stop_deadline = time.monotonic() + STOP_GRACE_S
        elif crashed or any(n.startswith("collector") for n in dead):
            self.stop_event.set()
            self.stop_deadline = time.monotonic() + STOP_GRACE_S

    def _escalate(self) -> None:
        """Past the stop deadline: first SIGTERM (the children save and stop), then SIGKILL for one stuck in
        native code; the survivors of a dead child's rank get SIGKILL at their own, shorter deadline."""
        now = time.monotonic()
        for name, when in self.kill_at.items():
            if now > when and self.procs[name].is_alive():
                self.procs[name].kill()
        if self.stop_deadline is None or now <= self.stop_deadline:
            return
        for p in self.procs.values():
            if p.is_alive():
                p.kill() if self.terminated else p.terminate()
        self.terminated = True
        self.stop_deadline = now + STOP_GRACE_S

    def _conclude(self) -> None:
        """Every child has exited: read what is left, judge the exit codes."""
        self.drain()
        for name, p in self.procs.items():
            if p.exitcode in (0, None):
                continue
            if name in self.finished:  # its work and summary were in; only its teardown hung
                self.notes.append(f"the {name} had reported its summary but did not exit; it was stopped "
                                  f"(exit code {p.exitcode})")
            elif self.status != "failed":
                self.fail("failed", self._death_cause(name), name)
        if self.status is None:
            self.status, self.cause = "failed", "the processes ended without a summary"

    def _death_cause(self, name: str) -> str:
        """A child that ended without reporting an exception: killed, aborted, or taken down with its MPS server."""
        code = self.procs[name].exitcode
        how = f"exited with code {code}"
        if code is not None and code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name} (exit code {code})"
            except ValueError:
                pass
        if self._mps_server_failed():
            return f"{MPS_SERVER_FAULT}: the MPS server of this run's daemon is gone; the {name} {how}"
        return f"{name.split('[')[0]}_died: the {name} {how}"

    def _mps_server_failed(self, text: str | None = None) -> bool:
        """Under MPS: the exception names an MPS failure, or the verified server has exited. Sets the fix."""
        if self.mps_server_gone is None:
            return False
        if not names_mps_failure(text) and not self.mps_server_gone():
            return False
        self.fix = mps_server_fault_fix(self.mps_log_dir)
        return True

    def _kill_survivors_soon(self, dead: str | None = None) -> None:
        """SIGKILL in DEAD_CHILD_GRACE_S for the children of `dead`'s rank (every child when None): they may be
        stuck on its GPU work. The other ranks' children stop in order, their learners saving."""
        at = time.monotonic() + DEAD_CHILD_GRACE_S
        for name in self.procs:
            if dead is None or rank_of(name) == rank_of(dead):
                self.kill_at[name] = min(self.kill_at.get(name, math.inf), at)

    # ---------------------------------------------------------------- messages

    def _queued(self):
        """The messages queued now, without waiting (a closed or broken queue has none)."""
        while True:
            try:
                yield self.inbox.get_nowait()
            except (queue.Empty, OSError, ValueError):
                return

    def _receive_pending(self) -> None:
        for msg in self._queued():
            self.handle(msg)

    def handle(self, msg) -> None:
        if isinstance(msg, (Phase, Progress)):
            if self.console is not None:
                self.console.show(msg)
        elif isinstance(msg, Ready):
            self._on_ready(msg)
        elif isinstance(msg, Failed):
            self._check_run_dir()  # a child that failed on a removed run directory: that is the cause
            killed = [n for n, p in self.procs.items()
                      if n != msg.name and (p.exitcode or 0) < 0 and n not in self.finished]
            if self.cause is None and self._mps_server_failed(msg.traceback):
                self.fail("failed", f"{MPS_SERVER_FAULT}: the {msg.name} lost its MPS server (CUDA MPS error)",
                          msg.name, msg.traceback)
                self._kill_survivors_soon()  # nothing on that GPU can be saved any more
            elif killed and self.status is None:
                # a peer killed first: the exception is its consequence (e.g. a CUDA IPC error), not the cause
                self.notes.append(f"the {msg.name} then raised: {last_line(msg.traceback)}")
                self.fail("failed", self._death_cause(killed[0]), killed[0], msg.traceback)
                self._kill_survivors_soon(killed[0])
            else:
                self.fail("failed", f"the {msg.name} raised an exception", msg.name, msg.traceback)
        elif isinstance(msg, Finished):
            self.record_finished(msg)
        elif isinstance(msg, WorldFailed):
            self.world_failed(msg)
        else:
            self.fail("failed", f"protocol error: the launcher received a {type(msg).__name__}, which it does "
                      "not take", "launcher")

    def _on_ready(self, msg: Ready) -> None:
        self.ready[msg.name] = msg
        if len(self.ready) == 2 * len(self.specs) and not self.verified:
            error = self.verify(self.ready)
            if self.interrupted_by:  # verification was cut short: the run loop stops the run as interrupted
                return
            if error is not None:
                print(error.render(), file=sys.stderr)
                self.fail("failed", f"{error.prerequisite.value}: {error.message}", "launcher")
                return
            self.verified = True
            self.go_event.set()

    def record_finished(self, msg: Finished) -> None:
        """A child delivered its summary; rank 0's learner summary sets the run's status."""
        self.finished.add(msg.name)
        if msg.name == self.specs[0].name("learner"):
            self.learner_summary = msg.summary or {}
            if self.status is None:
                self.status = self.learner_summary.get("status")

    def world_failed(self, msg: WorldFailed) -> None:
        """Another rank is gone, or the ranks never met: that is the cause, named. This rank's children stop
        as after any fault (a learner stuck in a collective with the gone rank is ended by the escalation)."""
        self.fail("failed", msg.cause, msg.name if msg.rank is None else f"rank[{msg.rank}]")

    def drain(self) -> None:
        """Read what the exited children left queued: a traceback, a summary."""
        for msg in self._queued():
            if isinstance(msg, Failed) and self.traceback is None:
                self.traceback = msg.traceback
                self.failed_role = self.failed_role or msg.name
            elif isinstance(msg, Finished):
                self.record_finished(msg)
            elif isinstance(msg, WorldFailed):
                self.world_failed(msg)
            elif isinstance(msg, (Phase, Progress)) and self.console is not None:
                self.console.show(msg)

    def fail(self, status: str, cause: str, role: str | None = None, traceback: str | None = None) -> None:
        """Stop the run. The first cause wins; a status reported by the learner itself ("interrupted") gets
        its cause here."""
        if self.status in (None, "completed") or self.cause is None:
            self.status, self.cause, self.failed_role = status, cause, role
        if traceback and not self.traceback:
            self.traceback = traceback
        self.stop_event.set()
        if self.stop_deadline is None:
            self.stop_deadline = time.monotonic() + STOP_GRACE_S

    # ---------------------------------------------------------------- signals and the end

    @contextmanager
    def signals_caught(self):
        """SIGINT, SIGTERM and SIGHUP (the terminal or ssh connection closed) to the launcher stop the run
        (`interrupted_by`) instead of killing it."""

        def handler(signum, _frame):
            self.interrupted_by = signal.Signals(signum).name

        previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            try:
                previous[sig] = signal.signal(sig, handler)
            except ValueError:  # not the main thread (e.g. embedded use): leave signals alone
                pass
        try:
            yield
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)

    def stop_all(self) -> None:
        """Join every child; one still running after the grace period is terminated, then killed."""
        deadline = time.monotonic() + STOP_GRACE_S
        for p in self.procs.values():
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        for p in self.procs.values():
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)

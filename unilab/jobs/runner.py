"""One job: a `train` command (or another unilab command) as a child process, started and ended one way.

The job runs in a session of its own, so Ctrl-C at the terminal reaches this process only, which passes it on:
`stop` sends a signal to the job's process group (the launcher and its learner and collector, as Ctrl-C at a
terminal would), waits a grace period for the run to end and write its summary, then kills the group; a second
Ctrl-C during that wait cuts it short. Used as a context manager, a job that is still running when the block
raises (KeyboardInterrupt included) is stopped that way before the exception goes on; `interrupts()` makes
SIGTERM to this process such an interrupt too.

Its console (stdout and stderr, as one stream) goes where the caller needs it: inherited (the default), to a log
file, or line by line to a callback (a prefixed console, start-up lines with their times), then also to the log
file as it came. What the run ended as is read back from its run_summary.json (`status`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Callable, Iterator, Sequence

from unilab.exit_codes import STATUS
from unilab.processes import end_child
from unilab.rundir.layout import SUMMARY_FILE

STOP_GRACE_S = 120.0  # a job told to stop ends its run and writes its summary within this, or it is killed
RELAY_JOIN_S = 10.0  # the relay of a job that ended has its last lines by then
INSIST_GRACE_S = 5.0  # after a second interrupt: SIGTERM, then SIGKILL this much later


class JobProcess:
    """`argv` started at once, in a session of its own, stdin closed. `log`: its console goes to this file (or a
    copy of it, with `on_line`); `on_line`: each line of its console, as it comes; neither: this console."""

    def __init__(self, argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: str | None = None,
                 log: Path | None = None, on_line: Callable[[str], None] | None = None, grace_s: float = STOP_GRACE_S):
        self.argv = list(argv)
        self.grace_s = grace_s
        self._log: IO | None = None
        self._relay: threading.Thread | None = None
        if on_line is None:
            if log is not None:
                self._log = open(log, "wb")
            try:
                self.proc = subprocess.Popen(self.argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=self._log,
                                             stderr=subprocess.STDOUT if self._log else None, start_new_session=True)
            except BaseException:
                self.close()
                raise
        else:
            self.proc = subprocess.Popen(self.argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, text=True, errors="replace",
                                         start_new_session=True)
            self._relay = threading.Thread(target=_relay, args=(self.proc, on_line, log), daemon=True)
            self._relay.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout)

    def signal_group(self, signum: int) -> None:
        """`signum` to the job's process group (nothing once it has ended)."""
        try:
            os.killpg(self.proc.pid, signum)
        except ProcessLookupError:
            pass

    def stop(self, signum: int = signal.SIGINT, grace_s: float | None = None) -> int:
        """`signum` to the job's process group, then its end: the group killed where it has not ended `grace_s`
        later (the job's own grace by default); a second interrupt meanwhile ends it at once (SIGTERM, then
        SIGKILL). The exit status."""
        if self.proc.poll() is None:
            try:
                end_child(self.proc, self.grace_s if grace_s is None else grace_s, first=signum, group=True)
            except KeyboardInterrupt:
                end_child(self.proc, INSIST_GRACE_S, group=True)
        return self.proc.returncode

    def close(self) -> None:
        """Its console's last lines relayed and its log file closed (the job has ended)."""
        if self._relay is not None:
            self._relay.join(timeout=RELAY_JOIN_S)
        if self._log is not None:
            self._log.close()

    def __enter__(self) -> JobProcess:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is not None:
                self.stop()
        finally:
            self.close()


def _relay(proc: subprocess.Popen, on_line: Callable[[str], None], log: Path | None) -> None:
    try:
        sink = open(log, "w", buffering=1) if log is not None else None
    except OSError:  # the log is a convenience: the lines still reach on_line
        sink = None
    with proc.stdout:
        for line in proc.stdout:
            on_line(line)
            if sink is not None:
                sink.write(line)
    if sink is not None:
        sink.close()


def end_all(jobs: Sequence[JobProcess], signum: int = signal.SIGTERM, grace_s: float = STOP_GRACE_S) -> None:
    """Several jobs stopped together: `signum` to each, one grace period for all, then those left are killed."""
    for job in jobs:
        job.signal_group(signum)
    deadline = time.monotonic() + grace_s
    for job in jobs:
        try:
            job.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            job.signal_group(signal.SIGKILL)
            job.wait()


@contextmanager
def interrupts() -> Iterator[None]:
    """SIGTERM to this process raises KeyboardInterrupt, as Ctrl-C does, until the block ends (main thread)."""

    def interrupt(_signum, _frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def read_summary(run_dir: str | Path | None) -> dict | None:
    """The run's run_summary.json (None: no run directory, no summary, or one that does not parse)."""
    if run_dir is None:
        return None
    try:
        summary = json.loads((Path(run_dir) / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def summary_status(run_dir: str | Path | None) -> str | None:
    """The status the run's summary records (None: no summary)."""
    return (read_summary(run_dir) or {}).get("status")


def job_status(run_dir: str | Path | None, code: int | None) -> str:
    """What a job ended as: its run's recorded status, else the one its exit status names."""
    return summary_status(run_dir) or STATUS.get(code, f"exit {code}")

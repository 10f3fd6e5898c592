"""`train -m ... hydra/launcher=unilab_packed`: up to `hydra.launcher.max_parallel` jobs of a sweep at once.

Each job is a `train` launcher of its own (the command `PackedSweep.command` gives: for `train`, `python -m
unilab.cli.packed_job` with the job's overrides): its own run directory, learner and collector, evidence and
console, as when it runs alone; under +execution=mps each job's children are verified as clients of the one
daemon. This process only starts, watches and stops those launchers (unilab.jobs.runner); like them it never
creates a CUDA context (GPU memory is read through NVML, unilab.jobs.memory_guard).

Jobs start in the sweep's order as slots free up and the memory guard lets them. A failed job is recorded and the
others go on; SIGINT or SIGTERM here is passed on to every running job (each stops its run as a lone `train` does),
no further job starts, and the sweep ends as interrupted, as it does when a job is interrupted on its own. Each
job's console lines are shown prefixed with `[#N]` and kept in `<hydra.sweep.dir>/job-N.log`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from unilab.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, STATUS

from .memory_guard import FAIL, START, MemoryGuard
from .runner import JobProcess, end_all

POLL_S = 0.5
STOP_WAIT_S = 180.0  # a stopped job's launcher ends its run within its own bounded grace; past this it is killed
_PRINT_LOCK = threading.Lock()


@dataclass
class PackedJob:
    index: int
    overrides: list[str]  # the job's overrides, as Hydra's sweeper made them
    shown: list[str]  # what the sweep's summary shows of them (the swept values)
    ordinals: list[int]  # the CUDA devices it runs on; [] on the CPU


@dataclass
class _Running:
    job: PackedJob
    process: JobProcess
    result: Path


@dataclass
class PackedSweep:
    max_parallel: int
    guard: MemoryGuard
    # the job's command line, given the file where its launcher reports its run directory ({"run_dir": ...})
    command: Callable[[PackedJob, Path], list[str]]
    console_dir: Path  # where job-N.log goes
    # each ended (or never started) job, with its exit status and its run directory, for the sweep's summary
    record: Callable[[PackedJob, int, str | None], None]
    interrupted: str | None = None  # the signal (or the job) that stopped the sweep
    _signalled: str | None = field(default=None, repr=False)
    _kill_at: float | None = field(default=None, repr=False)  # when jobs still running after a stop are killed
    _announced: set[int] = field(default_factory=set, repr=False)  # jobs whose wait for memory was said

    def run(self, jobs: list[PackedJob]) -> None:
        """Every job, up to max_parallel at once; returns when none is left running."""
        pending, running = deque(jobs), {}
        with tempfile.TemporaryDirectory(prefix="unilab-packed-") as results, self._signals_caught():
            try:
                while pending or running:
                    self._on_signal(running)
                    self._reap(running)
                    if self.interrupted:
                        pending.clear()
                    while pending and len(running) < self.max_parallel and not self.interrupted:
                        if not self._try_start(pending[0], running, Path(results)):
                            break  # it waits for memory: the jobs after it keep their turn
                        pending.popleft()
                    self.guard.measure({i: (r.process.pid, r.job.ordinals) for i, r in running.items()})
                    if pending or running:
                        time.sleep(POLL_S)
            finally:
                # only after an error here: none is left otherwise
                end_all([r.process for r in running.values()], signal.SIGTERM, STOP_WAIT_S)

    def _on_signal(self, running: dict) -> None:
        """A signal here is passed on once to every running job; those still running STOP_WAIT_S later are killed."""
        if self._signalled and self._kill_at is None:
            self.interrupted = self._signalled
            self._kill_at = time.monotonic() + STOP_WAIT_S
            say(f"{self._signalled} received: stopping {len(running)} running job(s); no further job starts")
            for r in running.values():
                r.process.signal_group(getattr(signal, self._signalled))
        elif self._kill_at is not None and time.monotonic() > self._kill_at:
            for r in running.values():
                r.process.signal_group(signal.SIGKILL)

    def _try_start(self, job: PackedJob, running: dict, results: Path) -> bool:
        """True when the job is done with: started, or failed by the memory guard; False while it waits."""
        verdict = self.guard.verdict(job.index, job.ordinals)
        if verdict.action == FAIL:
            say(f"job #{job.index} not started: {verdict.message}")
            self.record(job, EXIT_FAILED, None)
            return True
        if verdict.action != START:
            if job.index not in self._announced:
                self._announced.add(job.index)
                say(f"job #{job.index} waits for GPU memory: {verdict.message}")
            return False
        result = results / f"job-{job.index}.json"
        env = dict(os.environ, PYTHONUNBUFFERED="1")  # its lines reach the console as they are printed
        # Its own session: Ctrl-C at the terminal reaches this process only, which passes it on once to each job.
        process = JobProcess(self.command(job, result), env=env, log=self.console_dir / f"job-{job.index}.log",
                             on_line=lambda line, index=job.index: _show(index, line))
        running[job.index] = _Running(job, process, result)
        say(f"job #{job.index} started (pid {process.pid}): {' '.join(job.shown) or '(no overrides)'}")
        return True

    def _reap(self, running: dict) -> None:
        for index in [i for i, r in running.items() if r.process.poll() is not None]:
            r = running.pop(index)
            r.process.close()
            code = r.process.returncode if r.process.returncode >= 0 else EXIT_FAILED  # killed by a signal
            self.record(r.job, code, _run_dir(r.result))
            peak = self.guard.peaks.get(index)  # sized by NVML; the floor of the next jobs' estimate
            held = f"; its processes held at most {peak:.0f} MiB of GPU memory" if peak else ""
            say(f"job #{index} {STATUS.get(code, 'failed')} (exit {code}){held}")
            if code == EXIT_INTERRUPTED and not self.interrupted:
                self.interrupted = f"job #{index} was interrupted"  # as a sequential sweep: no further job starts

    @contextmanager
    def _signals_caught(self):
        def caught(signum, _frame):
            self._signalled = signal.Signals(signum).name

        saved = {s: signal.signal(s, caught) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, handler in saved.items():
                signal.signal(s, handler)


def say(text: str) -> None:
    with _PRINT_LOCK:
        print(f"unilab: {text}", file=sys.stderr, flush=True)


def _show(index: int, line: str) -> None:
    """A job's console line on this console, prefixed with its number."""
    with _PRINT_LOCK:
        sys.stderr.write(f"[#{index}] {line}")
        sys.stderr.flush()


def _run_dir(result: Path) -> str | None:
    """The run directory a job's launcher reported (none: it ended before it made one, or was killed)."""
    try:
        return json.loads(result.read_text()).get("run_dir")
    except (OSError, ValueError):
        return None

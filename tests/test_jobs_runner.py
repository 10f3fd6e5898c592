"""unilab.jobs.runner: a job's own process group, Ctrl-C and SIGTERM passed on to it, its bounded end, its
console, and its status read back. The jobs are tests/fake_job.py (no training)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from unilab.jobs import runner
from unilab.jobs.runner import JobProcess, interrupts, job_status, summary_status
from unilab.processes import stat_fields

FAKE = [sys.executable, str(Path(__file__).resolve().parent / "fake_job.py")]
BOUND_S = 60.0  # generous: only a broken job runner comes near it


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + BOUND_S
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def _gone(pid: int) -> bool:
    """The process has ended (gone, or a zombie nobody reaped yet), within BOUND_S."""
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        fields = stat_fields(pid)
        if fields is None or fields[0] in ("Z", "X"):
            return True
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)  # a failed test leaves no process behind
    return False


def _pids(run: Path) -> dict:
    _wait_for(run / "ready")
    return json.loads((run / "pids.json").read_text())


def _signals(run: Path) -> list[str]:
    return (run / "signals").read_text().split() if (run / "signals").exists() else []


def test_ctrl_c_stops_the_jobs_whole_group_and_its_status_is_interrupted(tmp_path):
    """Ctrl-C at the terminal reaches the runner only (the job has its own session) and raises KeyboardInterrupt
    in the block: the job's process group gets SIGINT (its child too, which the job itself never signals), the
    job writes its summary and ends, and the interrupt goes on."""
    run = tmp_path / "run"
    job = JobProcess([*FAKE, str(run)], log=tmp_path / "job.log")
    with pytest.raises(KeyboardInterrupt), job:
        pids = _pids(run)
        raise KeyboardInterrupt  # what Ctrl-C raises here
    assert job.returncode == 130 and _signals(run) == ["SIGINT"]
    assert job_status(run, job.returncode) == "interrupted"
    assert _gone(pids["child"]), "the job's child outlived the stop: the signal did not reach the job's group"


def test_sigterm_here_stops_the_job_as_ctrl_c_does(tmp_path):
    run = tmp_path / "run"
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), interrupts(), JobProcess([*FAKE, str(run), "--alone"]) as job:
        _pids(run)
        signal.raise_signal(signal.SIGTERM)
        job.wait(timeout=BOUND_S)  # not reached: the SIGTERM raised KeyboardInterrupt
    assert _signals(run) == ["SIGINT"] and job.returncode == 130
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_job_that_ignores_the_stop_is_killed_with_its_group_after_the_grace(tmp_path):
    run = tmp_path / "run"
    with JobProcess([*FAKE, str(run), "--ignore"], grace_s=0.5) as job:
        pids = _pids(run)
        assert job.stop(signal.SIGTERM) == -signal.SIGKILL
    assert _signals(run) == ["SIGTERM"]
    assert _gone(pids["child"])
    assert summary_status(run) is None and job_status(run, job.returncode) == "exit -9"


def test_a_second_interrupt_during_the_grace_ends_the_job_at_once(tmp_path, monkeypatch):
    """The gate's promise: a second Ctrl-C while a stopped job winds down does not wait out the grace period; the
    job gets SIGTERM, then SIGKILL (a short grace of its own)."""
    monkeypatch.setattr(runner, "INSIST_GRACE_S", 0.5)
    run = tmp_path / "run"
    job = JobProcess([*FAKE, str(run), "--ignore", "--alone"], grace_s=BOUND_S * 10)
    _pids(run)

    def second_ctrl_c():  # once the job has its SIGINT, the runner is in the grace period
        _wait_for(run / "signals")
        signal.raise_signal(signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    try:
        threading.Thread(target=second_ctrl_c, daemon=True).start()
        try:
            code = job.stop(signal.SIGINT)
        except KeyboardInterrupt:
            pytest.fail("the second interrupt went on before the job had ended")
        assert code == -signal.SIGKILL
    finally:
        signal.signal(signal.SIGINT, previous)
        job.signal_group(signal.SIGKILL)  # nothing once it has ended; a failed test leaves no job behind
        job.close()
    assert _signals(run) == ["SIGINT", "SIGTERM"]


@pytest.mark.parametrize("end, expected", [
    (["completed", "0"], "completed"),
    (["failed", "1"], "failed"),
    (["interrupted", "1"], "interrupted"),  # the summary's word wins over the exit status's
    (["none", "2"], "refused"),  # no summary: the exit status's
    (["garbled", "1"], "failed"),  # a summary that does not parse counts as none
    (["none", "7"], "exit 7"),
])
def test_the_status_is_read_back_from_the_summary(tmp_path, end, expected):
    run = tmp_path / "run"
    with JobProcess([*FAKE, str(run), "--alone", "--end", *end], log=tmp_path / "job.log") as job:
        code = job.wait(timeout=BOUND_S)
    assert code == int(end[1]) and job_status(run, code) == expected
    assert summary_status(run) == (end[0] if end[0] not in ("none", "garbled") else None)


def test_the_console_goes_to_the_log_or_line_by_line_with_a_copy(tmp_path):
    with JobProcess([*FAKE, str(tmp_path / "a"), "--alone", "--end", "completed", "0"],
                    log=tmp_path / "a.log") as job:
        job.wait(timeout=BOUND_S)
    assert sorted((tmp_path / "a.log").read_text().splitlines()) == ["a line on stderr", "a line on stdout"]
    lines = []
    with JobProcess([*FAKE, str(tmp_path / "b"), "--alone", "--end", "completed", "0"], log=tmp_path / "b.log",
                    on_line=lines.append) as job:
        job.wait(timeout=BOUND_S)
    assert sorted(lines) == ["a line on stderr\n", "a line on stdout\n"]
    assert sorted((tmp_path / "b.log").read_text().splitlines()) == ["a line on stderr", "a line on stdout"]


# --- `python -m unilab.jobs`: one job for a script (benchmarks/gpu_session.sh) -----------------------------------

def _entry(*args: str, env: dict | None = None):
    import subprocess

    root = str(Path(__file__).resolve().parents[1])
    return subprocess.run([sys.executable, "-m", "unilab.jobs", *args], capture_output=True, text=True, timeout=BOUND_S,
                          env={**os.environ, "PYTHONPATH": root, **(env or {})})


def test_the_entry_runs_a_job_with_its_log_environment_and_exit_status(tmp_path):
    run, log = tmp_path / "run", tmp_path / "job.log"
    out = _entry("--log", str(log), "--env", "FAKE_JOB_SEEN=yes", "--", *FAKE, str(run), "--end", "completed", "3")
    assert out.returncode == 3 and out.stdout.strip() == "rc=3 (job.log)"
    assert summary_status(run) == "completed" and log.read_text()  # its console in the log, not here
    script = "import os, sys; print(os.environ['FAKE_JOB_SEEN']); sys.exit(4)"
    seen = _entry("--env", "FAKE_JOB_SEEN=yes", "--", sys.executable, "-c", script)
    assert seen.returncode == 4 and seen.stdout.strip() == "yes"


def test_the_entrys_timeout_stops_the_job_as_sigterm_does(tmp_path):
    run = tmp_path / "run"
    out = _entry("--timeout", "0.5", "--", *FAKE, str(run))  # the fake waits until it is signalled
    assert out.returncode == 130 and _signals(run) == ["SIGTERM"] and summary_status(run) == "interrupted"
    assert "the job is stopped (SIGTERM)" in out.stderr


def test_the_entry_needs_a_command():
    out = _entry("--log", "x.log")
    assert out.returncode == 2 and "give the job's command after --" in out.stderr

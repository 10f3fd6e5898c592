"""The launcher's console (phases, the progress line), the children's stderr logs, and how a dead child or a
failed MPS server is named."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest

from unilab.launcher.console import Console
from unilab.launcher.launch import mps_log_dir, mps_server_gone
from unilab.launcher.supervisor import DEAD_CHILD_GRACE_S, STOP_GRACE_S, Supervisor
from unilab.mps.errors import names_mps_failure
from unilab.rundir.summary import RunSummary
from unilab.runtime.child_log import stderr_log_name
from unilab.runtime.learner_report import RollingEpisodes
from unilab.runtime.protocol import Failed, Phase, Progress


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def progress(done: int, *, rank: int = 0, episodes: int = 0, ret=None, length=None) -> Progress:
    return Progress(f"learner[{rank}]", rank, done, 1000, done * 4096, 123456.0, ret, length, episodes, 5000)


def test_progress_line_has_elapsed_eta_steps_and_rolling_episodes():
    clock, out = Clock(), []
    console = Console(world_size=1, clock=clock)
    console.print = lambda text, rank=None: out.append(text)
    clock.now += 10
    console.show(progress(100))
    clock.now += 10
    console.show(progress(200, episodes=117, ret=3.25, length=412.4))
    first, second = out
    assert "0:00:10 elapsed" in first and "ETA -" in first and "(none yet)" in first
    # 100 iterations in 10 s, 800 left: 80 s
    assert "[it 200/1000] 0:00:20 elapsed, ETA 0:01:20" in second
    assert "819.20k env steps, 123.46k env-steps/s" in second
    assert "return 3.25, length 412 steps (last 117 episodes)" in second and "replay 5.00k" in second


def test_eta_follows_the_recent_rate():
    clock = Clock()
    console = Console(clock=clock)
    assert console.eta_s(0, 0, 1000) is None
    for done in range(100, 600, 100):  # 10 it/s for 50 s ...
        clock.now += 10
        console.eta_s(0, done, 1000)
    for done in range(600, 1000, 10):  # ... then 1 it/s for 40 s
        clock.now += 10
        eta = console.eta_s(0, done, 1000)
    assert eta == pytest.approx(10.0, rel=0.02)  # 10 left at 1 it/s, not at the run's mean rate


def test_rank_prefix_only_under_data_parallel(capsys):
    Console(world_size=2).show(Phase("learner[1]", "learner: built in 1.0 s"))
    Console(world_size=1).show(Phase("learner", "learner: built in 1.0 s"))
    err = capsys.readouterr().err.splitlines()
    assert err == ["unilab: [rank 1] learner: built in 1.0 s", "unilab: learner: built in 1.0 s"]


def test_rolling_episodes_cover_the_last_hundred():
    rolling = RollingEpisodes(episodes=100)
    assert rolling.means() == (None, None) and rolling.count() == 0
    rolling.add(60, 60 * 1.0, 60 * 10.0)
    rolling.add(0, 0.0, 0.0)  # an iteration that ended no episode keeps the means
    assert rolling.means() == (1.0, 10.0)
    rolling.add(60, 60 * 2.0, 60 * 20.0)
    rolling.add(60, 60 * 3.0, 60 * 30.0)  # the first 60 drop out: 120 episodes left
    assert rolling.count() == 120 and rolling.means() == (2.5, 25.0)


def test_stderr_log_names():
    assert stderr_log_name("learner") == "logs/learner.stderr"
    assert stderr_log_name("collector[0]") == "logs/collector.stderr"
    assert stderr_log_name("learner[2]") == "logs/learner_rank2.stderr"


def test_a_child_stderr_goes_to_its_log_and_only_unilab_lines_to_the_console(tmp_path):
    code = (
        "import os, sys\n"
        "from unilab.runtime.child_log import log_stderr\n"
        f"log_stderr({str(tmp_path)!r}, 'collector')\n"
        "print('unilab: collector: worlds built', file=sys.stderr, flush=True)\n"
        "print('Traceback (most recent call last):', file=sys.stderr, flush=True)\n"
        "os.write(2, b'terminate called after throwing an instance of c10::Error\\n')\n"
        "os.abort()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == -6
    assert done.stderr == "unilab: collector: worlds built\n"
    log = (tmp_path / "logs" / "collector.stderr").read_text()
    assert "worlds built" in log and "Traceback" in log and "c10::Error" in log
    assert "Fatal Python error: Aborted" in log  # faulthandler: the Python stack of a native abort


def test_a_console_that_went_away_drops_the_lines_after_it(tmp_path):
    """A child's console lines once its console is gone (a closed pipe here, a hung-up terminal in an ssh
    connection closed mid-run): the child goes on and logs; later writes, the interpreter's at exit included,
    do not fail."""
    code = (
        "import os, sys\n"
        "from unilab.runtime.child_log import log_stderr\n"
        f"log_stderr({str(tmp_path)!r}, 'learner')\n"
        "sys.stdin.read()\n"  # until the test closes the pipes: the console is gone
        "print('unilab: learner: saving the checkpoint', file=sys.stderr, flush=True)\n"
        "os.write(2, b'native after\\n')\n"
        "print('unilab: learner: saved', file=sys.stderr, flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stderr.close()  # the reader is gone: EPIPE, as EIO from a hung-up terminal
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    log = (tmp_path / "logs" / "learner.stderr").read_text()
    assert "saving the checkpoint" in log and "native after" in log and "unilab: learner: saved" in log


def test_the_hang_up_safe_console_reraises_other_errors():
    from unilab.runtime.child_log import HangUpSafe

    class Full:
        def write(self, text):
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        HangUpSafe(Full()).write("x")


@pytest.mark.parametrize("text, expected", [
    ("RuntimeError: CUDA error: cudaErrorMpsRpcFailure", True),
    ("torch.AcceleratorError: CUDA error: the remote procedural call between the MPS server and the MPS client "
     "failed", True),
    ("warp: CUDA_ERROR_MPS_SERVER_NOT_READY", True),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", False),
    (None, False),
])
def test_mps_failure_texts(text, expected):
    assert names_mps_failure(text) is expected


class _Proc:
    def __init__(self, exitcode, clock=None):
        self.exitcode = exitcode
        self.clock = clock
        self.signalled_at = None  # on `clock`

    def is_alive(self) -> bool:
        return self.exitcode is None

    def kill(self) -> None:
        self._end(-9)

    def terminate(self) -> None:
        self._end(-15)

    def _end(self, code: int) -> None:
        self.exitcode = code
        self.signalled_at = self.clock() if self.clock else None


class _SilentInbox:
    """The launcher's inbox when no child says anything more: each wait takes its whole timeout, on `clock`."""

    def __init__(self, clock: Clock):
        self.clock = clock

    def get(self, block=True, timeout=None):
        self.clock.now += timeout
        raise queue.Empty

    def get_nowait(self):
        raise queue.Empty


class _Spec:
    training = SimpleNamespace(loop=SimpleNamespace(startup_timeout_s=60.0))

    @staticmethod
    def name(role: str) -> str:
        return role


def _supervise(procs, *, messages=(), server_gone=None, inbox=None) -> Supervisor:
    inbox = queue.Queue() if inbox is None else inbox
    for msg in messages:
        inbox.put(msg)
    sup = Supervisor([_Spec()], procs, inbox, threading.Event(), threading.Event(), verify=None,
                     mps_server_gone=server_gone, mps_log_dir="/tmp/mps/log")
    sup.verified = True
    sup.run()
    return sup


@pytest.mark.parametrize("server_gone, cause", [
    (lambda: True, "mps_server_fault: the MPS server of this run's daemon is gone; the learner was killed by "
                   "SIGABRT (exit code -6)"),
    (lambda: False, "learner_died: the learner was killed by SIGABRT (exit code -6)"),
    (None, "learner_died: the learner was killed by SIGABRT (exit code -6)"),
])
def test_an_aborted_child_under_mps_names_the_server(monkeypatch, server_gone, cause):
    import unilab.launcher.supervisor as supervisor

    clock = Clock()  # the supervisor's: its deadlines are checked against the grace periods, not the wall clock
    monkeypatch.setattr(supervisor, "time", SimpleNamespace(monotonic=clock))
    start, collector = clock.now, _Proc(None, clock)
    sup = _supervise({"learner": _Proc(-6), "collector": collector}, server_gone=server_gone,
                     inbox=_SilentInbox(clock))
    assert sup.cause == cause and sup.failed_role == "learner"
    # the collector, alive and ignoring the stop event, was killed (no SIGTERM first) after the short grace, not
    # after STOP_GRACE_S
    assert collector.exitcode == -9
    assert DEAD_CHILD_GRACE_S < collector.signalled_at - start < DEAD_CHILD_GRACE_S + 1 < STOP_GRACE_S
    assert bool(sup.fix) is (cause.startswith("mps_server_fault"))
    if sup.fix:
        assert any("/tmp/mps/log/server.log" in line for line in sup.fix)
        assert any("unilab mps start" in line for line in sup.fix)
        assert any("unilab mps doctor" in line for line in sup.fix)


class _Signalled(_Proc):
    """A child that ignores the stop event and ends on the first signal, which its exit code names."""

    def kill(self) -> None:
        self.exitcode = -9

    def terminate(self) -> None:
        self.exitcode = -15


def test_a_dead_child_takes_only_its_own_ranks_survivors_down_at_once(monkeypatch):
    """kill -9 of rank 1's learner: rank 1's collector (it shares the dead learner's GPU buffers) gets SIGKILL
    after the short grace; rank 0's children share nothing with it and stop in order (SIGTERM, on which they
    save), so rank 0's learner can write its stop-time checkpoint."""
    import unilab.launcher.supervisor as supervisor

    monkeypatch.setattr(supervisor, "STOP_GRACE_S", DEAD_CHILD_GRACE_S + 1.0)  # the orderly stop comes later

    class Ranks(_Spec):
        @staticmethod
        def name(role: str) -> str:
            return f"{role}[0]"

    procs = {"learner[0]": _Signalled(None), "collector[0]": _Signalled(None), "learner[1]": _Signalled(-9),
             "collector[1]": _Signalled(None)}
    sup = Supervisor([Ranks(), Ranks()], procs, queue.Queue(), threading.Event(), threading.Event(), verify=None)
    sup.verified = True
    sup.run()
    assert sup.cause == "learner_died: the learner[1] was killed by SIGKILL (exit code -9)"
    assert sup.stop_event.is_set()
    assert {name: p.exitcode for name, p in procs.items()} == {
        "learner[0]": -15, "collector[0]": -15, "learner[1]": -9, "collector[1]": -9}


def test_an_mps_error_in_a_traceback_is_the_server_fault():
    tb = "Traceback (most recent call last):\n  ...\nRuntimeError: CUDA error: cudaErrorMpsClientTerminated\n"
    sup = _supervise({"learner": _Proc(1), "collector": _Proc(1)}, messages=[Failed("collector", tb)],
                     server_gone=lambda: False)
    assert sup.cause.startswith("mps_server_fault: the collector lost its MPS server") and sup.fix
    # the same exception outside MPS is the child's own
    sup = _supervise({"learner": _Proc(1), "collector": _Proc(1)}, messages=[Failed("collector", tb)])
    assert sup.cause == "the collector raised an exception" and not sup.fix


def test_an_exception_after_a_peer_was_killed_names_the_kill():
    tb = "Traceback (most recent call last):\n  ...\nRuntimeError: CUDA error: invalid resource handle\n"
    sup = _supervise({"learner": _Proc(-9), "collector": _Proc(1)}, messages=[Failed("collector", tb)])
    assert sup.cause == "learner_died: the learner was killed by SIGKILL (exit code -9)"
    assert sup.failed_role == "learner"
    assert sup.notes == ["the collector then raised: RuntimeError: CUDA error: invalid resource handle"]


def test_the_console_names_the_fault_its_fix_and_the_log(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "collector.stderr").write_text("terminate called after ... (pages of C++ frames)\n")
    summary = RunSummary(status="failed", cause="mps_server_fault: the collector lost its MPS server",
                         failed_role="collector", traceback="Traceback ...\nRuntimeError: cudaErrorMpsRpcFailure",
                         wall_s=1.0, fix=["restart the daemon: unilab mps start"],
                         stderr_logs={"collector": "logs/collector.stderr", "learner": "logs/learner.stderr"})
    lines = summary.console(tmp_path).splitlines()
    assert lines[0].startswith("unilab: run failed: mps_server_fault")
    assert lines[1].strip() == "RuntimeError: cudaErrorMpsRpcFailure"
    assert lines[2:4] == ["  fix:", "    restart the daemon: unilab mps start"]
    assert lines[-1] == f"  the collector's full log: {tmp_path / 'logs' / 'collector.stderr'}"
    assert "C++" not in "\n".join(lines)


def test_the_server_recorded_at_verification_gone(monkeypatch):
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(done.stdout)

    def prepared(pid):
        sharing = SimpleNamespace(server_pid=pid)
        return SimpleNamespace(manifest=SimpleNamespace(ranks=[SimpleNamespace(cuda_process_sharing=sharing)]))

    import os

    assert mps_server_gone(prepared(dead_pid)) is True
    assert mps_server_gone(prepared(os.getpid())) is False
    assert mps_server_gone(SimpleNamespace(manifest=SimpleNamespace(ranks=[]))) is False  # not verified yet
    evidence = SimpleNamespace(pipe_directory="/tmp/unilab-mps-1000/GPU-x/pipe")
    monkeypatch.delenv("CUDA_MPS_LOG_DIRECTORY", raising=False)
    assert mps_log_dir(evidence) == "/tmp/unilab-mps-1000/GPU-x/log"


def test_a_cpu_run_ends_saying_what_it_was_and_what_comes_next():
    from unilab.launcher.console import after_a_cpu_run

    first, *steps = after_a_cpu_run("runs/smoke", "fastsac", "g1_walk_flat", 40, 16)
    assert "tiny CPU smoke run (40 iterations of 16 envs)" in first and "not expected to walk" in first
    commands = [line.split("  ")[1] for line in steps]
    assert commands == ["unilab play runs/smoke --video walk.mp4", "unilab eval runs/smoke", "unilab export runs/smoke",
                        "unilab sim2sim runs/smoke", "unilab demo",
                        "train --algo fastsac --task g1_walk_flat +execution=mps"]
    assert "GPU host" in steps[-1]
    tracking = after_a_cpu_run("my runs/t", "flashsac", "g1_motion_tracking", 40, 16)
    assert "not expected to track its motion" in tracking[0]
    assert "unilab eval 'my runs/t'" in "\n".join(tracking)


class _Slow(_Spec):
    training = SimpleNamespace(loop=SimpleNamespace(startup_timeout_s=600.0))  # not what ends these runs


@pytest.mark.integration  # several real processes, each test seconds of waiting on them
@pytest.mark.parametrize("collector, learner, cause", [
    # a message lost in the queue's feeder thread (as `AF_UNIX path too long` lost the collector's buffers) once
    # left the learner waiting for it, and the launcher with it
    ("unsendable", "waits", "the collector raised an exception"),
    # a child that dies before it is Ready; its peer ignores every stop request
    ("dies", "deaf", "collector_died: the collector exited with code 1"),
])
def test_a_child_that_fails_at_start_ends_the_run(collector, learner, cause):
    """Real spawned children (tests/fake_roles.py) under the real supervisor: the run ends, naming the collector,
    and no child is left."""
    import multiprocessing as mp

    from fake_roles import role

    ctx = mp.get_context("spawn")
    to_launcher, to_learner, to_collector, stop_event = ctx.Queue(), ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = {"learner": ctx.Process(target=role, args=("learner", learner, to_learner, to_collector, to_launcher,
                                                       stop_event)),
             "collector": ctx.Process(target=role, args=("collector", collector, to_collector, to_learner,
                                                         to_launcher, stop_event))}
    sup = Supervisor([_Slow()], procs, to_launcher, stop_event, ctx.Event(), verify=lambda ready: None)
    try:
        for p in procs.values():
            p.start()
        supervising = threading.Thread(target=sup.run, daemon=True)
        supervising.start()
        supervising.join(timeout=300)  # a hang guard: the run ends within the grace periods
        assert not supervising.is_alive(), "the supervisor kept waiting"
    finally:
        for p in procs.values():
            p.kill()
            p.join(timeout=10)
    assert (sup.status, sup.failed_role, sup.cause) == ("failed", "collector", cause)
    if collector == "unsendable":
        assert "sending a Unsendable message" in sup.traceback and "OSError: AF_UNIX path too long" in sup.traceback

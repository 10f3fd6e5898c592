"""The runtime protocol: typed messages, inboxes keyed by message type, the per-iteration stats layout."""

from __future__ import annotations

import multiprocessing as mp
import queue
import threading
import time

import pytest
import torch

from unilab.algos.transition import TRANSITION_FIELDS, transition_shapes
from unilab.runtime.messages import Mailbox, StallError, StopRequested, flush
from unilab.runtime.protocol import (COLLECTOR_INBOX, EPISODE_STATS, LAUNCHER_INBOX, LEARNER_INBOX, LOSSES,
                                     MAX_TASK_METRICS, PLAY_INBOX, Act, Buffers, ChunkReady, Failed, Finished,
                                     IterationStats, LearnerEvents, Obs, ProtocolError, Ready, Released, SlotFree, Stop,
                                     last_line)
from unilab.runtime.shared import leave_peer

LONG = 120.0  # a stall timeout the tests must never wait for


def mailbox(accepts, *messages, inbox=None) -> Mailbox:
    inbox = queue.Queue() if inbox is None else inbox
    for msg in messages:
        inbox.put(msg)
    return Mailbox("learner", inbox, threading.Event(), accepts)


class NeverWaits(queue.Queue):
    """An inbox that fails the test where its reader would wait on it empty: what must be answered at once is,
    however busy the machine."""

    def get(self, block=True, timeout=None):
        if block and self.empty():
            raise AssertionError("the reader waited on an empty inbox")
        return super().get(block, timeout)


class Clock:
    """time.monotonic for the code under test: it moves only when that code waits on `Silent`."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class Silent:
    """An inbox that hands out `messages`, then nothing more: each later wait on it takes its whole timeout, on
    `clock`."""

    def __init__(self, clock: Clock, *messages):
        self.clock = clock
        self.messages = list(messages)
        self.waits: list[float] = []

    def get(self, block=True, timeout=None):
        if self.messages:
            return self.messages.pop(0)
        self.waits.append(timeout)
        self.clock.now += timeout
        raise queue.Empty


def test_every_message_type_belongs_to_exactly_one_inbox():
    inboxes = [LAUNCHER_INBOX, LEARNER_INBOX, COLLECTOR_INBOX, PLAY_INBOX]
    # Released goes both ways between the learner and the collector; the launcher hears Failed from its roles and
    # from the end-of-run play; every other type has one receiver.
    assert Released in LEARNER_INBOX and Released in COLLECTOR_INBOX and Released not in LAUNCHER_INBOX
    assert Failed in LAUNCHER_INBOX and Failed in PLAY_INBOX
    kinds = [kind for inbox in inboxes for kind in inbox if kind not in (Released, Failed)] + [Released, Failed]
    import dataclasses

    import unilab.runtime.protocol as protocol

    messages = {v for v in vars(protocol).values() if isinstance(v, type) and dataclasses.is_dataclass(v)
                and v.__dataclass_params__.frozen and v.__module__ == protocol.__name__}
    assert len(kinds) == len(set(kinds)) and set(kinds) == messages - {Stop}  # Stop: understood by every child


def test_a_message_the_inbox_does_not_take_is_an_error_at_once():
    box = mailbox(LEARNER_INBOX, Act(0), inbox=NeverWaits())  # a collector's message in the learner's inbox
    with pytest.raises(ProtocolError, match="learner: received a Act"):
        box.get(Obs, phase="waiting for the collector's observation", timeout_s=LONG)
    with pytest.raises(ProtocolError):
        mailbox(COLLECTOR_INBOX, ("free", 1)).poll(SlotFree)  # an untyped tuple is no message either


def test_waiting_for_a_type_never_sent_to_the_inbox_is_an_error_at_once():
    with pytest.raises(ProtocolError, match="waits for Act, which is never sent to it"):
        mailbox(LEARNER_INBOX, inbox=NeverWaits()).get(Act, phase="p", timeout_s=LONG)
    with pytest.raises(ProtocolError):
        mailbox(COLLECTOR_INBOX, inbox=NeverWaits()).poll(Obs)


def test_messages_wait_by_type_until_asked_for():
    chunk = ChunkReady(2, {"collector_env_step_ms": 1.0}, ("rew/a",))
    box = mailbox(LEARNER_INBOX, chunk, Obs(7), Obs(8))
    assert box.get(Obs, phase="p", timeout_s=LONG) == Obs(7)
    assert box.get(ChunkReady, phase="p", timeout_s=LONG) is chunk
    assert box.poll(Obs) == Obs(8) and box.poll(Obs) is None


def test_stop_and_stall():
    with pytest.raises(StopRequested):
        mailbox(COLLECTOR_INBOX, Stop()).get(Act, phase="p", timeout_s=LONG)
    box = mailbox(COLLECTOR_INBOX, Stop())
    assert box.poll(SlotFree) is None  # a polled Stop is kept: the next wait stops
    with pytest.raises(StopRequested):
        box.get(Act, phase="p", timeout_s=LONG)
    with pytest.raises(StallError, match="no progress in phase 'waiting for the learner's action'"):
        mailbox(COLLECTOR_INBOX).get(Act, phase="waiting for the learner's action", timeout_s=0.3)


def test_messages_cross_a_process_queue():
    """Every message pickles through a multiprocessing queue (Buffers with shared-memory tensors)."""
    import torch.multiprocessing  # noqa: F401  (tensor reductions for the queues)

    from unilab.runtime.shared import Dims, make_slot, share

    dims = Dims(num_envs=2, obs_dim=3, critic_obs_dim=4, action_dim=1, ticks_per_slot=2)
    obs = share(torch.arange(6.0).reshape(2, 3))
    slots = [{k: share(v) for k, v in make_slot(dims, torch.device("cpu")).items()}]
    messages = [Ready("learner", 11, "cpu", None), Failed("collector", "Traceback ..."),
                Finished("learner", {"status": "completed"}), Obs(3), Act(3), SlotFree(1), Stop(),
                ChunkReady(0, {"ingress_backpressure": 0.0}, ("rew/a",)), LearnerEvents(None, [None]),
                Buffers(dims, obs, share(torch.zeros(2, 1)), slots, None, [None])]
    q = mp.get_context("spawn").Queue()
    for msg in messages:
        q.put(msg)
    received = [q.get(timeout=30) for _ in messages]
    for sent, got in zip(messages[:-1], received[:-1]):
        assert got == sent and type(got) is type(sent)
    buffers = received[-1]
    assert buffers.dims == dims and torch.equal(buffers.obs, obs)
    assert list(buffers.slots[0]) == [*TRANSITION_FIELDS, "episode_stats", "task_metrics"]


def test_transition_fields_shape_the_slots_and_the_replay():
    from unilab.runtime.shared import Dims, make_slot

    shapes = transition_shapes(obs_dim=5, critic_obs_dim=6, action_dim=2)
    assert tuple(shapes) == TRANSITION_FIELDS
    slot = make_slot(Dims(num_envs=3, obs_dim=5, critic_obs_dim=6, action_dim=2, ticks_per_slot=4),
                     torch.device("cpu"))
    for name, shape in shapes.items():
        assert slot[name].shape == (12, *shape), name
    assert slot["episode_stats"].shape == (len(EPISODE_STATS),) and slot["task_metrics"].shape == (MAX_TASK_METRICS,)


def test_iteration_stats_round_trip_by_name():
    episode_stats = torch.tensor([2.0, 30.0, 40.0])  # 2 episodes, returns summed to 30, lengths to 40
    task_metrics = torch.zeros(MAX_TASK_METRICS)
    task_metrics[:2] = torch.tensor([0.5, -1.5])
    slot_stats = torch.cat([episode_stats, task_metrics])
    flags = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    row = IterationStats.pack(slot_stats, torch.tensor([0.25, -0.75, 0.125]), flags[0])
    assert row.shape == (IterationStats.SIZE,)
    stats = IterationStats.unpack(row.tolist())
    assert (stats.episodes_finished, stats.return_sum, stats.length_sum) == (2.0, 30.0, 40.0)
    assert (stats.critic_loss, stats.actor_loss, stats.alpha) == stats.losses == (0.25, -0.75, 0.125)
    assert stats.trained is True
    assert stats.task_terms(("rew/a", "metrics/b")) == {"rew/a": 0.5, "metrics/b": -1.5}
    assert len(stats.losses) == len(LOSSES)

    untrained = IterationStats.unpack(IterationStats.pack(slot_stats, torch.full((3,), float("nan")), flags[1]).tolist())
    assert untrained.trained is False and untrained.episodes_finished == 2.0


# ---------------------------------------------------------------- the launcher's side


class _Alive:
    exitcode = None

    def is_alive(self) -> bool:
        return True


class _Spec:
    startup_timeout_s = 60.0

    def __init__(self, rank: int = 0):
        self.rank = rank

    def name(self, role: str) -> str:
        return f"{role}[{self.rank}]"


def supervisor(verify=None):
    from unilab.launcher.supervisor import Supervisor

    procs = {"learner[0]": _Alive(), "collector[0]": _Alive()}
    return Supervisor([_Spec()], procs, queue.Queue(), threading.Event(), threading.Event(), verify=verify)


def test_the_launcher_goes_once_every_child_is_ready_and_verified():
    seen = []
    sup = supervisor(verify=lambda ready: seen.append(dict(ready)))
    sup.handle(Ready("learner[0]", 101, "cpu", None))
    assert not sup.go_event.is_set() and not seen
    sup.handle(Ready("collector[0]", 102, "cpu", None))
    assert sup.verified and sup.go_event.is_set()
    assert {name: msg.pid for name, msg in seen[0].items()} == {"learner[0]": 101, "collector[0]": 102}


def test_a_child_failure_and_an_unknown_message_stop_the_run():
    sup = supervisor()
    sup.handle(Failed("collector[0]", "Traceback: SimOverflowError"))
    assert (sup.status, sup.failed_role, sup.traceback) == ("failed", "collector[0]", "Traceback: SimOverflowError")
    assert sup.stop_event.is_set() and sup.stop_deadline is not None

    sup = supervisor()
    sup.handle(("exited", "collector[0]"))  # not a launcher message: a clear failure, not silence
    assert sup.status == "failed" and sup.failed_role == "launcher" and "protocol error" in sup.cause
    assert sup.stop_event.is_set()


def test_rank_zero_learner_summary_sets_the_status():
    sup = supervisor()
    sup.handle(Finished("learner[0]", {"status": "completed", "iterations": 3}))
    assert sup.status == "completed" and sup.learner_summary["iterations"] == 3 and "learner[0]" in sup.finished


def _pid_gone(pid: int) -> bool:
    import os
    from pathlib import Path

    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except (ProcessLookupError, OSError):
        return True


@pytest.mark.integration  # several real processes, each test seconds of waiting on them
@pytest.mark.parametrize("how", ["launcher killed", "SIGTERM"])
def test_a_child_waiting_for_the_go_leaves_when_stopped(tmp_path, how):
    """The learner waits for the go while the launcher verifies MPS clients: it must not outlive a launcher
    killed there (kill -9), and SIGTERM stops it there; both end the wait as a stop (the marker), not at its
    timeout (900 s here, startup_timeout_s in a run). The wait looks every WATCH_S (0.25 s); 60 s only bounds a
    hang on a busy machine."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    marker = tmp_path / "marker"
    tests_dir = str(Path(__file__).parent)
    script = (f"import sys, time, multiprocessing as mp; sys.path.insert(0, {tests_dir!r}); import fakes\n"
              "ctx = mp.get_context('spawn'); go, stop = ctx.Event(), ctx.Event()\n"
              f"p = ctx.Process(target=fakes.wait_for_go_in_child, args=(go, stop, 900.0, {str(marker)!r}))\n"
              "p.start(); print(p.pid, flush=True); time.sleep(600)\n")
    launcher = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        child = int(launcher.stdout.readline())
        deadline = time.monotonic() + 120
        while not (marker.exists() and marker.read_text() == "waiting"):
            assert time.monotonic() < deadline and not _pid_gone(child), "the child never started waiting"
            time.sleep(0.05)
        time.sleep(0.5)
        start = time.monotonic()
        if how == "launcher killed":
            launcher.kill()
        else:
            os.kill(child, signal.SIGTERM)
        while not _pid_gone(child) and time.monotonic() - start < 60:
            time.sleep(0.02)
        assert _pid_gone(child), "the child is still waiting 60 s after it was stopped"
        # the launcher's death arrives as SIGTERM (PDEATHSIG) or is seen through the parent pid
        assert marker.read_text() in (("stop", "parent gone") if how == "launcher killed" else ("stop",))
    finally:
        launcher.kill()
        launcher.wait()


# ---------------------------------------------------------------- the end of a run: the release handshake


def test_a_stopping_child_waits_for_its_peers_release_even_when_asked_to_stop():
    """The exporter of CUDA IPC buffers must outlive its peer's GPU work on them: the stop request that ends the
    run must not cut this wait short."""
    class ReleasedOnTheSecondLook(queue.Queue):
        looks = 0

        def get(self, block=True, timeout=None):
            self.looks += 1
            if self.looks == 1:
                raise queue.Empty  # nothing yet, and the stop already requested
            return Released("learner")

    box = mailbox(COLLECTOR_INBOX, inbox=ReleasedOnTheSecondLook())
    box.stop_event.set()
    assert box.wait_for_peer(Released, timeout_s=LONG)


def test_a_release_that_arrived_earlier_counts_and_other_messages_are_dropped():
    box = mailbox(COLLECTOR_INBOX, Act(3), Released("learner"))
    assert box.poll(Act) == Act(3)  # Released was kept by the drain, not lost
    assert box.wait_for_peer(Released, timeout_s=0.0)
    late = mailbox(COLLECTOR_INBOX, SlotFree(0), Obs(1), Released("learner"))  # Obs: not the collector's
    assert late.wait_for_peer(Released, timeout_s=5.0)


def test_the_wait_for_a_peer_that_never_answers_ends_after_its_timeout(monkeypatch):
    import unilab.runtime.messages as messages

    clock = Clock()
    monkeypatch.setattr(messages, "time", clock)
    inbox = Silent(clock, Obs(1))  # not what it waits for: dropped
    start = clock.now
    assert not mailbox(LEARNER_INBOX, inbox=inbox).wait_for_peer(Released, timeout_s=2.0)
    assert clock.now - start == pytest.approx(2.0)  # it waited its whole timeout, in watch-sized steps, and no more
    assert len(inbox.waits) == 8 and max(inbox.waits) <= messages.WATCH_S


def test_leave_peer_waits_for_the_device_before_it_tells_the_peer(monkeypatch):
    order = []
    peer = queue.Queue()
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: order.append(("sync", str(device))))
    real_put = peer.put
    monkeypatch.setattr(peer, "put", lambda msg: (order.append(("put", msg)), real_put(msg)))
    leave_peer("collector", "cuda:0", peer)
    assert order == [("sync", "cuda:0"), ("put", Released("collector"))]
    order.clear()
    leave_peer("learner", "cpu", peer)  # nothing queued on a device: no sync
    assert order == [("put", Released("learner"))]


def test_leave_peer_still_releases_when_the_context_is_broken(monkeypatch):
    def broken(device=None):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(torch.cuda, "synchronize", broken)
    peer = queue.Queue()
    leave_peer("learner", "cuda:0", peer)
    assert peer.get_nowait() == Released("learner")


def _put_and_exit_at_once(channel, with_flush: bool) -> None:
    import os

    channel.put(Released("collector"))
    if with_flush:
        flush(channel)
    else:
        channel.cancel_join_thread()
    os._exit(0)  # as a child leaves: no interpreter teardown


def test_a_message_put_just_before_the_exit_arrives_when_flushed():
    ctx = mp.get_context("fork")
    channel = ctx.Queue()
    child = ctx.Process(target=_put_and_exit_at_once, args=(channel, True))
    child.start()
    child.join(10)
    assert child.exitcode == 0
    assert channel.get(timeout=5) == Released("collector")


def test_the_flush_of_a_channel_nobody_reads_is_bounded():
    channel = mp.get_context("fork").Queue()
    channel.put(b"x" * (1 << 20))  # more than the pipe holds: the feeder thread blocks on a reader that never comes
    flusher = threading.Thread(target=flush, args=(channel,), kwargs={"timeout_s": 0.3}, daemon=True)
    flusher.start()
    flusher.join(60)  # 0.3 s is the bound; 60 s only tells a hang from a busy machine
    assert not flusher.is_alive(), "the flush still waits for a reader that never comes"


def test_last_line_quotes_the_last_non_blank_line():
    tb = "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad value  \n\n  \n"
    assert last_line(tb) == "ValueError: bad value"
    assert last_line(tb, 10) == "ValueError"
    assert last_line(None) == last_line("") == last_line(" \n\t\n") == ""


@pytest.mark.parametrize("ppid_changes_after, expected", [(3, "launcher is gone"), (None, "SIGTERM")])
def test_a_sigterm_from_a_dying_launcher_names_the_launcher(monkeypatch, ppid_changes_after, expected):
    """PDEATHSIG can arrive while getppid() still names the launcher (its other threads are still exiting):
    the cause waits that moment out; a SIGTERM from anyone else, with the launcher alive, stays a SIGTERM."""
    from unilab.runtime import messages

    calls = []

    def getppid():
        calls.append(1)
        return 4242 if ppid_changes_after is None or len(calls) <= ppid_changes_after else 1

    monkeypatch.setattr(messages, "_terminate_requested", True)
    monkeypatch.setattr(messages.os, "getppid", getppid)
    monkeypatch.setattr(messages, "PDEATHSIG_SETTLE_S", 0.2)
    assert expected in messages.why_stopped(4242)

"""Buffers the collector shares with the learner (the learner's side: `CollectorLink`), and the cross-process
ordering of GPU work.

On CUDA the tensors travel as CUDA IPC handles and GPU work is ordered with interprocess
CUDA events: a host message says "tick t is published", the receiver makes its stream wait
on the event (no host sync). On the CPU the same code runs with shared-memory tensors and
no events (CPU work is complete when the message is sent).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from unilab.algos.transition import transition_shapes

from .messages import flush
from .protocol import EPISODE_STATS, MAX_TASK_METRICS, Buffers, LearnerEvents, Released, SlotFree

# How long a stopping child waits for its peer's Released before it exits anyway: well inside the launcher's
# STOP_GRACE_S, and enough for a peer that is saving (it releases before it saves).
RELEASE_WAIT_S = 5.0


@dataclass
class Dims:
    num_envs: int
    obs_dim: int
    critic_obs_dim: int
    action_dim: int
    ticks_per_slot: int  # env_steps_per_sync

    @property
    def rows_per_slot(self) -> int:
        """Transitions a slot holds: one iteration's."""
        return self.num_envs * self.ticks_per_slot


def make_slot(d: Dims, device: torch.device) -> dict[str, torch.Tensor]:
    z = lambda *shape: torch.zeros(*shape, device=device)  # noqa: E731
    slot = {name: z(d.rows_per_slot, *shape) for name, shape in transition_shapes(d.obs_dim, d.critic_obs_dim,
                                                                         d.action_dim).items()}
    slot["episode_stats"] = z(len(EPISODE_STATS))  # finished episodes in this chunk: protocol.EPISODE_STATS
    slot["task_metrics"] = z(MAX_TASK_METRICS)
    return slot


class CrossProcessEvent:
    """An interprocess CUDA event; a no-op on the CPU."""

    def __init__(self, device: torch.device, handle: bytes | None = None):
        self.cuda = device.type == "cuda"
        self.event = None
        if self.cuda:
            if handle is None:
                self.event = torch.cuda.Event(interprocess=True)
            else:
                self.event = torch.cuda.Event.from_ipc_handle(device, handle)

    def handle(self) -> bytes | None:
        return self.event.ipc_handle() if self.cuda else None

    def record(self, stream=None) -> None:
        if self.cuda:
            self.event.record(stream)

    def wait(self, stream=None) -> None:
        if self.cuda:
            (stream or torch.cuda.current_stream()).wait_event(self.event)


class CollectorLink:
    """The learner's side of the buffers: the collector's observation and action buffers, its replay-ingress
    slots and the events that order their use (`Buffers` taken, `LearnerEvents` answered)."""

    def __init__(self, mailbox, device: torch.device, to_collector, timeout_s: float):
        buffers = mailbox.get(Buffers, phase="startup: waiting for the collector's environment", timeout_s=timeout_s)
        self.dims, self.obs, self.act, self.slots = buffers.dims, buffers.obs, buffers.act, buffers.slots
        self.policy_env = buffers.policy_env  # the env's description for policy.onnx (rank 0 exporting), else None
        self.mirror = buffers.mirror  # the task's mirror map (algo.symmetry), else None
        self.obs_ready = CrossProcessEvent(device, buffers.obs_ready)
        self.slot_ready = [CrossProcessEvent(device, h) for h in buffers.slot_ready]
        self.act_ready = CrossProcessEvent(device)
        self.slot_free = [CrossProcessEvent(device) for _ in self.slots]
        self.to_collector = to_collector
        to_collector.put(LearnerEvents(self.act_ready.handle(), [e.handle() for e in self.slot_free]))

    def take_slot(self, s: int, stream=None) -> dict[str, torch.Tensor]:
        """Slot `s`, once `stream` waits for the collector's writes to it."""
        self.slot_ready[s].wait(stream)
        return self.slots[s]

    def hand_back(self, s: int, stream=None) -> None:
        """Slot `s` is free for the collector once `stream` has read it."""
        self.slot_free[s].record(stream)
        self.to_collector.put(SlotFree(s))


def share(t: torch.Tensor) -> torch.Tensor:
    return t if t.is_cuda else t.share_memory_()


def leave_peer(role: str, device: torch.device | str, to_peer) -> None:
    """The end of this process's use of its peer's shared GPU memory and events: wait for every piece of GPU work
    this process queued, then tell the peer (`Released`).

    Before a child exits it calls this, then waits for the peer's `Released` (Mailbox.wait_for_peer). Exiting
    with GPU work in flight, or while the peer may still read memory this process exported (CUDA IPC frees it with
    the exporter) or wait on its events, is undefined behaviour for CUDA; under MPS it is a fatal fault for every
    client of the GPU, so other runs sharing the daemon would fail with this one's stop."""
    device = torch.device(device)
    if device.type == "cuda":
        try:
            torch.cuda.synchronize(device)
        except Exception:  # noqa: BLE001  (a context broken by a fault: nothing in it will complete; leave)
            pass
    to_peer.put(Released(role))


def await_peer_release(role: str, peer: str, mailbox, to_peer) -> None:
    """After leave_peer (and whatever else this process sends the peer last): push it into the pipe, then wait for
    the peer's Released. When it does not come (the peer was killed or is stuck) this child's log says so."""
    flush(to_peer)
    if not mailbox.wait_for_peer(Released, RELEASE_WAIT_S):
        print(f"{role}: the {peer} did not release its use of the shared GPU buffers within {RELEASE_WAIT_S:g} s; "
              "leaving", file=sys.stderr)

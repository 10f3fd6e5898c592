"""Every message the launcher, the learner and the collector exchange, and the layouts they share.

Queues carry instances of the dataclasses below (picklable; the tensors in `Buffers` travel as CUDA
IPC handles or shared memory through torch.multiprocessing). Each inbox accepts a fixed set of them
(`LEARNER_INBOX`, `COLLECTOR_INBOX`, `LAUNCHER_INBOX`): a message of any other type is a protocol
error at once instead of a wait that stalls. The launching process imports this module, so it must
not import torch at module level.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

MAX_TASK_METRICS = 48  # per-chunk means of the env's rew/*, term/* and metrics/* terms


def last_line(text: str | None, max_chars: int | None = None) -> str:
    """The last non-blank line of a traceback or an error text, stripped (at most `max_chars` of it): the line a
    console note quotes of a child's failure."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:max_chars] if lines else ""


# ---------------------------------------------------------------- children -> launcher


@dataclass(frozen=True)
class Ready:
    """The child's CUDA context exists (CPU: it has started); the GPU it really sees."""

    name: str
    pid: int
    device_type: str
    gpu_uuid: str | None


@dataclass(frozen=True)
class Failed:
    """The child raised; it exits with code 1."""

    name: str
    traceback: str


@dataclass(frozen=True)
class Finished:
    """A learner's summary: completed, or interrupted after saving."""

    name: str
    summary: dict


@dataclass(frozen=True)
class WorldFailed:
    """The data-parallel run cannot go on: another rank failed, stopped or went silent (`rank`, as the sender's
    rank watch found it), or the learners' rendezvous did not complete (`rank` None). `cause` names it."""

    name: str
    cause: str
    rank: int | None = None


@dataclass(frozen=True)
class Played:
    """The end-of-run play finished: its report (play.json's content). A failed play sends Failed."""

    report: dict


@dataclass(frozen=True)
class Phase:
    """A step of start-up or shutdown the console names (building worlds, compiling kernels, filling the
    replay); the launcher prints it, so the console has one order."""

    name: str
    text: str


@dataclass(frozen=True)
class Progress:
    """A learner's progress for the console line. The episode means cover the last finished episodes (about
    ROLLING_EPISODES of them, whole iterations), so they stay defined between iterations that end none."""

    name: str
    rank: int
    iterations_done: int
    max_iterations: int
    env_steps: int
    env_steps_per_s: float | None
    episode_return: float | None
    episode_length: float | None
    episodes: int  # how many finished episodes the means cover (0: none yet)
    replay_size: int


ROLLING_EPISODES = 100


# ---------------------------------------------------------------- collector -> learner


@dataclass(frozen=True)
class Buffers:
    """The shared observation/action buffers and replay-ingress slots, and the collector's event handles."""

    dims: Any  # shared.Dims
    obs: Any  # tensor [num_envs, obs_dim]
    act: Any  # tensor [num_envs, action_dim]
    slots: list  # dicts of tensors: TRANSITION_FIELDS, episode_stats, task_metrics
    obs_ready: bytes | None  # interprocess event handles (None on the CPU)
    slot_ready: list
    policy_env: dict | None = None  # unilab.tasks.common.metadata.env_description: the metadata of an end-of-run export
    mirror: Any = None  # unilab.algos.symmetry.Mirror: the task's left-right mirror, where algo.symmetry asks for it


@dataclass(frozen=True)
class Obs:
    """The observation of `tick` is in the shared buffer (after the `obs_ready` event)."""

    tick: int


@dataclass(frozen=True)
class ChunkReady:
    """Replay slot `slot` holds a full chunk (after its `slot_ready` event); the collector's timings so far."""

    slot: int
    timings: dict
    task_names: tuple


# ---------------------------------------------------------------- learner -> collector


@dataclass(frozen=True)
class LearnerEvents:
    """The learner's event handles: action published, and each slot read."""

    act_ready: bytes | None
    slot_free: list


@dataclass(frozen=True)
class Act:
    """The action for `tick` is in the shared buffer (after the `act_ready` event)."""

    tick: int


@dataclass(frozen=True)
class SlotFree:
    """The learner has taken slot `slot` (after its `slot_free` event): the collector may refill it."""

    slot: int


@dataclass(frozen=True)
class Stop:
    """The learner has ended: the collector stops. Every child's mailbox understands it."""


@dataclass(frozen=True)
class Released:
    """The sender's GPU work has completed (a device sync) and it touches the peer's shared buffers and events no
    more: the peer may exit. Each role sends it before it exits, then waits for the other's (shared.leave_peer)."""

    role: str


LAUNCHER_INBOX = (Ready, Failed, Finished, Phase, Progress, WorldFailed)
PLAY_INBOX = (Played, Failed)  # what the end-of-run play process sends the launcher
LEARNER_INBOX = (Buffers, Obs, ChunkReady, Released)
COLLECTOR_INBOX = (LearnerEvents, Act, SlotFree, Released)


class ProtocolError(RuntimeError):
    """A message its receiver does not take, or a wait for one that is never sent to it."""


# ---------------------------------------------------------------- per-iteration statistics


EPISODE_STATS = ("episodes_finished", "return_sum", "length_sum")  # a slot's "episode_stats", per chunk
LOSSES = ("critic_loss", "actor_loss", "alpha")


@dataclass
class IterationStats:
    """One iteration's statistics, packed on the device into one row (a single non-blocking copy to the
    host, read back iterations later) and unpacked by name.

    Row layout: EPISODE_STATS, LOSSES, `trained` and one pad (a row of the learner's 2-wide flag table,
    which lives on the device so that no host-to-device copy syncs), then the task metrics.
    """

    episodes_finished: float
    return_sum: float
    length_sum: float
    critic_loss: float
    actor_loss: float
    alpha: float
    trained: bool
    task_metrics: list[float]

    TRAINED_AT: ClassVar[int] = len(EPISODE_STATS) + len(LOSSES)
    TASK_AT: ClassVar[int] = TRAINED_AT + 2
    SIZE: ClassVar[int] = TASK_AT + MAX_TASK_METRICS

    @classmethod
    def pack(cls, slot_stats, losses, trained_flag):
        """The device row. `slot_stats`: a slot's episode_stats then task_metrics (a copy taken before the
        slot is handed back); `losses`: LOSSES (NaN when no update ran); `trained_flag`: [trained, pad]."""
        import torch

        n = len(EPISODE_STATS)
        return torch.cat([slot_stats[:n], losses, trained_flag, slot_stats[n:]])

    @classmethod
    def unpack(cls, row: list[float]) -> IterationStats:
        head = dict(zip(EPISODE_STATS + LOSSES, row[: cls.TRAINED_AT], strict=True))
        return cls(**head, trained=bool(row[cls.TRAINED_AT]), task_metrics=list(row[cls.TASK_AT:]))

    @property
    def losses(self) -> tuple[float, ...]:
        return tuple(getattr(self, name) for name in LOSSES)

    def task_terms(self, names) -> dict[str, float]:
        """The task metrics by name (the collector's `task_names` of that chunk)."""
        return dict(zip(names, self.task_metrics))

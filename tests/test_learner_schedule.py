"""The update phase's order on the update stream: ingest then update (default), or update then ingest
(`training.update_before_ingest`). A recording algorithm stands in for the networks; the loop's own
`_update_phase` runs on the CPU, where streams and events are no-ops."""

from __future__ import annotations

import torch

from unilab.runtime.learner import LearnerLoop
from unilab.algos.transition import TRANSITION_FIELDS
from unilab.runtime.protocol import EPISODE_STATS, LOSSES, MAX_TASK_METRICS, IterationStats
from unilab.runtime.timing import Stamp

ROWS = 8  # transitions per slot


class RecordingLearner:
    """Adds grow the replay; each update records the replay size it sampled from."""

    def __init__(self, batch: int):
        self.batch = batch
        self.replay = type("Replay", (), {"size": 0})()
        self.log: list[tuple[str, int]] = []

    def ready(self) -> bool:
        return self.replay.size >= self.batch

    def publish_policy(self) -> None:
        self.log.append(("publish", self.replay.size))

    def add(self, batch: dict) -> None:
        self.log.append(("add", self.replay.size))
        self.replay.size += len(batch["reward"])

    def update(self) -> dict:
        self.log.append(("update", self.replay.size))
        return {"critic_loss": torch.tensor(1.0), "actor_loss": torch.tensor(2.0), "alpha": torch.tensor(0.5)}


class Sink(list):
    put = list.append


class NoEvent:
    def wait(self, stream=None) -> None: ...

    def record(self, stream=None) -> None: ...


def loop(update_before_ingest: bool, batch: int = ROWS) -> LearnerLoop:
    lp = LearnerLoop.__new__(LearnerLoop)  # the phase only, without a collector to connect to
    cpu = torch.device("cpu")
    lp.torch, lp.upd_stream, lp.update_before_ingest = torch, None, update_before_ingest
    lp.learner = RecordingLearner(batch)
    lp.iteration = lp.segment_start = lp.learning_starts = lp.min_replay_to_update = 0
    lp.trained_once, lp._first_update_s = False, None
    lp.phase = lambda text: None
    lp.slots = [{**{k: torch.zeros(ROWS, 1) for k in TRANSITION_FIELDS},
                 "episode_stats": torch.tensor([float(s)] + [0.0] * (len(EPISODE_STATS) - 1)),  # s episodes ended
                 "task_metrics": torch.zeros(MAX_TASK_METRICS)} for s in range(2)]
    lp.slot_ready, lp.slot_free = [NoEvent(), NoEvent()], [NoEvent(), NoEvent()]
    lp.to_collector = Sink()
    lp.published = [Stamp(cpu) for _ in range(3)]
    lp.host_stats = [torch.zeros(IterationStats.SIZE) for _ in range(3)]
    lp._flags = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    lp._nan3 = torch.full((len(LOSSES),), float("nan"))
    return lp


def run_phases(lp: LearnerLoop, n: int) -> list[IterationStats]:
    stats = []
    for i in range(n):
        st = {name: Stamp(torch.device("cpu")) for name in ("inf_start", "inf_end", "train_start", "update_end",
                                                            "train_end")}
        lp._update_phase(i % 2, st)
        assert st["train_start"].t <= st["update_end"].t <= st["train_end"].t
        stats.append(IterationStats.unpack(lp.host_stats[i % 3].tolist()))
        lp.iteration += 1
    return stats


def test_by_default_each_update_samples_the_chunk_just_ingested():
    lp = loop(update_before_ingest=False)
    stats = run_phases(lp, 3)
    updates = [size for what, size in lp.learner.log if what == "update"]
    assert updates == [ROWS, 2 * ROWS, 3 * ROWS]  # the first phase's chunk already fills a batch
    assert [s.trained for s in stats] == [True, True, True]
    kinds = [what for what, _ in lp.learner.log]
    assert kinds == ["add", "update", "publish", "add", "update", "publish", "add", "update"]


def test_update_before_ingest_samples_the_replay_as_it_stood_and_ingests_after():
    lp = loop(update_before_ingest=True)
    stats = run_phases(lp, 3)
    kinds = [what for what, _ in lp.learner.log]
    # phase 0: the replay is empty, so no update; its chunk follows. From then on: update, then the new
    # chunk (no publish in phase 1: nothing was trained before it).
    assert kinds == ["add", "update", "add", "publish", "update", "add"]
    assert [size for what, size in lp.learner.log if what == "update"] == [ROWS, 2 * ROWS]
    assert [s.trained for s in stats] == [False, True, True]
    assert stats[1].losses == (1.0, 2.0, 0.5) and all(x != x for x in stats[0].losses)  # NaN when not trained
    # every slot is still handed back once, and its statistics are the ones of that slot
    assert [m.slot for m in lp.to_collector] == [0, 1, 0]
    assert [s.episodes_finished for s in stats] == [0.0, 1.0, 0.0]
    assert lp.learner.replay.size == 3 * ROWS

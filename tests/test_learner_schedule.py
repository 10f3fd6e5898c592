"""The update phase's order on the update stream: ingest then update (default), or update then ingest
(`training.loop.update_before_ingest`). A recording algorithm stands in for the networks; the loop's own
`_update_phase` runs on the CPU, where streams and events are no-ops."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from unilab.algos.config import FirstUpdate
from unilab.algos.transition import TRANSITION_FIELDS
from unilab.runtime.learner import LearnerLoop
from unilab.runtime.learner_report import IterationLog, UpdateStart
from unilab.runtime.protocol import EPISODE_STATS, MAX_TASK_METRICS, IterationStats
from unilab.runtime.shared import CollectorLink

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


def loop(update_before_ingest: bool, batch: int = ROWS, learner=None, rule: FirstUpdate | None = None) -> LearnerLoop:
    lp = LearnerLoop.__new__(LearnerLoop)  # the phase only, without a collector to connect to
    cpu = torch.device("cpu")
    lp.torch, lp.upd_stream = torch, None
    lp.spec = SimpleNamespace(training=SimpleNamespace(loop=SimpleNamespace(update_before_ingest=update_before_ingest)))
    lp.learner = learner or RecordingLearner(batch)
    lp.iteration = 0
    rule = rule or FirstUpdate(rows=batch, iterations=0, rows_per_iteration=ROWS)
    lp.update_start = UpdateStart(rule, 0, 0, lambda text: None)
    lp.trained_once = False
    lp.phase = lambda text: None
    lp.link = CollectorLink.__new__(CollectorLink)
    lp.link.slots = [{**{k: torch.zeros(ROWS, 1) for k in TRANSITION_FIELDS},
                      "episode_stats": torch.tensor([float(s)] + [0.0] * (len(EPISODE_STATS) - 1)),  # s episodes ended
                      "task_metrics": torch.zeros(MAX_TASK_METRICS)} for s in range(2)]
    lp.link.slot_ready, lp.link.slot_free = [NoEvent(), NoEvent()], [NoEvent(), NoEvent()]
    lp.link.to_collector = Sink()
    lp.log = IterationLog(cpu, ROWS, 3, metrics=None, nan_guard=None, progress=None)  # rows are not written here
    return lp


def run_phases(lp: LearnerLoop, n: int) -> list[IterationStats]:
    stats = []
    for i in range(n):
        st = lp.log.stamps_of(i)
        lp._update_phase(i % 2, st)
        assert st["train_start"].t <= st["update_end"].t <= st["train_end"].t
        stats.append(IterationStats.unpack(lp.log.host_stats[i % 3].tolist()))
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
    assert [m.slot for m in lp.link.to_collector] == [0, 1, 0]
    assert [s.episodes_finished for s in stats] == [0.0, 1.0, 0.0]
    assert lp.learner.replay.size == 3 * ROWS


@pytest.mark.parametrize("batch, learning_starts, update_first, ingest_first", [
    (40, 3, 5, 4),  # the batch decides
    (8, 3, 3, 3),  # learning_starts decides; ingesting first, the loop still waits for its iterations
    (8, 0, 1, 0),
])
def test_the_first_update_follows_the_one_rule(batch, learning_starts, update_first, ingest_first):
    """A real learner's ready() and the loop's gate follow algos.config.first_update: by default the first update
    comes at the rule's `iteration`, the count `unilab warmup` trains past."""
    from unilab.algos.base import make_learner
    from unilab.algos.config import first_update
    from unilab.algos.fastsac.config import FastSACConfig

    cfg = FastSACConfig(batch_size=batch, learning_starts=learning_starts, updates_per_step=1, policy_delay=1,
                        replay_capacity=128, critic_hidden_dim=16, actor_hidden_dim=16, num_atoms=11, bf16=False,
                        cuda_graph=False, compile=False)
    rule = first_update(cfg, ROWS)
    assert rule.iteration == update_first
    for before_ingest, expected in ((True, update_first), (False, ingest_first)):
        learner = make_learner(cfg, 1, 1, 1, torch.device("cpu"), seed=0)
        trained = [s.trained for s in run_phases(loop(before_ingest, learner=learner, rule=rule), 7)]
        assert trained == [False] * expected + [True] * (7 - expected), before_ingest

"""What the learner reports of each iteration (unilab.runtime.learner_report): the metrics row, the NaN guard and
the replay's filling before the first update; on the CPU, without processes."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch

from unilab.algos.config import FirstUpdate
from unilab.rundir.metrics import METRIC_KEYS, MetricsWriter
from unilab.runtime.learner_report import STAMPS, Collected, NanGuard, UpdateStart, iteration_values
from unilab.runtime.protocol import IterationStats
from unilab.runtime.timing import Stamp

NAN = float("nan")


def stats(losses=(1.0, 2.0, 0.5), trained=True, episodes=0.0, task_metrics=()) -> IterationStats:
    return IterationStats(episodes, 3.0 * episodes, 10.0 * episodes, *losses, trained=trained,
                          task_metrics=list(task_metrics))


def test_the_nan_guard_ends_the_run_at_the_third_update_phase_with_non_finite_losses():
    guard = NanGuard(enabled=True)
    guard.check(stats((NAN, 1.0, 1.0)), 4)
    guard.check(stats((NAN, NAN, NAN), trained=False), 5)  # no update ran: its losses are NaN by design
    guard.check(stats(), 6)
    guard.check(stats((1.0, math.inf, 1.0)), 7)
    assert guard.trips == 2
    with pytest.raises(FloatingPointError, match=r"^nan guard: non-finite losses in 3 update phases \(iteration 9\)$"):
        guard.check(stats((1.0, 1.0, NAN)), 9)
    off = NanGuard(enabled=False)
    for i in range(5):
        off.check(stats((NAN, NAN, NAN)), i)
    assert off.trips == 0


def stamps(ms: dict[str, float]) -> dict[str, Stamp]:
    out = {name: Stamp(torch.device("cpu")) for name in STAMPS}
    for name, t in ms.items():
        out[name].t = t / 1e3
    return out


def test_the_row_carries_every_metric_key_in_order_then_the_rest(tmp_path):
    """METRIC_KEYS first (the collector's from its timings, null until it has them), then the episodes finished,
    the collector's other timings and the task's terms, in that order."""
    timings = {"collector_wait_for_action_ms": 1.5, "ingress_backpressure": 0.0, "backpressure_wait_ms": 2.0,
               "sim_overflow": 0.0}  # an early chunk: no GPU times yet
    c = Collected(iteration=7, env_steps=128, wait_ms=0.25, collector=timings, t_iter=0.0,
                  task_names=("rew/alive", "metrics/lin_vel_error"), replay_size=96)
    st = stamps({"inf_start": 1.0, "inf_end": 3.0, "train_start": 4.0, "update_end": 10.0})
    values = iteration_values(c, stats(episodes=2.0, task_metrics=[0.5, 0.25]), st, iteration_ms=20.0,
                              rows_per_iteration=16, nan_trips=1)
    writer = MetricsWriter(tmp_path, tensorboard=False, console_every_s=math.inf)
    writer.write(c.iteration, c.env_steps, values, max_iterations=100)
    writer.close()
    row = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert list(row) == ["schema_version", "iteration", "env_steps", "time", *METRIC_KEYS, "episodes_finished",
                         "backpressure_wait_ms", "sim_overflow", "rew/alive", "metrics/lin_vel_error"]
    assert row["env_steps_per_s"] == 800.0 and row["learner_train_ms"] == pytest.approx(6.0)
    assert row["learner_inference_ms"] == pytest.approx(2.0) and row["learner_wait_for_collector_ms"] == 0.25
    assert row["collector_env_step_ms"] is None and row["collector_wait_for_action_ms"] == 1.5
    assert (row["episode_return"], row["episode_length"], row["episodes_finished"]) == (3.0, 10.0, 2.0)
    assert (row["critic_loss"], row["actor_loss"], row["alpha"], row["nan_guard_trips"]) == (1.0, 2.0, 0.5, 1.0)
    assert row["replay_size"] == 96.0 and row["rew/alive"] == 0.5
    untrained = iteration_values(c, stats(trained=False), st, None, 16, 0)
    assert untrained["critic_loss"] is None and untrained["env_steps_per_s"] is None
    assert untrained["episode_return"] is None  # no episode ended


class Filling:
    """A learner's replay as the loop sees it: a size, and ready() at `ready_at` rows."""

    def __init__(self, ready_at: int):
        self.replay = SimpleNamespace(size=0)
        self.ready_at = ready_at

    def ready(self) -> bool:
        return self.replay.size >= self.ready_at


def fill(start: UpdateStart, learner: Filling, rows: int, iterations: int) -> list[bool]:
    allowed = []
    for i in range(iterations):
        allowed.append(start.allows(learner, 50 + i))
        learner.replay.size += rows
        start.report(learner)
    return allowed


def test_a_fresh_run_reports_its_fill_by_quarters_until_the_rule_allows_updates():
    lines: list[str] = []
    start = UpdateStart(FirstUpdate(rows=64, iterations=2, rows_per_iteration=16), 50, 0, lines.append)
    assert fill(start, Filling(64), 16, 6) == [False] * 4 + [True] * 2
    assert lines == ["filling the replay 16/64 transitions (25 %)", "filling the replay 32/64 transitions (50 %)",
                     "filling the replay 48/64 transitions (75 %)"]  # full: the first update's line says so
    quiet: list[str] = []  # learning_starts=0: nothing to wait for, nothing reported
    fill(UpdateStart(FirstUpdate(rows=8, iterations=0, rows_per_iteration=16), 0, 0, quiet.append), Filling(8), 16, 3)
    assert quiet == []


def test_a_resume_reports_its_refill_and_waits_for_it():
    lines: list[str] = []
    start = UpdateStart(FirstUpdate(rows=32, iterations=2, rows_per_iteration=16), 50, 80, lines.append)
    assert fill(start, Filling(32), 16, 7) == [False] * 5 + [True] * 2  # the refill, beyond the rule's rows
    assert lines == ["resume: replay refilled 32/80 (25 %)", "resume: replay refilled 48/80 (50 %)",
                     "resume: replay refilled 64/80 (75 %)", "resume: replay refilled 80/80 (100 %); updates start"]

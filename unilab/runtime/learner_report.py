"""What the learner reports of each iteration: its metrics row (unilab.rundir.metrics), the NaN guard that reads
the same losses, the console's progress line; and when its updates start, with the replay's filling until then.

An iteration's GPU stamps and statistics are read back LAG iterations later, when its GPU work is long done,
so that the host never waits for the GPU on the hot path (`IterationLog`).
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Callable

from unilab.algos.config import FirstUpdate
from unilab.rundir.metrics import METRIC_KEYS, IterationMetrics

from .protocol import LOSSES, ROLLING_EPISODES, IterationStats, Progress

LAG = 2  # iterations between an update phase's launch and the reading of its row
STAMPS = ("inf_start", "inf_end", "train_start", "update_end", "train_end", "published")
PROGRESS_EVERY_S = 2.0  # the console's progress line, at most this often (and for the last iteration)
NAN_TRIPS = 3  # update phases with non-finite losses that end a run under training.loop.nan_guard


@dataclass
class Collected:
    """What the loop knows of an iteration once its update phase is launched."""

    iteration: int
    env_steps: int
    wait_ms: float  # host time spent waiting for the collector's observations
    collector: dict  # the collector's timings (ChunkReady)
    t_iter: float  # perf_counter at the iteration's start
    task_names: tuple
    replay_size: int


def iteration_values(c: Collected, stats: IterationStats, st: dict, iteration_ms: float | None,
                     rows_per_iteration: int, nan_trips: int) -> dict:
    """One iteration's metrics row: IterationMetrics (every key of METRIC_KEYS, by construction), then the
    episodes finished, the collector's other timings and the task's terms."""
    count, trained, timings = stats.episodes_finished, stats.trained, c.collector
    metrics = IterationMetrics(
        iteration_ms=iteration_ms,
        env_steps_per_s=rows_per_iteration / (iteration_ms / 1e3) if iteration_ms else None,
        learner_train_ms=st["train_start"].ms_until(st["update_end"]),
        learner_wait_for_collector_ms=c.wait_ms,
        learner_inference_ms=st["inf_start"].ms_until(st["inf_end"]),
        collector_env_step_ms=timings.get("collector_env_step_ms"),
        collector_backend_step_ms=timings.get("collector_backend_step_ms"),
        collector_replay_write_ms=timings.get("collector_replay_write_ms"),
        collector_wait_for_action_ms=timings.get("collector_wait_for_action_ms"),
        replay_size=c.replay_size,
        ingress_backpressure=timings.get("ingress_backpressure"),
        episode_return=stats.return_sum / count if count else None,
        episode_length=stats.length_sum / count if count else None,
        critic_loss=stats.critic_loss if trained else None,
        actor_loss=stats.actor_loss if trained else None,
        alpha=stats.alpha if trained else None,
        nan_guard_trips=nan_trips,
    )
    other_timings = {k: v for k, v in timings.items() if k not in METRIC_KEYS}
    return {**asdict(metrics), "episodes_finished": count, **other_timings, **stats.task_terms(c.task_names)}


class NanGuard:
    """training.loop.nan_guard: an update phase whose losses are not all finite is a trip (every row counts them);
    the NAN_TRIPS-th ends the run."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.trips = 0

    def check(self, stats: IterationStats, iteration: int) -> None:
        if stats.trained and self.enabled and not all(map(math.isfinite, stats.losses)):
            self.trips += 1
            if self.trips >= NAN_TRIPS:
                raise FloatingPointError(f"nan guard: non-finite losses in {NAN_TRIPS} update phases "
                                         f"(iteration {iteration})")


class RollingEpisodes:
    """Finished-episode sums of the latest iterations, as few as cover ROLLING_EPISODES episodes."""

    def __init__(self, episodes: int = ROLLING_EPISODES):
        self.episodes = episodes
        self.window: deque = deque()  # (count, return sum, length sum) of iterations that ended episodes

    def add(self, count: float, return_sum: float, length_sum: float) -> None:
        if count > 0:
            self.window.append((count, return_sum, length_sum))
        while len(self.window) > 1 and self.count() - self.window[0][0] >= self.episodes:
            self.window.popleft()

    def count(self) -> int:
        return int(sum(c for c, _, _ in self.window))

    def means(self) -> tuple[float | None, float | None]:
        n = self.count()
        if not n:
            return None, None
        return sum(r for _, r, _ in self.window) / n, sum(le for _, _, le in self.window) / n


class ProgressReport:
    """The console's progress line (the launcher adds elapsed time and ETA), at most every PROGRESS_EVERY_S and
    for the last iteration, with the episode means of RollingEpisodes."""

    def __init__(self, name: str, rank: int, max_iterations: int, send: Callable[[Any], None]):
        self.name, self.rank, self.max_iterations, self.send = name, rank, max_iterations, send
        self.rolling = RollingEpisodes()
        self._last = -math.inf
        self._sps: float | None = None

    def after_row(self, row: dict, stats: IterationStats) -> None:
        self.rolling.add(stats.episodes_finished, stats.return_sum, stats.length_sum)
        if row.get("env_steps_per_s") is not None:
            self._sps = row["env_steps_per_s"]
        now = time.monotonic()
        done = row["iteration"] + 1
        if now - self._last < PROGRESS_EVERY_S and done < self.max_iterations:
            return
        self._last = now
        ret, length = self.rolling.means()
        self.send(Progress(self.name, self.rank, done, self.max_iterations, int(row["env_steps"]), self._sps, ret,
                           length, self.rolling.count(), int(row.get("replay_size") or 0)))


class UpdateStart:
    """When this segment's updates start: the first-update rule (unilab.algos.config.first_update) and a resume's
    refill. Until then the replay's filling is on the console by quarters: towards the rule's rows, or the refill
    (whose last line says when the updates start)."""

    def __init__(self, rule: FirstUpdate, start_iteration: int, refill: int, phase: Callable[[str], None]):
        self.updates_from = start_iteration + rule.iterations  # the segment's first iteration that may update
        self.refill, self.phase = refill, phase
        self.target = refill or rule.rows
        self.reported = 0 if refill or rule.iterations else 4  # an update at the first iteration: nothing to fill

    def allows(self, learner: Any, iteration: int) -> bool:
        return learner.ready() and iteration >= self.updates_from and learner.replay.size >= self.refill

    def report(self, learner: Any) -> None:
        size = learner.replay.size
        quarter = min(4, 4 * size // max(1, self.target))
        if quarter <= self.reported:
            return
        self.reported = quarter
        if self.refill:
            done = "; updates start" if quarter == 4 and learner.ready() else ""
            self.phase(f"resume: replay refilled {min(size, self.target)}/{self.target} ({25 * quarter} %){done}")
        elif quarter < 4:  # full: the first update's own line says so
            self.phase(f"filling the replay {size}/{self.target} transitions ({25 * quarter} %)")


class IterationLog:
    """Each iteration's GPU stamps and statistics, on rings of LAG + 1, read back into its metrics row LAG
    iterations later; the NaN guard and the progress line read the row."""

    def __init__(self, device: Any, rows_per_iteration: int, max_iterations: int, metrics: Any, nan_guard: NanGuard,
                 progress: ProgressReport):
        import torch

        from .timing import Stamp

        cuda = device.type == "cuda"
        self.stamps = [{name: Stamp(device) for name in STAMPS} for _ in range(LAG + 1)]
        self.host_stats = [torch.zeros(IterationStats.SIZE, pin_memory=cuda) for _ in range(LAG + 1)]
        self._flags = torch.tensor([[1.0, 0.0], [0.0, 0.0]], device=device)  # rows: IterationStats `trained`
        self._nan3 = torch.full((len(LOSSES),), float("nan"), device=device)
        self.rows_per_iteration, self.max_iterations = rows_per_iteration, max_iterations
        self.metrics, self.nan_guard, self.progress = metrics, nan_guard, progress
        self.pending: list[Collected] = []
        self.last_row: dict = {}

    def stamps_of(self, iteration: int) -> dict:
        return self.stamps[iteration % len(self.stamps)]

    def record_stats(self, iteration: int, slot_stats, losses) -> None:
        """Pack the iteration's statistics on the device and start their copy to the host (nothing waits)."""
        host = self.host_stats[iteration % len(self.host_stats)]
        # Constant tensors live on the device already: a host->device copy here would sync.
        trained = self._flags[0] if losses is not None else self._flags[1]
        host.copy_(IterationStats.pack(slot_stats, losses if losses is not None else self._nan3, trained),
                   non_blocking=True)

    def add(self, collected: Collected, timeout: float) -> None:
        """The iteration's update phase is launched: write the rows that are LAG iterations old."""
        self.pending.append(collected)
        while len(self.pending) > LAG:
            self._write_oldest(timeout)

    def flush(self, timeout: float) -> None:
        while self.pending:
            self._write_oldest(timeout)

    def _write_oldest(self, timeout: float) -> None:
        """Write the metrics row of the oldest pending iteration (its GPU work is done or nearly so)."""
        c = self.pending.pop(0)
        st = self.stamps_of(c.iteration)
        st["train_end"].wait_done(timeout, "learner: update phase")
        stats = IterationStats.unpack(self.host_stats[c.iteration % len(self.host_stats)].tolist())
        # Wall time between the starts of consecutive iterations (the last one has no successor).
        iteration_ms = 1e3 * (self.pending[0].t_iter - c.t_iter) if self.pending else None
        self.nan_guard.check(stats, c.iteration)
        values = iteration_values(c, stats, st, iteration_ms, self.rows_per_iteration, self.nan_guard.trips)
        self.last_row = self.metrics.write(c.iteration, c.env_steps, values, max_iterations=self.max_iterations)
        self.progress.after_row(self.last_row, stats)

    def close(self) -> None:
        self.metrics.close()


def open_iteration_log(spec: Any, device: Any, rows_per_iteration: int, start_iteration: int,
                       send: Callable[[Any], None]) -> IterationLog:
    """The learner's IterationLog: metrics.jsonl of its rank (from `start_iteration` on), TensorBoard and W&B as
    training.outputs.logger says, the NaN guard and the progress line to the launcher (`send`)."""
    from unilab.rundir.metrics import MetricsWriter
    from unilab.rundir.wandb_sink import wandb_settings

    loggers, max_iterations = spec.training.outputs.logger, spec.algo.max_iterations
    metrics = MetricsWriter(spec.rank_dir, start_iteration=start_iteration, tensorboard="tensorboard" in loggers,
                            wandb=wandb_settings(spec) if "wandb" in loggers and spec.rank == 0 else None)
    progress = ProgressReport(spec.name("learner"), spec.rank, max_iterations, send)
    guard = NanGuard(spec.training.loop.nan_guard.enabled)
    return IterationLog(device, rows_per_iteration, max_iterations, metrics, guard, progress)

"""Per-iteration metrics: metrics.jsonl (schema-versioned), TensorBoard, W&B, a console line; and the
one reader of metrics.jsonl (tests, resume, `unilab bench`, `unilab plot`)."""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path

from .layout import METRICS_FILE, TENSORBOARD_DIR
from .wandb_sink import WandbSettings, WandbSink

METRICS_SCHEMA_VERSION = 1

@dataclass(frozen=True)
class IterationMetrics:
    """The values every iteration row carries, in the row's order (METRIC_KEYS); None (null) where not measured
    yet, e.g. the losses before learning starts. The learner builds it (unilab.runtime.learner_report), the
    `collector_` times and `ingress_backpressure` from the collector's timings."""

    iteration_ms: float | None
    env_steps_per_s: float | None
    learner_train_ms: float | None
    learner_wait_for_collector_ms: float | None
    learner_inference_ms: float | None
    collector_env_step_ms: float | None
    collector_backend_step_ms: float | None
    collector_replay_write_ms: float | None
    collector_wait_for_action_ms: float | None
    replay_size: float | None
    ingress_backpressure: float | None
    episode_return: float | None
    episode_length: float | None
    critic_loss: float | None
    actor_loss: float | None
    alpha: float | None
    nan_guard_trips: float | None


# Every iteration row carries these keys (null when not measured yet, e.g. before learning starts).
METRIC_KEYS = tuple(f.name for f in fields(IterationMetrics))


def _clean(value):
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


# Logged a second time against env steps, with every task metric (tracking errors and the like).
BY_ENV_STEPS = ("episode_return", "episode_length")


class MetricsWriter:
    def __init__(self, run_dir: str | Path, *, start_iteration: int = 0, tensorboard: bool = True,
                 wandb: WandbSettings | None = None, console_every_s: float = 2.0):
        """`wandb`: also log each row to Weights & Biases (the learner of rank 0 passes it)."""
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        self.path = Path(run_dir) / METRICS_FILE
        if start_iteration > 0:
            _truncate_from(self.path, start_iteration)
        # wall_clock_s counts from the run's first row, kept across resumes (as TensorBoard's "Relative").
        self._t0 = _first_time(self.path)
        self._file = open(self.path, "a", buffering=1)
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step: a resumed run rewrites the steps logged after its checkpoint.
            self._tb = SummaryWriter(log_dir=str(Path(run_dir) / TENSORBOARD_DIR),
                                     purge_step=start_iteration if start_iteration > 0 else None)
        # The quality curves once more against env steps (TensorBoard's own x axes are the step and
        # wall-clock time): its own writer, made at the first row, whose env steps a resume purges from.
        self._tb_env_steps = None
        self._tb_dir = Path(run_dir) / TENSORBOARD_DIR / "by_env_steps" if tensorboard else None
        self._resumed = start_iteration > 0
        self._wandb = None
        if wandb is not None:
            self._wandb = WandbSink(run_dir, wandb)
        self._console_every_s = console_every_s
        self._last_console = 0.0

    def write(self, iteration: int, env_steps: int, values: dict, *, max_iterations: int) -> dict:
        row = {"schema_version": METRICS_SCHEMA_VERSION, "iteration": iteration, "env_steps": env_steps,
               "time": round(time.time(), 3)}
        for key in METRIC_KEYS:
            row[key] = _clean(values.get(key))
        for key, value in values.items():
            if key not in row:
                row[key] = _clean(value) if isinstance(value, (int, float)) else value
        self._file.write(json.dumps(row) + "\n")
        if self._tb is not None:
            for key, value in row.items():
                if key not in ("schema_version", "iteration", "time") and isinstance(value, float):
                    self._tb.add_scalar(_tb_tag(key), value, iteration)
            self._write_by_env_steps(row)
        if self._wandb is not None:
            if self._t0 is None:
                self._t0 = row["time"]
            self._wandb.log(row, wall_clock_s=round(row["time"] - self._t0, 3))
        now = time.monotonic()
        if now - self._last_console >= self._console_every_s or iteration + 1 >= max_iterations:
            self._last_console = now
            print(progress_line(row, max_iterations), file=sys.stderr, flush=True)
        return row

    def _write_by_env_steps(self, row: dict) -> None:
        if self._tb_env_steps is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb_env_steps = SummaryWriter(log_dir=str(self._tb_dir),
                                               purge_step=row["env_steps"] if self._resumed else None)
        for key in BY_ENV_STEPS:
            if isinstance(row.get(key), float):
                self._tb_env_steps.add_scalar(_tb_tag(key), row[key], row["env_steps"])
        for key, value in row.items():
            if key.startswith("metrics/") and isinstance(value, float):
                self._tb_env_steps.add_scalar(key, value, row["env_steps"])

    def close(self) -> None:
        self._file.close()
        for tb in (self._tb, self._tb_env_steps):
            if tb is not None:
                tb.close()
        if self._wandb is not None:
            self._wandb.close()


def _first_time(path: Path) -> float | None:
    """The time stamp of the file's first row (None: no row yet, or an older row without one)."""
    if not path.exists():
        return None
    with open(path) as f:
        for line in f:
            if line.strip():
                try:
                    value = json.loads(line).get("time")
                except (json.JSONDecodeError, AttributeError):
                    return None
                return float(value) if isinstance(value, (int, float)) else None
    return None


def _truncate_from(path: Path, iteration: int) -> None:
    """Drop rows logged after the checkpoint a run resumes from: they are about to be redone; and a torn
    last line (a run killed mid-write), which the next row would otherwise be appended to."""
    if not path.exists():
        return
    keep = [line for line, row in _parse(path, torn_tail_ok=True) if row["iteration"] < iteration]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(line + "\n" for line in keep))
    tmp.replace(path)


def _tb_tag(key: str) -> str:
    if "/" in key:  # task terms arrive already grouped (rew/..., metrics/...)
        return key
    for prefix, group in (("learner_", "learner/"), ("collector_", "collector/"), ("episode_", "episode/")):
        if key.startswith(prefix):
            return group + key[len(prefix):]
    if key.endswith("_loss") or key == "alpha":
        return "loss/" + key
    return "perf/" + key


def progress_line(row: dict, max_iterations: int) -> str:
    def f(key, fmt):
        v = row.get(key)
        return "-" if v is None else format(v, fmt)

    sps = row.get("env_steps_per_s")
    sps_text = "-" if sps is None else f"{sps / 1e3:.1f}k"
    return (
        f"[it {row['iteration'] + 1}/{max_iterations}] {sps_text} steps/s | iter {f('iteration_ms', '.1f')} ms"
        f" | train {f('learner_train_ms', '.1f')} | wait {f('learner_wait_for_collector_ms', '.1f')}"
        f" | env {f('collector_env_step_ms', '.1f')} | ret {f('episode_return', '.2f')}"
        f" len {f('episode_length', '.0f')} | replay {int(row.get('replay_size') or 0)}"
    )


class MetricsError(ValueError):
    """A line of metrics.jsonl that is not a metrics row."""


def _parse(path: Path, *, torn_tail_ok: bool) -> list[tuple[str, dict]]:
    """(line, row) for every row of the file, in file order; blank lines are skipped."""
    return _parse_with_tail(path, torn_tail_ok=torn_tail_ok)[0]


def _parse_with_tail(path: Path, *, torn_tail_ok: bool) -> tuple[list[tuple[str, dict]], bool]:
    """_parse's rows, and whether a torn last line was left out."""
    lines = path.read_text().splitlines()
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            int(row["iteration"])  # every row has one: it orders the rows and places a resume
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            if torn_tail_ok and n == len(lines):  # a run killed mid-write leaves half a last line
                return out, True
            raise MetricsError(f"{path}:{n}: not a metrics row") from None
        out.append((line, row))
    return out, False


def rows_lost_before(run_dir: str | Path, iteration: int) -> str | None:
    """What a resume from a checkpoint at `iteration` finds missing of the rows it keeps (those before it):
    "rows of iterations A-B lost (why)", or None when the rows run up to it. A resume truncates the rows from
    `iteration` on and redoes them, so a gap here stays a gap. MetricsError: a line other than the last that
    is not a row."""
    path = Path(run_dir) / METRICS_FILE
    if path.exists():
        parsed, torn = _parse_with_tail(path, torn_tail_ok=True)
        kept = [int(row["iteration"]) for _, row in parsed if int(row["iteration"]) < iteration]
        why = "torn last line" if torn else "not written before the run ended"
    else:
        kept, why = [], "the file is missing"
    first = max(kept) + 1 if kept else 0
    if first >= iteration:
        return None
    which = f"row of iteration {first}" if first == iteration - 1 else f"rows of iterations {first}-{iteration - 1}"
    return f"{which} lost ({why})"


def read_metrics(run_dir: str | Path, *, latest_per_iteration: bool = False, torn_tail_ok: bool = False) -> list[dict]:
    """The rows of <run_dir>/metrics.jsonl in file order ([] before the first row is written);
    MetricsError names the first line that is not a row.

    latest_per_iteration: one row per iteration, in iteration order; where an iteration repeats
    (a resumed run redoes the iterations after its checkpoint) the row logged last wins.
    torn_tail_ok: ignore an unreadable last line, for readers of a run that may still be writing
    or was killed.
    """
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    rows = [row for _, row in _parse(path, torn_tail_ok=torn_tail_ok)]
    if not latest_per_iteration:
        return rows
    by_iteration = {int(row["iteration"]): row for row in rows}
    return [by_iteration[i] for i in sorted(by_iteration)]

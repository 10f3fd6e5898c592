"""run_summary.json: how a run ended (completed / failed / interrupted), why, final metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, Field

from unilab.atomic import write_json_atomic
from .layout import SUMMARY_FILE
from .metrics import MetricsError, read_metrics


class RunSummary(BaseModel):
    schema_version: int = 1
    status: Literal["completed", "failed", "interrupted"]
    cause: Optional[str] = None
    failed_role: Optional[str] = None
    traceback: Optional[str] = None
    iterations: Optional[int] = None
    env_steps: Optional[int] = None
    # The mean of metrics.jsonl's env_steps_per_s over the iterations that have it (rank 0, every segment of a
    # resumed run); None when no iteration has it.
    mean_env_steps_per_s: Optional[float] = None
    wall_s: float
    exit_codes: dict[str, Optional[int]] = Field(default_factory=dict)
    # what the user does about the cause (e.g. restart the MPS daemon), printed under it on the console
    fix: list[str] = Field(default_factory=list)
    # each child's standard error (native crash dumps, warnings), relative to the run directory
    stderr_logs: dict[str, str] = Field(default_factory=dict)
    final_metrics: dict[str, Any] = Field(default_factory=dict)
    data_parallel: Optional[dict[str, Any]] = None
    notes: list[str] = Field(default_factory=list)
    play: Optional[dict[str, Any]] = None  # the play report (training.outputs.no_play=false), or {"error": ...}

    def error_line(self) -> Optional[str]:
        """The failed child's exception as its traceback ends: type and message (the message says what to
        change, e.g. "raise sim.nconmax / sim.njmax")."""
        lines = [line.strip() for line in (self.traceback or "").splitlines() if line.strip()]
        return lines[-1][:2000] if lines else None

    def console(self, run_dir: str | Path, written: bool = True) -> str:
        """The launcher's last console lines: status and cause; for a failed run the child's exception (its
        last line), what to do, and where the full traceback and the child's stderr are."""
        text = f"unilab: run {self.status}{': ' + self.cause if self.cause else ''} -> {run_dir}"
        if self.status != "failed":
            return text
        error = self.error_line()
        if error:
            text += f"\n  {error}"
        if self.fix:
            text += "\n  fix:" + "".join(f"\n    {line}" for line in self.fix)
        if error and written:
            text += f"\n  the full traceback: {Path(run_dir) / SUMMARY_FILE}"
        log = self.stderr_logs.get(self.failed_role or "")
        if log and (Path(run_dir) / log).is_file() and (Path(run_dir) / log).stat().st_size:
            text += f"\n  the {self.failed_role}'s full log: {Path(run_dir) / log}"
        return text

    def write(self, run_dir: str | Path) -> Path:
        return write_json_atomic(Path(run_dir) / SUMMARY_FILE, self.model_dump(mode="json"))


def mean_env_steps_per_s(run_dir: str | Path) -> Optional[float]:
    """The run's mean env-steps/s from metrics.jsonl (the latest row of each iteration; rows without it, as the
    last iteration's, are left out). None when no row has it or the file cannot be read."""
    try:
        rows = read_metrics(run_dir, latest_per_iteration=True, torn_tail_ok=True)
    except (MetricsError, OSError, ValueError):
        return None
    values = [float(v) for r in rows if isinstance(v := r.get("env_steps_per_s"), (int, float))]
    return round(sum(values) / len(values), 3) if values else None

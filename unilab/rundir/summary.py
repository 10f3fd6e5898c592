"""run_summary.json: how a run ended (completed / failed / interrupted), why, final metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, Field

from .atomic import write_json_atomic
from .layout import SUMMARY_FILE


class RunSummary(BaseModel):
    schema_version: int = 1
    status: Literal["completed", "failed", "interrupted"]
    cause: Optional[str] = None
    failed_role: Optional[str] = None
    traceback: Optional[str] = None
    iterations: Optional[int] = None
    env_steps: Optional[int] = None
    wall_s: float
    exit_codes: dict[str, Optional[int]] = Field(default_factory=dict)
    final_metrics: dict[str, Any] = Field(default_factory=dict)
    data_parallel: Optional[dict[str, Any]] = None
    notes: list[str] = Field(default_factory=list)
    play: Optional[dict[str, Any]] = None  # the play report (training.no_play=false), or {"error": ...}

    def write(self, run_dir: str | Path) -> Path:
        return write_json_atomic(Path(run_dir) / SUMMARY_FILE, self.model_dump(mode="json"))

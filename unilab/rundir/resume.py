"""Where a resumed run starts: read once by the launcher (under the run directory's lock, after every check) and
handed to both roles, so that the learner's restore, the metrics' truncation and the collector's clip numbering
agree on one iteration."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResumePoint:
    checkpoint: str  # the intact checkpoint the learner restores
    iteration: int  # the iteration it was saved at: the run goes on from here

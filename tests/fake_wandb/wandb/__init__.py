"""A stand-in for the wandb package (a third-party service) in tests: it records what unilab asks of it.

In process, `calls` holds ("init", kwargs), ("log", data, step) and ("finish",) in order; a test puts the
names of the calls that should raise in `fail`. A child process (the learner of a `train` run, with this
folder on PYTHONPATH) appends the same records as JSON lines to $FAKE_WANDB_LOG."""

from __future__ import annotations

import json
import os

calls: list = []
fail: set = set()


def _record(*entry) -> None:
    calls.append(entry)
    path = os.environ.get("FAKE_WANDB_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")
    if entry[0] in fail:
        raise RuntimeError(f"fake wandb: {entry[0]} failed")


class Run:
    def __init__(self, kwargs: dict):
        self.id = kwargs.get("id")

    def log(self, data: dict, step: int | None = None) -> None:
        _record("log", data, step)

    def finish(self) -> None:
        _record("finish")


def init(**kwargs) -> Run:
    _record("init", kwargs)
    return Run(kwargs)

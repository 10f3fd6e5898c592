"""`train` called in-process, with spies on what it would start: shared by the tests of the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from unilab.cli.train import main as train_main


class Spy:
    def __init__(self, result=0):
        self.calls = []
        self.result = result

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self.result


@pytest.fixture
def spies(monkeypatch):
    """Spies on the process launcher and the environment factory."""
    import unilab.launcher.launch as launch_mod
    import unilab.tasks as tasks

    launcher, env_factory = Spy(), Spy()
    monkeypatch.setattr(launch_mod, "launch", launcher)
    monkeypatch.setattr(tasks, "make_env", env_factory)
    return launcher, env_factory


def run_train(*args) -> int:
    try:
        train_main(list(args))
    except SystemExit as exc:
        return exc.code or 0
    return 0


def run_dirs(log_dir: Path) -> list[Path]:
    return sorted(p for p in log_dir.iterdir() if p.is_dir() and p.name != "multirun") if log_dir.exists() else []

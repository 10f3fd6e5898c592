"""Where Hydra composes a config twice, `train` has it compose once (unilab/cli/hydra_compose_once.py): one
composition per run, with the mode Hydra's own look-up would find; and each job of a sweep composed once per pass,
with the same refusals."""

from __future__ import annotations

import pytest

from train_calls import run_dirs, run_train
from unilab.cli.hydra_compose_once import mode_in


@pytest.mark.parametrize("overrides, mode", [
    ([], None),
    (["training.run.seed=1"], None),
    (["hydra.mode=MULTIRUN"], "MULTIRUN"),
    (["hydra.mode=multirun"], "MULTIRUN"),
    (["++hydra.mode=RUN"], "RUN"),
    (["hydra.mode=RUN", "hydra.mode=MULTIRUN"], "MULTIRUN"),  # the last one wins, as in Hydra
    (["hydra.mode=SOMETIMES"], None),  # not a mode: the composition that runs refuses it
    (["hydra.modes=RUN"], None),
])
def test_the_mode_is_the_last_mode_override(overrides, mode):
    assert mode_in(overrides) == mode


def _recorded(monkeypatch, cls, method: str) -> list:
    """The arguments of each call of `cls.method`, which still runs."""
    calls = []
    original = getattr(cls, method)

    def recorded(self, *args, **kwargs):
        calls.append((args, kwargs))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cls, method, recorded)
    return calls


@pytest.fixture
def compositions(monkeypatch):
    """Each time Hydra composes the whole config."""
    from hydra._internal.hydra import Hydra

    return _recorded(monkeypatch, Hydra, "compose_config")


def test_a_run_composes_its_config_once(tmp_path, spies, compositions):
    assert run_train("training.run.device=cpu", f"training.run.log_dir={tmp_path / 'runs'}") == 0
    assert len(compositions) == 1 and len(run_dirs(tmp_path / "runs")) == 1


def test_a_mode_override_still_sweeps_and_a_bad_key_still_fails(tmp_path, spies, compositions, capsys):
    """`hydra.mode=MULTIRUN` without -m is a sweep (Hydra read it from the config before); a bad key is refused
    by the composition that runs, as when Hydra's look-up swallowed it."""
    assert run_train("hydra.mode=MULTIRUN", "training.run.device=cpu", "training.run.seed=1,2",
                     f"training.run.log_dir={tmp_path / 'runs'}") == 0
    assert len(run_dirs(tmp_path / "runs")) == 2 and len(spies[0].calls) == 2
    assert run_train("training.run.device=cpu", "training.bogus=1", f"training.run.log_dir={tmp_path / 'bad'}") == 2
    assert "bogus" in capsys.readouterr().err and not (tmp_path / "bad").exists()


def test_no_config_file_sets_the_mode():
    """What the look-up relies on: only an override can name the mode, so no file of conf/ may set it."""
    from pathlib import Path

    import yaml

    from unilab.cli.user_errors import CONF_DIR

    files = sorted(Path(CONF_DIR).rglob("*.yaml"))
    assert len(files) > 5
    for path in files:
        data = yaml.safe_load(path.read_text()) or {}
        assert "mode" not in (data.get("hydra") or {}), path


@pytest.fixture
def job_compositions(monkeypatch):
    """Each job Hydra composes in a sweep (its master config, its overrides)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    return _recorded(monkeypatch, ConfigLoaderImpl, "load_sweep_config")


def test_a_sweep_composes_each_job_once_per_pass(tmp_path, spies, job_compositions):
    """The check pass composes and validates every job, then the run pass launches them: each job is composed
    twice in all, not four times (the sweeper's early look at every batch is the check pass)."""
    assert run_train("-m", "training.run.device=cpu", "training.run.seed=1,2",
                     f"training.run.log_dir={tmp_path / 'runs'}") == 0
    assert len(run_dirs(tmp_path / "runs")) == 2 and len(spies[0].calls) == 2
    overrides = [kwargs["sweep_overrides"] if "sweep_overrides" in kwargs else args[1]
                 for args, kwargs in job_compositions]
    seeds = sorted(o for job in overrides for o in job if o.startswith("training.run.seed="))
    assert seeds == ["training.run.seed=1"] * 2 + ["training.run.seed=2"] * 2


def test_a_job_that_does_not_compose_late_in_a_sweep_refuses_the_sweep(tmp_path, spies, capsys):
    """Without the sweeper's early look, the job that fails to compose still fails in the check pass: exit 2,
    the option named, no job launched and nothing created, though the jobs before it composed."""
    log_dir = tmp_path / "runs"
    assert run_train("-m", "training.run.device=cpu", "+preset=cpu_smoke,no_such_preset",
                     f"training.run.log_dir={log_dir}") == 2
    assert "no_such_preset" in capsys.readouterr().err
    assert spies[0].calls == [] and not log_dir.exists()

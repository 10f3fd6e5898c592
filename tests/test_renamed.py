"""The old, flat spellings of the training keys (training.seed, ...) read in today's nested ones
(training.run.seed, ...): on the command line and in sweeps, in a resume of a run whose run_config.json has them,
and in `unilab config diff` of such a run and a new one; one note per old key. These tests spell the old keys on
purpose."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from train_calls import run_train

from unilab.config.nearest import schema_keys
from unilab.config.schema import TrainingConfig
from unilab.rundir.renamed import (
    RENAMED,
    TRAINING_GROUPS,
    new_spelling,
    upgrade_overrides,
)


def test_the_table_is_the_schemas_groups():
    """Every old key has its new key in the schema, and every key of the schema's groups had an old one."""
    for group in (f.name for f in dataclasses.fields(TrainingConfig)):
        assert group in TRAINING_GROUPS
    nested = set(schema_keys(TrainingConfig))
    leaves = {key for key in nested if key.count(".") == 1}
    assert {new.removeprefix("training.") for new in RENAMED.values()} == leaves


def test_overrides_are_rewritten_with_one_note_per_old_key():
    notes = []
    out = upgrade_overrides(["training.seed=3", "+training.video_interval=20", "~training.resume", "-m",
                             "training.mps_client_priority.collector=below_normal", "training.seed=1,2",
                             "task.num_envs=8", "training.run.seed=4", "training.seedy=1"], notes.append)
    assert out == ["training.run.seed=3", "+training.outputs.video_interval=20", "~training.run.resume", "-m",
                   "training.mps.mps_client_priority.collector=below_normal", "training.run.seed=1,2",
                   "task.num_envs=8", "training.run.seed=4", "training.seedy=1"]
    assert notes == ["note: training.seed is now training.run.seed",
                     "note: training.video_interval is now training.outputs.video_interval",
                     "note: training.resume is now training.run.resume",
                     "note: training.mps_client_priority is now training.mps.mps_client_priority"]
    assert new_spelling("training.run.seed") is None and new_spelling("algo.seed") is None


def test_old_keys_on_the_command_line_compose_as_the_new_ones(capsys):
    import yaml

    assert run_train("--cfg", "job", "+preset=cpu_smoke", "training.seed=3", "training.keep_checkpoints=3",
                     "training.block_ambient_mps=true", "training.nan_guard.enabled=false") == 0
    out, err = capsys.readouterr()
    training = yaml.safe_load(out)["training"]
    assert training["run"]["seed"] == 3 and training["outputs"]["keep_checkpoints"] == 3
    assert training["mps"]["block_ambient_mps"] is True
    assert training["loop"]["nan_guard"]["enabled"] is False
    notes = [line for line in err.splitlines() if " is now " in line]
    assert notes == ["unilab: note: training.seed is now training.run.seed",
                     "unilab: note: training.keep_checkpoints is now training.outputs.keep_checkpoints",
                     "unilab: note: training.block_ambient_mps is now training.mps.block_ambient_mps",
                     "unilab: note: training.nan_guard is now training.loop.nan_guard"]


def test_an_old_key_swept_runs_the_sweep_in_the_new_key(capsys):
    assert run_train("-m", "+preset=cpu_smoke", "training.seed=1,2", "--dry-run") == 0
    out, err = capsys.readouterr()
    assert "#0 +preset=cpu_smoke training.run.seed=1" in out and "#1 +preset=cpu_smoke training.run.seed=2" in out
    assert err.count("note: training.seed is now training.run.seed") == 1  # once, for the check and the run


def test_an_unknown_key_names_the_nearest_nested_one(capsys):
    assert run_train("+preset=cpu_smoke", "training.sed=3") == 2
    assert "training.sed: no such key in training; did you mean run.seed?" in capsys.readouterr().err
    assert run_train("+preset=cpu_smoke", "training.run.sed=3") == 2
    assert "training.run.sed: no such key in training.run; did you mean seed?" in capsys.readouterr().err


def test_a_plus_key_the_schema_lacks_gets_the_same_did_you_mean(capsys):
    """`+training.run.sed=3` adds the key past Hydra; the compose-time checks refuse it with the same text."""
    assert run_train("+preset=cpu_smoke", "+training.run.sed=3") == 2
    err = capsys.readouterr().err
    assert "training.run.sed: no such key in training.run; did you mean seed? `train --cfg job` lists the keys" in err
    assert run_train("+preset=cpu_smoke", "+training.stall_timeout=3") == 2
    assert "did you mean loop.stall_timeout_s or" in capsys.readouterr().err


def _flat(config: dict) -> dict:
    """A run config as an earlier unilab recorded it: the training keys flat."""
    training = {key: value for group in config["training"].values() for key, value in group.items()}
    return {**config, "training": training}


def test_a_resume_of_a_run_with_an_old_run_config(tmp_path, spies, capsys):
    """A run recorded with the flat keys resumes, asked with the old keys too; its run config reads in the new."""
    from unilab.rundir.checkpoint import save_checkpoint

    launcher = spies[0]
    log_dir = tmp_path / "runs"
    assert run_train("+preset=cpu_smoke", f"training.run.log_dir={log_dir}", "training.run.run_name=r") == 0
    run = log_dir / "r"
    config = json.loads((run / "run_config.json").read_text())
    (run / "run_config.json").write_text(json.dumps(_flat(config)))
    save_checkpoint(run, 10, 160, {})  # no record of its own config: the resume reads the run's run_config.json
    (run / "metrics.jsonl").write_text("".join(json.dumps({"iteration": i}) + "\n" for i in range(10)))
    launcher.calls.clear()
    capsys.readouterr()
    assert run_train("+preset=cpu_smoke", f"training.log_dir={log_dir}", f"training.resume={run}") == 0
    err = capsys.readouterr().err
    ((prepared, _cfg), _kwargs) = launcher.calls[0]
    assert prepared.run_dir == run and prepared.config.training.run.resume == str(run)
    assert "note: training.resume is now training.run.resume" in err
    assert f"{run / 'run_config.json'} has training's keys of an earlier unilab" in err
    rewritten = json.loads((run / "run_config.json").read_text())["training"]  # the resume's, in the new keys
    assert rewritten["run"]["resume"] == str(run) and rewritten["outputs"] == config["training"]["outputs"]


def test_config_diff_of_an_old_and_a_new_run_shows_only_what_differs(tmp_path, capsys):
    from unilab.cli.tools import main as unilab_main

    new = {"algo": {"name": "fastsac"}, "task": {"name": "g1_walk_flat"},
           "training": {"run": {"seed": 1, "device": "cpu"}, "outputs": {"video_interval": None}}}
    old = _flat({**new, "training": {"run": {"seed": 2, "device": "cpu"}, "outputs": {"video_interval": None}}})
    for name, config in (("old", old), ("new", new)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run_config.json").write_text(json.dumps(config))
    assert unilab_main(["config", "diff", str(tmp_path / "old"), str(tmp_path / "new")]) == 1  # 1: they differ
    out, err = capsys.readouterr()
    assert "training.run.seed" in out and "training.run.device" not in out and "<absent>" not in out
    assert "training.seed" not in out.replace("training.run.seed", "")
    assert f"{Path(tmp_path / 'old' / 'run_config.json')} has training's keys of an earlier unilab" in err

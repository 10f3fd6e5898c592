"""training.outputs.logger=[...,wandb]: the W&B sink logs what metrics.jsonl holds, keeps one W&B run across a
resume, never stops training when wandb fails, and is refused at compose when it cannot work."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from train_calls import run_dirs, run_train
from unilab.rundir.layout import METRICS_FILE
from unilab.rundir.metrics import MetricsWriter, read_metrics
from unilab.rundir.run_config import load_run_config
from unilab.rundir.wandb_sink import MAX_ID_LEN, WandbSettings, run_id

FAKE_DIR = Path(__file__).resolve().parent / "fake_wandb"
SETTINGS = WandbSettings(project="g1", mode="offline", config={"algo": {"name": "fastsac"}})


@pytest.fixture
def fake_wandb(monkeypatch):
    """A fresh fake wandb module as `import wandb` finds it (and importlib.util.find_spec too)."""
    spec = importlib.util.spec_from_file_location("wandb", FAKE_DIR / "wandb" / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "wandb", module)
    return module


def of_kind(calls, kind):
    return [c for c in calls if c[0] == kind]


def write_iterations(run_dir, iterations, *, start_iteration=0, wandb=SETTINGS):
    writer = MetricsWriter(run_dir, start_iteration=start_iteration, tensorboard=False, wandb=wandb,
                           console_every_s=1e9)
    for it in iterations:
        writer.write(it, 512 * (it + 1), {"episode_return": 1.5 * it, "critic_loss": None if it == 0 else 0.25,
                                          "rew/alive": 0.2, "note": "text", "replay_size": 64 * it},
                     max_iterations=100)
    writer.close()


def test_rows_logged_are_the_metrics_rows_numbers_at_their_iteration(tmp_path, fake_wandb):
    run = tmp_path / "fastsac_walk_2026"
    write_iterations(run, range(3))
    calls = fake_wandb.calls
    assert [c[0] for c in calls] == ["init", "log", "log", "log", "finish"]
    (_, init), = of_kind(calls, "init")
    assert init["project"] == "g1" and init["mode"] == "offline" and init["resume"] == "allow"
    assert init["name"] == "fastsac_walk_2026" and init["dir"] == str(run)
    assert init["id"] == run_id(run) and init["config"] == SETTINGS.config
    rows = read_metrics(run)
    logs = of_kind(calls, "log")
    assert [step for _, _, step in logs] == [r["iteration"] for r in rows] == [0, 1, 2]
    for (_, data, _), row in zip(logs, rows):
        expected = {k: v for k, v in row.items()
                    if isinstance(v, float) and k != "time"} | {"env_steps": row["env_steps"]}
        assert {k: v for k, v in data.items() if k != "wall_clock_s"} == expected
        assert "note" not in data and "iteration_ms" not in data  # text and nulls are not curves
        assert math.isclose(data["wall_clock_s"], row["time"] - rows[0]["time"], abs_tol=2e-3)
    assert logs[1][1]["critic_loss"] == 0.25 and "critic_loss" not in logs[0][1]
    assert logs[2][1]["rew/alive"] == 0.2 and logs[2][1]["env_steps"] == 1536


def test_a_resumed_run_continues_the_same_wandb_run(tmp_path, fake_wandb):
    run = tmp_path / "walk"
    write_iterations(run, range(4))
    # the first segment ran a while ago: its rows are stamped 100 s earlier
    earlier = [{**r, "time": r["time"] - 100.0} for r in read_metrics(run)]
    (run / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in earlier))
    first_t0 = earlier[0]["time"]
    fake_wandb.calls.clear()
    write_iterations(run, range(2, 5), start_iteration=2)  # resumed from the checkpoint of iteration 2
    (_, init), = of_kind(fake_wandb.calls, "init")
    assert init["id"] == run_id(run) == "walk" and init["resume"] == "allow"
    logs = of_kind(fake_wandb.calls, "log")
    assert [step for _, _, step in logs] == [2, 3, 4]
    rows = read_metrics(run)
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3, 4] and rows[0]["time"] == first_t0
    # wall-clock time still counts from the run's first row, not from the resume
    assert logs[0][1]["wall_clock_s"] >= 100.0
    assert math.isclose(logs[-1][1]["wall_clock_s"], rows[-1]["time"] - first_t0, abs_tol=2e-3)


@pytest.mark.parametrize("failing", ["log", "init"])
def test_a_failing_wandb_turns_the_sink_off_and_training_goes_on(tmp_path, fake_wandb, capsys, failing):
    fake_wandb.fail = {failing}
    write_iterations(tmp_path, range(3))
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("unilab: warning: W&B")]
    assert len(warnings) == 1 and f"wandb {failing} failed" in warnings[0], err
    assert len(of_kind(fake_wandb.calls, "log")) == (1 if failing == "log" else 0)  # never tried again
    assert [r["iteration"] for r in read_metrics(tmp_path)] == [0, 1, 2]


def test_a_missing_wandb_at_run_time_only_warns(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    write_iterations(tmp_path, range(2))
    assert "unilab: warning: W&B logging off" in capsys.readouterr().err
    assert len(read_metrics(tmp_path)) == 2


def test_run_ids_are_valid_stable_and_distinct(tmp_path):
    assert run_id(tmp_path / "a b:c#d") == "a-b-c-d"
    long_a, long_b = "x" * 80 + "_seed1", "x" * 80 + "_seed2"
    assert run_id(tmp_path / long_a) != run_id(tmp_path / long_b)
    assert len(run_id(tmp_path / long_a)) == MAX_ID_LEN and run_id(tmp_path / long_a) == run_id(Path(long_a))


def test_an_old_run_config_reads_tensorboard_as_logger(tmp_path):
    for old, logger in ((False, []), (True, ["tensorboard"])):
        (tmp_path / "run_config.json").write_text(json.dumps({"training": {"seed": 1, "tensorboard": old}}))
        assert load_run_config(tmp_path)["training"] == {"run": {"seed": 1}, "outputs": {"logger": logger}}


def test_an_old_tracking_run_config_keeps_the_solver_cap_it_trained_with(tmp_path):
    # Written before task.solver_iterations: the run trained at the G1 model's 10, not today's default.
    for task, expected in (({"name": "g1_motion_tracking"}, 10),
                           ({"name": "g1_motion_tracking", "solver_iterations": 6}, 6)):
        (tmp_path / "run_config.json").write_text(json.dumps({"task": task}))
        assert load_run_config(tmp_path)["task"]["solver_iterations"] == expected
    (tmp_path / "run_config.json").write_text(json.dumps({"task": {"name": "g1_walk_flat"}}))
    assert load_run_config(tmp_path)["task"] == {"name": "g1_walk_flat"}


# --- compose: `train` refuses what cannot work, before anything exists ---------------------------------


@pytest.mark.parametrize("override, needle", [
    ("training.outputs.logger=[bogus]", "training.outputs.logger=['bogus']: expected a list of tensorboard, wandb"),
    ("training.outputs.logger=[tensorboard,tensorboard]", "each at most once"),
    ("training.outputs.wandb_mode=cloud", "training.outputs.wandb_mode='cloud': expected offline or online"),
])
def test_bad_logger_settings_fail_at_compose(tmp_path, spies, capsys, override, needle):  # noqa: F811
    log_dir = tmp_path / "runs"
    assert run_train("training.run.device=cpu", override, f"training.run.log_dir={log_dir}") == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not log_dir.exists() and spies[0].calls == []


def test_wandb_without_the_package_fails_at_compose(tmp_path, spies, capsys, monkeypatch):  # noqa: F811
    monkeypatch.setitem(sys.modules, "wandb", None)  # find_spec answers None: not installed
    log_dir = tmp_path / "runs"
    assert run_train("training.run.device=cpu", "training.outputs.logger=[wandb]", f"training.run.log_dir={log_dir}") == 2
    err = capsys.readouterr().err
    assert "pip install 'unilab[wandb]'" in err and "Traceback" not in err
    assert not log_dir.exists() and spies[0].calls == []


def test_wandb_with_the_package_composes(tmp_path, spies, fake_wandb):  # noqa: F811
    log_dir = tmp_path / "runs"
    assert run_train("training.run.device=cpu", "training.outputs.logger=[tensorboard,wandb]", "training.outputs.wandb_mode=online",
                     f"training.run.log_dir={log_dir}") == 0
    (run,) = run_dirs(log_dir)
    training = json.loads((run / "run_config.json").read_text())["training"]["outputs"]
    assert training["logger"] == ["tensorboard", "wandb"] and training["wandb_mode"] == "online"
    assert fake_wandb.calls == []  # compose only checks; the learner logs


# --- end to end: the learner of rank 0 logs the run ---------------------------------------------------


@pytest.mark.integration
def test_a_training_run_logs_to_wandb(tmp_path):
    log_dir, record = tmp_path / "runs", tmp_path / "wandb_calls.jsonl"
    env = {**os.environ, "FAKE_WANDB_LOG": str(record),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(FAKE_DIR), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "unilab.cli.train", "+preset=cpu_smoke", "task.num_envs=8", "algo.max_iterations=4",
           "training.outputs.logger=[wandb]", "training.outputs.wandb_project=smoke", f"training.run.log_dir={log_dir}",
           "training.run.run_name=wb", "training.outputs.no_play=true"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    run = log_dir / "wb"
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert [c[0] for c in calls] == ["init"] + ["log"] * 4 + ["finish"]
    init = calls[0][1]
    assert init["project"] == "smoke" and init["name"] == "wb" and init["id"] == "wb" and init["mode"] == "offline"
    assert Path(init["dir"]) == run and init["config"] == json.loads((run / "run_config.json").read_text())
    rows = read_metrics(run)
    assert [c[2] for c in calls[1:-1]] == [r["iteration"] for r in rows] == [0, 1, 2, 3]
    assert [c[1]["env_steps"] for c in calls[1:-1]] == [r["env_steps"] for r in rows]
    assert not (run / "tensorboard").exists() and (run / METRICS_FILE).exists()

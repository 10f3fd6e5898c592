"""benchmarks/packed_runs.py: its commands (dry run), its report from the arms' run directories, bad arguments."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from train_compose import check_command

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "packed_runs.py"
sys.path.insert(0, str(ROOT / "benchmarks"))
import packed_runs  # noqa: E402


def test_the_dry_run_prints_the_warmup_and_three_arms_that_compose(tmp_path):
    out = tmp_path / "packed"
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--dry-run"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 4 and not out.exists()
    warmup, sequential, packed_mps, timesliced = (shlex.split(line) for line in lines)
    assert warmup[1:4] == ["-m", "unilab.cli.tools", "warmup"]
    for cmd in (sequential, packed_mps, timesliced):
        assert cmd[1:4] == ["-m", "unilab.cli.train", "-m"]
        assert {"--algo", "fastsac", "g1_walk_flat", "task.num_envs=1024", "training.run.seed=1,2,3,4"} <= set(cmd)
        assert "algo.max_iterations=5000" in cmd
    assert "+execution=mps" in sequential and not any("hydra/launcher" in a for a in sequential)
    assert {"+execution=mps", "hydra/launcher=unilab_packed", "hydra.launcher.max_parallel=4"} <= set(packed_mps)
    assert {"+execution=default", "training.mps.block_ambient_mps=true", "hydra/launcher=unilab_packed",
            "hydra.launcher.max_parallel=4"} <= set(timesliced)
    assert [c[-1] for c in (sequential, packed_mps, timesliced)] == [
        f"training.run.log_dir={out.resolve() / arm}" for arm in ("sequential", "packed_mps", "packed_timesliced")]
    # every job of every arm composes as `train` would compose it
    check_command(shlex.join(["unilab", *warmup[3:]]))
    for cmd in (sequential, packed_mps, timesliced):
        one_seed = [a if not a.startswith("training.run.seed=") else "training.run.seed=1" for a in cmd[3:]]
        check_command(shlex.join(["train", *one_seed]))


def test_the_seeds_and_parallelism_follow_the_arguments(tmp_path, capsys):
    assert packed_runs.main(["--out", str(tmp_path / "o"), "--seeds", "7", "8", "--iterations", "30", "--dry-run", "--",
                             "+preset=cpu_smoke"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all("training.run.seed=7,8" in line and "+preset=cpu_smoke" in line and "--algo" not in line
               for line in lines[1:])
    assert "hydra.launcher.max_parallel=2" in lines[2] and "algo.max_iterations=30" in lines[3]


@pytest.mark.parametrize("args", [["--iterations", "0"], ["--seeds", "1", "1"], ["--seeds"]])
def test_bad_arguments_exit_2_and_create_nothing(tmp_path, args):
    with pytest.raises(SystemExit) as stop:
        packed_runs.main(["--out", str(tmp_path / "o"), *args])
    assert stop.value.code == 2 and not (tmp_path / "o").exists()


def test_a_folder_in_use_is_refused(tmp_path):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "old").write_text("")
    with pytest.raises(SystemExit) as stop:
        packed_runs.main(["--out", str(tmp_path / "o"), "--dry-run"])
    assert stop.value.code == 2


def test_an_arms_report_adds_its_runs_over_its_wall_time(tmp_path):
    arm = tmp_path / "packed_mps"
    for seed, (steps, rate) in enumerate([(1_000_000, 40_000.0), (3_000_000, 60_000.0)], 1):
        run = arm / f"run_seed-{seed}"
        run.mkdir(parents=True)
        (run / "run_summary.json").write_text(json.dumps({"status": "completed", "env_steps": steps,
                                                          "mean_env_steps_per_s": rate, "wall_s": 90.0}))
    (arm / "multirun").mkdir()
    (arm / "broken").mkdir()  # a run that left no summary
    report = packed_runs.arm_report(arm, wall_s=100.0, exit_code=1)
    assert report["env_steps"] == 4_000_000 and report["aggregate_env_steps_per_s"] == 40_000.0
    assert [r["run"] for r in report["runs"]] == ["broken", "run_seed-1", "run_seed-2"]
    assert report["runs"][0]["status"] == "no run_summary.json"
    text = packed_runs.table({"arms": {"packed_mps": report}})
    assert "packed_mps" in text and "40000.0" in text and "40000, 60000" in text

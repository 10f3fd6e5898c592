"""benchmarks/time_to_walk.py: the walk targets on eval means, checkpoint times, bad arguments, where the
runs and evaluations start."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import time_to_walk  # noqa: E402


@pytest.mark.parametrize("overall, expected", [
    ({"lin_error": 0.09, "yaw_error": 0.05, "fall_fraction": 0.0}, True),
    ({"lin_error": 0.10, "yaw_error": 0.15, "fall_fraction": 0.0}, True),
    ({"lin_error": 0.11, "yaw_error": 0.05, "fall_fraction": 0.0}, False),
    ({"lin_error": 0.05, "yaw_error": 0.16, "fall_fraction": 0.0}, False),
    ({"lin_error": 0.05, "yaw_error": 0.05, "fall_fraction": 0.01}, False),
    ({"lin_error": None, "yaw_error": None, "fall_fraction": 1.0}, False),
])
def test_walking_needs_every_target(overall, expected):
    assert time_to_walk.walks(overall) is expected


def test_checkpoints_are_listed_by_iteration_with_the_seconds_since_the_start(tmp_path):
    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    for it, at in ((1000, 110.0), (500, 95.5), (1500, 130.0)):
        path = folder / f"iter_{it:07d}.pt"
        path.write_bytes(b"x")
        os.utime(path, (at, at))
    (folder / "latest.pt").write_bytes(b"x")
    listed = time_to_walk.checkpoint_times(tmp_path / "run", started_wall=50.0)
    assert [c["iteration"] for c in listed] == [500, 1000, 1500]
    assert [c["written_s"] for c in listed] == [45.5, 60.0, 80.0]


def test_bad_arguments_exit_2_before_any_run(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        time_to_walk.main(["--seconds", "0", "--out", str(tmp_path / "o")])
    assert stop.value.code == 2 and not (tmp_path / "o").exists()


def test_the_report_is_written_after_each_run_and_again_once_evaluated(tmp_path, monkeypatch):
    """A run's timings are on disk before the next run starts (a machine taken back keeps them); the last write
    holds the evaluations and the first walking checkpoint."""
    out = tmp_path / "o"
    seen_before_run = []

    def fake_run(overrides, seed, out_dir, cache, seconds, save_interval):
        report = out_dir / "time_to_walk.json"
        seen_before_run.append(json.loads(report.read_text()) if report.exists() else None)
        ckpt = {"checkpoint": f"seed{seed}/iter_0000500.pt", "iteration": 500, "written_s": 90.0 + seed}
        return {"run": str(out_dir / f"seed{seed}"), "seed": seed, "exit": 0, "status": "interrupted",
                "first_row_s": 70.0, "stopped_s": seconds, "checkpoints": [ckpt]}

    def fake_eval(run, ckpt, envs_per_command):
        lin = 0.05 if run.endswith("seed2") else 0.3
        return {**ckpt, "nominal": {"lin_error": lin, "yaw_error": 0.05, "fall_fraction": 0.0}, "walks": lin <= 0.1}

    monkeypatch.setattr(time_to_walk, "timed_run", fake_run)
    monkeypatch.setattr(time_to_walk, "evaluate", fake_eval)
    assert time_to_walk.main(["--seeds", "1", "2", "--seconds", "5", "--warm", str(tmp_path), "--out", str(out)]) == 0
    assert seen_before_run[0] is None
    assert seen_before_run[1]["evaluated"] is False and [r["seed"] for r in seen_before_run[1]["runs"]] == [1]
    assert "nominal" not in seen_before_run[1]["runs"][0]["checkpoints"][0]
    final = json.loads((out / "time_to_walk.json").read_text())
    assert final["evaluated"] is True and [r["seed"] for r in final["runs"]] == [1, 2]
    assert final["runs"][0]["first_walking"] is None and final["runs"][1]["first_walking"]["written_s"] == 92.0


FAKE_TRAIN = """
import json, os, sys
from pathlib import Path
import unilab
cwd = os.getcwd()  # what torch's compile config and oneMKL's loader do at import: fails where the folder is gone
args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
run = Path(args["training.run.log_dir"]) / args["training.run.run_name"]
(run / "checkpoints").mkdir(parents=True)
(run / "metrics.jsonl").write_text(json.dumps({"cwd": cwd, "unilab": unilab.__file__}) + "\\n")
(run / "checkpoints" / "iter_0000500.pt").write_bytes(b"x")
(run / "run_summary.json").write_text(json.dumps({"status": "completed"}))
"""
FAKE_EVAL = """
import json, os, sys
cwd = os.getcwd()
report = sys.argv[sys.argv.index("--out") + 1]
overall = {"lin_error": 0.05, "yaw_error": 0.05, "fall_fraction": 0.0, "cwd": cwd}
open(report, "w").write(json.dumps({"suites": {"nominal": {"overall": overall}}}))
"""


def test_runs_and_evaluations_start_in_out_when_the_launch_folder_is_gone(tmp_path, monkeypatch):
    """The folder the benchmark was started from is removed (a tree sent again to the machine, say): runs and
    evaluations started after that still start, in OUT, and load this checkout's unilab."""
    for name, text in (("fake_train.py", FAKE_TRAIN), ("fake_eval.py", FAKE_EVAL)):
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(time_to_walk, "TRAIN", [sys.executable, str(tmp_path / "fake_train.py")])
    monkeypatch.setattr(time_to_walk, "EVAL", [sys.executable, str(tmp_path / "fake_eval.py")])
    monkeypatch.delenv("PYTHONPATH", raising=False)  # unilab is found through the benchmark's checkout alone
    launch, out = tmp_path / "launch", tmp_path / "o"
    launch.mkdir()
    monkeypatch.chdir(launch)
    launch.rmdir()
    assert time_to_walk.main(["--seeds", "1", "--seconds", "60", "--warm", str(tmp_path), "--out", str(out)]) == 0
    run = json.loads((out / "time_to_walk.json").read_text())["runs"][0]
    assert run["exit"] == 0 and run["status"] == "completed"
    started = json.loads((out / "seed1" / "metrics.jsonl").read_text())
    assert started["cwd"] == str(out)
    assert Path(started["unilab"]).resolve().is_relative_to(time_to_walk.REPO / "unilab")
    [ckpt] = run["checkpoints"]
    assert "eval_error" not in ckpt and ckpt["nominal"]["cwd"] == str(out) and ckpt["walks"]

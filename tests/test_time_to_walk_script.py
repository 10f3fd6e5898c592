"""benchmarks/time_to_walk.py: the walk targets on eval means, checkpoint times, bad arguments."""

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

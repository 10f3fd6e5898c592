"""benchmarks/time_to_walk.py: the walk targets on eval means, checkpoint times, bad arguments."""

from __future__ import annotations

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

"""benchmarks/cold_start.py: two timed runs (cold, warm) with their first metrics row and start-up phases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "cold_start.py"


@pytest.mark.integration
def test_two_runs_report_their_first_row_and_phases(tmp_path):
    """On the CPU with the test session's kernel cache (so it takes seconds once warm): both runs finish, each
    has a first row before its end and the console's start-up phases, and no run directory is left behind."""
    out = tmp_path / "cold.json"
    cache = Path(os.environ["UNILAB_CACHE_DIR"])  # the test session's (conftest.py): warm
    done = subprocess.run([sys.executable, str(SCRIPT), "--cache", str(cache), "--iterations", "3", "--out", str(out),
                           "--", "+preset=cpu_smoke", "task.num_envs=8"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(tmp_path / "none")))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert [run["run"] for run in result["runs"]] == ["cold", "warm"]
    for run in result["runs"]:
        assert run["exit"] == 0 and 0 < run["first_row_s"] <= run["end_s"]
        texts = " ".join(line for _, line in run["phases"])
        assert "worlds built in" in texts and "run completed" in texts
    assert "first metrics row" in done.stdout
    assert not list(tmp_path.glob("runs*"))


def test_a_failing_run_makes_the_exit_status_1(tmp_path):
    out = tmp_path / "cold.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--cache", str(tmp_path / "c"), "--out", str(out), "--",
                           "+preset=cpu_smoke", "task.num_envs=0"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    runs = json.loads(out.read_text())["runs"]
    assert [run["exit"] for run in runs] == [2, 2] and all(run["first_row_s"] is None for run in runs)

"""benchmarks/task_step_ops.py: the kernel-launching torch ops of one env step, per task method."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "task_step_ops.py"


@pytest.mark.parametrize("args, named", [(["--task", "g1_nope"], "unknown task 'g1_nope'"),
                                         (["--envs", "0"], "--envs must be >= 1")])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, args, named):
    out = tmp_path / "ops.json"
    done = subprocess.run([sys.executable, str(SCRIPT), *args, "--json", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and named in done.stderr
    assert not out.exists()


@pytest.mark.integration
def test_counts_are_attributed_to_the_task_methods(tmp_path, monkeypatch, capsys):
    # In this process (its imports are made already): the script's main() with its command line.
    spec = importlib.util.spec_from_file_location("task_step_ops", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "ops.json"
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "--task", "g1_motion_tracking", "--envs", "2", "--json", str(out)])
    script.main()
    report = json.loads(out.read_text())
    per_method = report["per_method"]
    assert report["total"] == sum(per_method.values()) > 100
    # the innermost method running gets the op: the tracking update and the rewards' residuals are apart
    assert per_method["_update_tracking"] > 0 and per_method["_compute_residuals"] > 0
    assert f"{report['total']} kernel-launching torch ops" in capsys.readouterr().out

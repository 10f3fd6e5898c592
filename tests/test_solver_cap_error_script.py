"""benchmarks/solver_cap_error.py: one env step from the same saved states at several solver caps."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "solver_cap_error.py"
_spec = importlib.util.spec_from_file_location("solver_cap_error", SCRIPT)
solver_cap_error = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(solver_cap_error)


@pytest.mark.parametrize("args, named", [(["--caps", "0"], "--caps"), (["--task", "nope"], "nope"),
                                         (["--states", "0"], "--states")])
def test_bad_input_exits_2_before_any_env_is_built(args, named, tmp_path):
    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--envs", "2", *args, "--json", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and named in done.stderr
    assert not out.exists()


@pytest.mark.integration
def test_the_reference_cap_reproduces_its_step_and_a_cap_of_1_does_not(tmp_path, monkeypatch):
    # In this process: the script's main() with its command line. Stepping a saved state again at the
    # reference cap must give the same velocities bit for bit (save_state / load_state hold everything
    # the step depends on); a cap of 1 leaves the contacts' solve unfinished.
    out = tmp_path / "rows.json"
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "--device", "cpu", "--envs", "4", "--caps", "10", "1",
                                      "--states", "1", "--every", "3", "--json", str(out)])
    solver_cap_error.main()
    report = json.loads(out.read_text())
    rows = {r["cap"]: r for r in report["rows"]}
    assert rows[10]["max_abs_diff"] == 0.0 and rows[10]["share_above_tol"] == 0.0
    assert rows[1]["mean_abs_diff"] > 0.0 and report["mean_abs_change"] > 0.0
    assert report["reference_iterations_max"] > 1

"""The coupled-iteration bound of benchmarks/roles_alone.py (side-by-side measurements -> shortest iteration)."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "roles_alone.py"
spec = importlib.util.spec_from_file_location("roles_alone", SCRIPT)
roles_alone = importlib.util.module_from_spec(spec)
spec.loader.exec_module(roles_alone)
bound = roles_alone.coupled_bound


@pytest.mark.parametrize("alone, shared, expected", [
    ((10, 10), (20, 20), 20.0),   # side by side gains nothing: time-slicing, the sum
    ((10, 10), (10, 10), 10.0),   # neither slows the other: the max
    ((10, 5), (10, 10), 10.0),    # the learner keeps its rate, the collector halves: still the learner's 10
    ((8, 8), (12, 12), 12.0),     # both keep 2/3: one unit each takes 12
])
def test_bound_of_simple_cases(alone, shared, expected):
    assert bound(*alone, *shared) == pytest.approx(expected)


def test_bound_lies_between_max_and_sum():
    for alone, shared in [((11.0, 6.8), (21.6, 10.1)), ((5.0, 7.0), (9.0, 9.5)), ((3.0, 9.0), (3.5, 30.0))]:
        t = bound(*alone, *shared)
        assert max(alone) - 1e-9 <= t <= sum(alone) + 1e-9, (alone, shared, t)


def test_bound_cli_reads_the_side_by_side_results(tmp_path):
    (tmp_path / "learner.json").write_text(json.dumps({"role": "learner", "ms_while_sharing": 20.0}))
    (tmp_path / "collector.json").write_text(json.dumps({"role": "collector", "ms_while_sharing": 20.0}))
    alone = tmp_path / "alone.json"
    alone.write_text(json.dumps({"learner_update_cycle_ms": 10.0, "collector_tick_ms": 10.0}))
    out = subprocess.run([sys.executable, str(SCRIPT), "--bound", str(tmp_path), "--alone", str(alone)],
                         capture_output=True, text=True, check=True).stdout
    result = json.loads(out)
    assert result["coupled_bound_ms"] == pytest.approx(20.0)
    assert result["bound_over_max_alone"] == pytest.approx(2.0)
    assert json.loads((tmp_path / "bound.json").read_text()) == result


def test_bound_cli_refuses_missing_inputs(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), "--bound", str(tmp_path)], capture_output=True, text=True)
    assert run.returncode == 2 and "--bound needs --alone" in run.stderr

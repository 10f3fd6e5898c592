"""benchmarks/env_throughput.py: its task variants (what a setting costs in the env step)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "env_throughput.py"
_spec = importlib.util.spec_from_file_location("env_throughput", SCRIPT)
env_throughput = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(env_throughput)


def test_variant_parses_dotted_keys_and_yaml_values():
    name, overrides = env_throughput.parse_variant(
        "no_rand:randomization.friction_range=null,randomization.com_offset=null,self_collisions=false")
    assert name == "no_rand"
    assert overrides == {"randomization": {"friction_range": None, "com_offset": None}, "self_collisions": False}
    cfg = env_throughput.task_config("g1_motion_tracking", 4, overrides)
    assert cfg.randomization.friction_range is None and cfg.self_collisions is False
    assert env_throughput.task_config("g1_motion_tracking", 4).self_collisions is True  # the defaults row


def test_variant_list_values_keep_their_commas():
    name, overrides = env_throughput.parse_variant(
        "robust:randomization.kp_scale=[0.85,1.15],randomization.push_max_vel_xy=1.0")
    assert overrides == {"randomization": {"kp_scale": [0.85, 1.15], "push_max_vel_xy": 1.0}}
    cfg = env_throughput.task_config("g1_walk_flat", 4, overrides)
    assert tuple(cfg.randomization.kp_scale) == (0.85, 1.15)


@pytest.mark.parametrize("text", ["stand", "stand:", "stand:action_offset", "two words:a=1"])
def test_malformed_variant_is_rejected(text):
    with pytest.raises(ValueError, match="NAME:KEY=VALUE"):
        env_throughput.parse_variant(text)


@pytest.mark.parametrize("variant, named", [("x:nope=1", "nope"), ("x:action_offset=sideways", "action_offset"),
                                            ("x:sim.iterations=0", "sim.iterations")])
def test_bad_override_exits_2_before_any_env_is_built(variant, named, tmp_path):
    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--tasks", "g1_motion_tracking", "--device", "cpu",
                           "--envs", "2", "--iters", "1", "--variant", variant, "--json", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and named in done.stderr
    assert not out.exists()


@pytest.mark.integration
def test_variant_rows_are_timed_with_their_overrides(tmp_path, monkeypatch, capsys):
    # In this process (its imports are made already): the script's main() with its command line.
    out = tmp_path / "rows.json"
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "--tasks", "g1_motion_tracking", "--device", "cpu", "--envs", "2",
                                      "--iters", "1", "--variant", "stand:action_offset=stand",
                                      "--variant", "cap:sim.iterations=1", "--json", str(out)])
    env_throughput.main()
    rows = json.loads(out.read_text())["rows"]
    assert [(r["variant"], r["overrides"]) for r in rows] == [
        ("defaults", {}), ("stand", {"action_offset": "stand"}), ("cap", {"sim": {"iterations": 1}})]
    assert all(r["full_ms"] > 0 and r["physics_ms"] > 0 for r in rows)
    # the feet are on the floor: the solver iterates, and the largest world at least as often as the mean
    assert all(1 <= r["solver_iterations_mean"] <= r["solver_iterations_max"] for r in rows)
    # the sim key reached the solver: no world iterates past the cap, where the defaults' largest world does
    assert rows[2]["solver_iterations_max"] == 1 < rows[0]["solver_iterations_max"]
    assert "| g1_motion_tracking | stand | 2 |" in capsys.readouterr().out

"""benchmarks/walk_ablation.py: variants parsed or refused, runs side by side stopped at the budget, checkpoints
chosen for evaluation, env steps and gradient samples per checkpoint."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import time_to_walk  # noqa: E402
import walk_ablation  # noqa: E402


@pytest.mark.parametrize("bad", ["noequals", "=--algo x", "two words=--algo x", "name=", "name=  "])
def test_a_bad_variant_exits_2_before_anything_is_created(tmp_path, bad):
    with pytest.raises(SystemExit) as stop:
        walk_ablation.main(["--variant", bad, "--out", str(tmp_path / "o")])
    assert stop.value.code == 2 and not (tmp_path / "o").exists()


def test_repeated_variant_names_exit_2(tmp_path):
    with pytest.raises(SystemExit) as stop:
        walk_ablation.main(["--variant", "a=x=1", "--variant", "a=x=2", "--out", str(tmp_path / "o")])
    assert stop.value.code == 2 and not (tmp_path / "o").exists()


def test_every_nth_checkpoint_and_the_last_are_evaluated():
    checkpoints = [{"iteration": 1000 * i} for i in range(1, 8)]
    assert [c["iteration"] for c in walk_ablation.to_evaluate(checkpoints, 3)] == [3000, 6000, 7000]
    assert walk_ablation.to_evaluate(checkpoints, 1) == checkpoints
    assert walk_ablation.to_evaluate([], 2) == []


FAKE_TRAIN = """
import json, signal, sys, time
from pathlib import Path
args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
run = Path(args["training.run.log_dir"]) / args["training.run.run_name"]
(run / "checkpoints").mkdir(parents=True)
algo = {"batch_size": int(args.get("algo.batch_size", 2048)), "updates_per_step": int(args.get("algo.updates_per_step", 2))}
(run / "run_config.json").write_text(json.dumps({"algo": algo}))
rows = [{"iteration": 1000 * i, "env_steps": 4096000 * i, "env_steps_per_s": 100000.0 * i} for i in (1, 2, 3)]
(run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\\n" for r in rows))
for i in (1, 2, 3):
    (run / "checkpoints" / f"iter_{1000 * i:07d}.pt").write_bytes(b"x")
def stop(*_):
    (run / "stopped_by").write_text("SIGTERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
time.sleep(600)
"""
FAKE_EVAL = """
import json, sys
report = sys.argv[sys.argv.index("--out") + 1]
ckpt = sys.argv[sys.argv.index("--checkpoint") + 1]
lin = 0.05 if "fast" in ckpt and "iter_0003000" in ckpt else 0.4
overall = {"lin_error": lin, "yaw_error": 0.05, "fall_fraction": 0.0}
open(report, "w").write(json.dumps({"suites": {"nominal": {"overall": overall}}}))
"""


@pytest.mark.integration  # several real processes, each test seconds of waiting on them
def test_variants_run_side_by_side_until_the_budget_then_are_evaluated(tmp_path, monkeypatch):
    for name, text in (("fake_train.py", FAKE_TRAIN), ("fake_eval.py", FAKE_EVAL)):
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(walk_ablation, "TRAIN", [sys.executable, str(tmp_path / "fake_train.py")])
    monkeypatch.setattr(time_to_walk, "EVAL", [sys.executable, str(tmp_path / "fake_eval.py")])
    out = tmp_path / "o"
    started = time.monotonic()
    assert walk_ablation.main(["--seconds", "3", "--eval-every", "2", "--out", str(out),
                               "--variant", "slow=algo.updates_per_step=2",
                               "--variant", "fast=algo.updates_per_step=8 algo.batch_size=4096",
                               "--", "shared=1"]) == 0
    assert time.monotonic() - started < 60  # stopped at the budget, not at the fake's 600 s
    report = json.loads((out / "walk_ablation.json").read_text())
    slow, fast = report["runs"]
    assert (out / "slow_s1" / "stopped_by").read_text() == "SIGTERM" == (out / "fast_s1" / "stopped_by").read_text()
    assert fast["command"][-9:-7] == ["shared=1", "training.run.seed=1"]
    assert [c["iteration"] for c in fast["checkpoints"]] == [2000, 3000]
    assert fast["checkpoints"][1]["env_steps"] == 3000 * 4096
    assert fast["checkpoints"][1]["gradient_samples"] == 3000 * 8 * 4096
    assert slow["checkpoints"][1]["gradient_samples"] == 3000 * 2 * 2048
    assert fast["env_steps_per_s"] == 200000.0 and fast["iterations"] == 3000
    assert fast["first_walking"]["iteration"] == 3000 and slow["first_walking"] is None

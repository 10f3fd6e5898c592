"""benchmarks/tracking_batch.sh with stand-ins for `train` and `unilab` (the real ones need a GPU): every run
of the spec starts with its overrides, stops at its own time, is evaluated, and the summary counts the rows a
run wrote after its neighbour stopped."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "tracking_batch.sh"

FAKE_TRAIN = textwrap.dedent("""
    import json, os, signal, sys, time
    args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a and not a.startswith("-"))
    run = os.path.join(args["training.log_dir"], args["training.run_name"])
    os.makedirs(run, exist_ok=True)
    with open(os.path.join(run, "argv.json"), "w") as f:
        json.dump(sys.argv[1:], f)
    signal.signal(signal.SIGINT, lambda *_: sys.exit(130))
    with open(os.path.join(run, "metrics.jsonl"), "w") as f:
        for i in range(100000):
            f.write(json.dumps({"iteration": i, "env_steps": 2048 * (i + 1), "time": time.time()}) + "\\n")
            f.flush()
            time.sleep(0.004)
""")

FAKE_UNILAB = textwrap.dedent("""
    import json, os, sys
    log = os.environ["FAKE_LOG"]
    with open(log, "a") as f:
        f.write(" ".join(sys.argv[1:]) + "\\n")
    if sys.argv[1:3] == ["mps", "env"]:
        print("export FAKE_DAEMON=1")
    elif sys.argv[1] == "eval":
        run, out = sys.argv[2], sys.argv[sys.argv.index("--out") + 1]
        rows = open(os.path.join(run, "metrics.jsonl")).read().splitlines()
        o = {"completion": 1.0, "body_pos_error_mm": float(len(rows)), "fall_fraction": 0.0}
        json.dump({"suites": {"robust": {"overall": o}, "nominal": {"overall": o}}}, open(out, "w"))
""")


@pytest.fixture
def batch(tmp_path):
    (tmp_path / "train.py").write_text(FAKE_TRAIN)
    (tmp_path / "unilab.py").write_text(FAKE_UNILAB)
    env = {**os.environ, "BATCH": str(tmp_path / "batch"), "CLIPS": "/clips",
           "TRAIN": f"{sys.executable} {tmp_path / 'train.py'}", "UNILAB": f"{sys.executable} {tmp_path / 'unilab.py'}",
           "FAKE_LOG": str(tmp_path / "unilab_calls.log")}

    def call(*args, check=True):
        result = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120)
        if check:
            assert result.returncode == 0, result.stderr
        return result
    call.path = tmp_path
    return call


def test_runs_stop_at_their_times_and_the_summary_counts_rows_after_a_neighbours_stop(batch):
    spec = batch.path / "spec"
    spec.write_text("# two variants\nshort 2 task.motion_file=$CLIPS/a.npz\n\nlong 5 task.motion_file=$CLIPS/a.npz "
                    "task.per_joint_gain=4\n")
    assert "started 2 runs" in batch("start", str(spec)).stdout
    waited = batch("wait", "30").stdout
    assert "short:" in waited and "exit 124" in waited
    out = batch("finish").stdout
    lines = {line.split(":")[0]: line for line in out.splitlines() if ":" in line}
    assert "robust: completion 100.0 %" in lines["short"] and "rows after" not in lines["short"]
    after = int(lines["long"].split("|")[-1].split()[0])
    assert after >= 100  # three more seconds at up to 250 rows/s
    argv = (batch.path / "batch" / "runs" / "long" / "argv.json").read_text()
    assert "task.motion_file=/clips/a.npz" in argv and "task.per_joint_gain=4" in argv and "+execution=mps" in argv
    curve = (batch.path / "batch" / "state" / "curves" / "long" / "metrics.jsonl").read_text().splitlines()
    full = (batch.path / "batch" / "runs" / "long" / "metrics.jsonl").read_text().splitlines()
    assert len(full) > 500 and len(curve) == 500 and curve[0] == full[0] and curve[-1] == full[-1]
    calls = (batch.path / "unilab_calls.log").read_text().splitlines()
    assert calls[0] == "mps start --gpu 0" and calls[-1] == "mps stop --gpu 0"


@pytest.mark.parametrize("spec, message", [
    ("bad/name 10 x=1\n", "bad run name"),
    ("run ten x=1\n", "SECONDS must be a whole number"),
    ("# nothing\n", "names no run"),
])
def test_a_bad_spec_exits_2_and_starts_nothing(batch, spec, message):
    path = batch.path / "spec"
    path.write_text(spec)
    result = batch("start", str(path), check=False)
    assert result.returncode == 2 and message in result.stderr
    assert not (batch.path / "batch").exists() and not (batch.path / "unilab_calls.log").exists()

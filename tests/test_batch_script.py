"""`gpu_session.sh batch` and `evals` with stand-ins for `train` and `unilab` (the real ones need a GPU): every
run of the spec starts with its overrides and stops at its own time, each is evaluated, and the summary
counts the rows a run wrote after its neighbour stopped; a bad spec exits 2 before anything is created."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_session.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="needs bash and timeout")

FAKE_TRAIN = textwrap.dedent("""
    import json, os, sys, time
    args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a and not a.startswith("-"))
    run = os.path.join(args["training.run.log_dir"], args["training.run.run_name"])
    os.makedirs(run, exist_ok=True)
    with open(os.path.join(run, "argv.json"), "w") as f:
        json.dump(sys.argv[1:], f)
    with open(os.path.join(run, "metrics.jsonl"), "w") as f:
        for i in range(10 ** 7):  # until `timeout` ends it; ten rows at a time, so a busy machine still writes plenty
            f.write(json.dumps({"iteration": i, "env_steps": 2048 * (i + 1), "time": time.time()}) + "\\n")
            if i % 10 == 9:
                f.flush()
                time.sleep(0.004)
""")

FAKE_UNILAB = textwrap.dedent("""
    import json, os, sys
    with open(os.environ["FAKE_LOG"], "a") as f:
        f.write(" ".join(sys.argv[1:]) + "\\n")
    if sys.argv[1:3] == ["mps", "env"]:
        print("export FAKE_DAEMON=1")
    elif sys.argv[1] == "warmup":
        if os.environ.get("FAKE_WARMUP_FAILS"):
            sys.exit("warmup: the kernels did not compile")
        # what the runs started after it find: a warm cache under the daemon's environment
        open(os.environ["FAKE_LOG"] + ".warm", "w").write(os.environ.get("FAKE_DAEMON", ""))
    elif sys.argv[1] == "eval":
        run, out = sys.argv[2], sys.argv[sys.argv.index("--out") + 1]
        rows = open(os.path.join(run, "metrics.jsonl")).read().splitlines()
        o = {"completion": 1.0, "body_pos_error_mm": float(len(rows)), "fall_fraction": 0.0}
        json.dump({"suites": {"robust": {"overall": o}, "nominal": {"overall": o}}}, open(out, "w"))
""")


@pytest.fixture
def session(tmp_path):
    (tmp_path / "train.py").write_text(FAKE_TRAIN)
    (tmp_path / "unilab.py").write_text(FAKE_UNILAB)
    env = {**os.environ, "LEARN_DIR": str(tmp_path / "learn"), "CLIPS": "/clips", "LIFTED": "/lifted", "SPLIT": "/split",
           "PYTHON": sys.executable,
           "TRAIN": f"{sys.executable} {tmp_path / 'train.py'}", "UNILAB": f"{sys.executable} {tmp_path / 'unilab.py'}",
           "FAKE_LOG": str(tmp_path / "unilab_calls.log")}
    env.pop("SESSION_DIR", None)

    def call(*args, check=True, **extra_env):
        result = subprocess.run(["bash", str(SCRIPT), "--out", str(tmp_path / "s"), *args], env={**env, **extra_env},
                                cwd=ROOT,
                                capture_output=True, text=True, timeout=120)
        if check:
            assert result.returncode == 0, result.stderr
        return result
    call.path = tmp_path
    return call


@pytest.mark.integration
def test_runs_stop_at_their_times_and_the_summary_counts_rows_after_a_neighbours_stop(session):
    spec = session.path / "spec"
    spec.write_text("# two variants\nshort 2 task.motion_file=$CLIPS/a.npz\n\nlong 5 task.motion_file=$LIFTED/a.npz "
                    "task.per_joint_gain=4\nheld 2 task.motion_file=$SPLIT/train\n")
    session("batch", str(spec), "--algo", "flashsac", "--task", "g1_motion_tracking", "--envs", "64",
            "--", "task.rewards.weights.termination=-100")
    waited = session("wait", "60").stdout
    assert "learn_short: ended" in waited and "learn_long: ended" in waited
    out = session("evals").stdout
    lines = {line.split(":")[0]: line for line in out.splitlines() if line.startswith(("short:", "long:", "held:"))}
    assert "robust: completion 100.0 %" in lines["short"] and "rows after" not in lines["short"]
    after = int(lines["long"].split("|")[-1].split()[0])
    assert after >= 100  # rows of the two seconds after the short run's stop (+1 s), ten rows per 4 ms sleep
    assert "fault" not in out
    argv = json.loads((session.path / "learn" / "long" / "argv.json").read_text())
    assert argv[-4:] == ["task.rewards.weights.termination=-100", "task.motion_file=/lifted/a.npz",
                         "task.per_joint_gain=4", "training.run.run_name=long"]
    assert "+execution=mps" in argv and "task.num_envs=64" in argv
    assert "task.motion_file=/split/train" in json.loads((session.path / "learn" / "held" / "argv.json").read_text())
    curve = (session.path / "s" / "curves" / "long" / "metrics.jsonl").read_text().splitlines()
    full = (session.path / "learn" / "long" / "metrics.jsonl").read_text().splitlines()
    assert len(full) > 500 and len(curve) == 500 and curve[0] == full[0] and curve[-1] == full[-1]
    assert (session.path / "s" / "batch_summary.txt").read_text().splitlines() == list(lines.values())
    calls = (session.path / "unilab_calls.log").read_text().splitlines()
    assert sum(c.startswith("eval ") and "--envs-per-clip 16" in c for c in calls) == 3


def test_the_summary_names_a_log_with_a_fault_and_a_missing_report(tmp_path):
    learn, s = tmp_path / "learn", tmp_path / "s"
    for name in ("a", "b"):
        (learn / name).mkdir(parents=True)
        (learn / name / "metrics.jsonl").write_text(json.dumps({"iteration": 3, "env_steps": 64, "time": 1.0}) + "\n")
    s.mkdir()
    (s / "learn_b_1.log").write_text("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    summary = ROOT / "benchmarks" / "batch_summary.py"
    out = subprocess.run([sys.executable, str(summary), str(s), str(learn), "a", "b"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    a, b = out.stdout.splitlines()
    assert a == "a: 3 iterations, 64 env steps | no eval report (see eval_a.log)"
    assert b.endswith(f"| fault in {s / 'learn_b_1.log'}")
    # A walk report has velocity errors where a tracking report has completion.
    (s / "eval_a.json").write_text(json.dumps({"suites": {"nominal": {"overall": {
        "lin_error": 0.1034, "yaw_error": None, "fall_fraction": 0.0018}}}}))
    out = subprocess.run([sys.executable, str(summary), str(s), str(learn), "a"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["a: 3 iterations, 64 env steps | nominal: lin 0.103 m/s, yaw - rad/s, falls 0.18 %"]
    usage = subprocess.run([sys.executable, str(summary), str(s)], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "SESSION_DIR LEARN_DIR NAME" in usage.stderr


@pytest.mark.integration
def test_warm_first_compiles_once_with_the_first_runs_overrides_before_any_run_starts(session):
    spec = session.path / "spec"
    spec.write_text("a 2 task.motion_file=$CLIPS algo.max_iterations=18000 algo.batch_size=4096\n"
                    "b 2 task.motion_file=$CLIPS\n")
    args = ("batch", str(spec), "--algo", "flashsac", "--task", "g1_motion_tracking", "--envs", "64")
    failed = session(*args, "--warm-first", check=False, FAKE_WARMUP_FAILS="1")
    assert failed.returncode == 1 and "the warmup failed" in failed.stderr
    assert not (session.path / "learn").exists()  # no run was started
    session(*args, "--warm-first", "--", "task.rewards.weights.termination=-100")
    session("wait", "60")
    calls = (session.path / "unilab_calls.log").read_text().splitlines()
    warmups = [c for c in calls if c.startswith("warmup ")]
    assert warmups[-1].split() == ["warmup", "--algo", "flashsac", "--task", "g1_motion_tracking",
                                   "training.run.device=cuda:0", "task.num_envs=64", "+execution=mps",
                                   "task.rewards.weights.termination=-100", "task.motion_file=/clips",
                                   "algo.batch_size=4096"]
    assert (session.path / "unilab_calls.log.warm").read_text() == "1"  # it ran under the daemon
    warmed = (session.path / "unilab_calls.log.warm").stat().st_mtime_ns
    for run in ("a", "b"):
        assert (session.path / "learn" / run / "argv.json").stat().st_mtime_ns > warmed
    # (algo.max_iterations left out: warmup sets it itself and would refuse it.)
    # Without the flag, no warmup.
    (session.path / "unilab_calls.log").unlink()
    session(*args)
    session("wait", "60")
    assert not any(c.startswith("warmup ") for c in (session.path / "unilab_calls.log").read_text().splitlines())


@pytest.mark.parametrize("spec, message", [
    ("bad/name 10 x=1\n", "bad run name"),
    ("run ten x=1\n", "SECONDS must be a whole number"),
    ("# nothing\n", "names no run"),
    (None, "no spec file"),
])
def test_a_bad_spec_exits_2_and_starts_nothing(session, spec, message):
    path = session.path / "spec"
    if spec is not None:
        path.write_text(spec)
    result = session("batch", str(path), "--algo", "flashsac", "--task", "g1_motion_tracking", "--envs", "64",
                     check=False)
    assert result.returncode == 2 and message in result.stderr
    assert not (session.path / "s").exists() and not (session.path / "unilab_calls.log").exists()


SPECS = sorted((ROOT / "benchmarks" / "specs").glob("*.spec"))


@pytest.mark.parametrize("spec", SPECS, ids=[p.name for p in SPECS])
def test_each_committed_spec_composes(spec):
    """Every line of a committed batch spec: a unique run name, whole seconds, and overrides that compose
    with the algorithm and task of the batch command its comment gives (the clip folders stand in as
    placeholders), so a typo in a spec fails here and not after the GPU is started."""
    from train_compose import composed

    command = re.search(r"gpu_session\.sh batch \S+ --algo (\S+) --task (\S+)", spec.read_text())
    assert command, f"{spec.name}: no batch command in its comments"
    algo, task = command.groups()
    lines = [line.split("#")[0].split() for line in spec.read_text().splitlines()]
    runs = [words for words in lines if words]
    assert runs, spec
    names = [words[0] for words in runs]
    assert len(set(names)) == len(names), names
    for name, secs, *overrides in runs:
        assert secs.isdigit() and int(secs) > 0, (name, secs)
        overrides = [o.replace("$CLIPS", "/clips").replace("$LIFTED", "/lifted").replace("$SPLIT", "/split")
                     for o in overrides]
        assert "$" not in " ".join(overrides), (name, overrides)
        cfg = composed([f"algo={algo}", f"task={task}", *overrides])
        for override in overrides:
            key, value = override.split("=", 1)
            if key.startswith("+"):  # a config group added (a preset): composing it is the check
                continue
            node = cfg[key]
            if value == "null":
                assert node is None, (name, key, node)
                continue
            assert str(node) == value or str(node).lower() == value.lower() or float(node) == float(value), \
                (name, key, node, value)

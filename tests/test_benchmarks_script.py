"""benchmarks/gpu_session.sh on the CPU: its syntax, what `gate` and `learn` expand to (--dry-run),
the documented expansions, and every documented `bash benchmarks/gpu_session.sh ...` command."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_session.sh"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*/*.md"))]

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def dry(*args: str, env: dict | None = None) -> list[str]:
    """The commands a subcommand runs (--dry-run), `train` and `unilab` spelled as in the docs."""
    full_env = {**os.environ, "TRAIN": "train", "UNILAB": "unilab", "PYTHON": "python3", **(env or {})}
    full_env.pop("SESSION_DIR", None)
    out = subprocess.run(["bash", str(SCRIPT), "--dry-run", *args], capture_output=True, text=True, env=full_env,
                         cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


JOB = "python3 -m unilab.jobs --log "  # gate, learn and ab start each train through the job runner
_JOB_PREFIX = re.compile(r"^python3 -m unilab\.jobs (?P<options>(--\S+ \S+ )*)-- ")


def as_typed(lines: list[str]) -> list[str]:
    """The commands as a user types them: a job of the runner as its command, under `timeout -s TERM S` where the
    runner stops it after S seconds (its log is the runner's)."""
    out = []
    for line in lines:
        if found := _JOB_PREFIX.match(line):
            timeout = re.search(r"--timeout (\S+)", found["options"])
            line = (f"timeout -s TERM {timeout[1]} " if timeout else "") + line[found.end():]
        out.append(line)
    return out


def commands(lines: list[str]) -> list[str]:
    """Dry-run lines without notes, `eval` of the daemon's exports, log redirections and comments."""
    out = []
    for line in lines:
        if line.startswith("#") or line.startswith("eval "):
            continue
        line = re.sub(r"\s+#.*$", "", line)
        line = re.sub(r"\s+> \S+ 2>&1( < /dev/null)?( &)?$", "", line)
        out.append(line)
    return out


def test_syntax():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_no_hard_coded_pythonpath():
    for path in (p for p in (ROOT / "benchmarks").rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        assert "/root/devsite" not in path.read_text(), path
        assert not re.search(r"^\s*(export\s+)?PYTHONPATH=", path.read_text(), re.M), path


def test_gate_expansion():
    lines = dry("gate", "--algo", "fastsac", "--task", "g1_walk_flat", "--envs", "2048", "--seeds", "2")
    assert 'eval "$(unilab mps env --gpu 0)"' in lines  # the MPS arm runs under GPU 0's daemon
    assert commands(lines) == [
        f"{JOB}/tmp/session/gate_fastsac_g1_walk_flat.log -- "
        "train -m +execution=default,mps +bench=offpolicy_gate --algo fastsac --task g1_walk_flat "
        "training.run.device=cuda:0 task.num_envs=2048 training.run.log_dir=/tmp/gate/fastsac_g1_walk_flat",
        "unilab bench compare /tmp/gate/fastsac_g1_walk_flat --threshold-pct 20 "
        "--plot /tmp/session/gate_fastsac_g1_walk_flat.png",
        "unilab bench compare /tmp/gate/fastsac_g1_walk_flat --threshold-pct 20 --json",
        "unilab config diff RUN_DEFAULT RUN_MPS",
    ]


def test_gate_seed_overrides_arms_and_name():
    lines = commands(dry("--out", "/tmp/s", "gate", "--algo", "flashsac", "--task", "g1_walk_flat", "--envs", "4096",
                         "--seed", "1", "--threshold", "20", "--gpu", "1", "--", "sim.task_cuda_graph=false"))
    assert lines[0].endswith("training.run.log_dir=/tmp/gate/flashsac_g1_walk_flat training.run.seed=1 "
                             "sim.task_cuda_graph=false")
    assert "--threshold-pct 20 --plot /tmp/s/gate_flashsac_g1_walk_flat.png" in lines[1]
    sweep = dry("gate", "--algo", "fastsac", "--task", "g1_walk_flat", "--envs", "2048", "--arms", "mps",
                "--seeds", "3", "--name", "shares", "--", "training.mps.mps_active_thread_percentage.collector=100,50")
    assert commands(sweep) == [
        f"{JOB}/tmp/session/gate_shares.log -- train -m +execution=mps +bench=offpolicy_gate --algo fastsac --task g1_walk_flat training.run.device=cuda:0 "
        "task.num_envs=2048 training.run.log_dir=/tmp/gate/shares training.run.seed=1,2,3 "
        "training.mps.mps_active_thread_percentage.collector=100,50",
        "unilab bench extract RUN",  # one arm: each run reported, nothing to compare
    ]
    default_only = dry("gate", "--algo", "fastsac", "--task", "g1_walk_flat", "--envs", "2048", "--arms", "default",
                       "--gpu", "1")
    assert "export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=1" in default_only
    assert not any(line.startswith("eval ") for line in default_only)


def test_ab_expansion():
    """Both arms as jobs of the runner under one raw daemon: its pipe in each job's environment, a 600 s bound."""
    lines = commands(dry("ab", "--algo", "fastsac", "--task", "g1_walk_flat", "--envs", "1024", "--iters", "50"))
    raw = "--env CUDA_MPS_PIPE_DIRECTORY=/tmp/mps/pipe --env CUDA_MPS_LOG_DIRECTORY=/tmp/mps/log"
    runs = [line for line in lines if line.startswith(JOB)]
    assert runs == [
        f"{JOB}/tmp/session/fastsac_g1_walk_flat_1024_{mode}.log --timeout 600 {raw} -- train --algo fastsac "
        "--task g1_walk_flat training.run.device=cuda:0 task.num_envs=1024 algo.max_iterations=50 "
        "algo.save_interval=100000 training.run.log_dir=/tmp/fastsac_g1_walk_flat_1024 "
        f"training.run.run_name=fastsac_g1_walk_flat_1024_{mode} training.mps.block_ambient_mps=true +execution={mode}"
        for mode in ("default", "mps")]
    assert lines.index(runs[0]) > lines.index("mkdir -p /tmp/mps/pipe /tmp/mps/log")  # after the raw daemon starts


def test_matrix_expansion():
    lines = dry("matrix")
    assert 'eval "$(unilab mps env --gpu 0)"' in lines  # under GPU 0's daemon, which the gate finds
    assert commands(lines) == ["unilab bench gate --device cuda:0 --out /tmp/session/matrix"]
    lines = dry("--out", "/tmp/s", "matrix", "--cases", "fastsac_g1_walk_flat", "--name", "walk", "--gpu", "1", "--",
                "training.loop.update_before_ingest=false")
    assert 'eval "$(unilab mps env --gpu 1)"' in lines
    assert commands(lines) == ["unilab bench gate --device cuda:0 --out /tmp/s/matrix_walk --cases fastsac_g1_walk_flat "
                               "-- training.loop.update_before_ingest=false"]


def test_learn_expansion():
    lines = dry("learn", "--algo", "fastsac", "--task", "g1_walk_flat", "--envs", "4096", "--name", "walk",
                "--seconds", "450", "--segments", "2", "--gpu", "1", "--", "sim.task_cuda_graph=false")
    assert lines[0].startswith("setsid nohup bash benchmarks/gpu_session.sh --out /tmp/session learn --foreground ")
    assert lines[0].endswith("> /tmp/session/learn_walk.log 2>&1 < /dev/null &  # detached; then: wait")
    assert 'eval "$(unilab mps env --gpu 1)"' in lines
    base = ("train --algo fastsac --task g1_walk_flat training.run.device=cuda:0 task.num_envs=4096 "
            "algo.max_iterations=10000000 algo.save_interval=1000 training.run.log_dir=/tmp/learn +execution=mps "
            "sim.task_cuda_graph=false")
    assert commands(lines)[1:] == [
        f"{JOB}/tmp/session/learn_walk_1.log --timeout 450 -- {base} training.run.run_name=walk",
        f"{JOB}/tmp/session/learn_walk_2.log --timeout 450 -- {base} training.run.resume=/tmp/learn/walk",
        "unilab plot /tmp/learn/walk --out /tmp/session/learn_walk.png "
        "--metric episode_length episode_return rew/track_lin_vel_xy rew/track_ang_vel_z",
    ]
    # the detached job runs the same subcommand in the foreground: the same commands
    again = shlex.split(lines[0].split(" > ")[0])[4:]  # after `setsid nohup bash SCRIPT`
    assert commands(dry(*again)) == commands(lines)[1:]


def test_learn_wait_and_bg():
    assert dry("learn", "--wait", "300") == ["# follow /tmp/session/jobs/*.pid until each has its .rc, or 300 s pass"]
    lines = dry("bg", "g6", "gate", "--algo", "fastsac", "--task", "g1_walk_flat", "--envs", "2048")
    assert lines[0].startswith("setsid nohup bash benchmarks/gpu_session.sh --out /tmp/session gate --algo fastsac ")
    assert any(line.startswith("train -m +execution=default,mps ") for line in as_typed(lines))


def test_soak_expansion():
    lines = dry("soak", "--algo", "fastsac", "--task", "g1_walk_flat", "--envs", "4096", "--seconds", "3600",
                "--interval", "30", "--warmup", "300", "--", "sim.task_cuda_graph=false")
    assert 'eval "$(unilab mps env --gpu 0)"' in lines
    run = "/tmp/soak/soak_fastsac_g1_walk_flat_4096"
    assert commands(lines) == [  # the sampler starts the run, and stops it with SIGINT after --run-for
        f"rm -rf {run}",
        f"python3 benchmarks/soak_sample.py {run} --out /tmp/session/soak_fastsac_g1_walk_flat_4096.jsonl "
        "--interval 30 --run-for 3600 --log /tmp/session/soak_fastsac_g1_walk_flat_4096.log -- "
        "train --algo fastsac --task g1_walk_flat training.run.device=cuda:0 task.num_envs=4096 "
        "algo.max_iterations=10000000 training.run.log_dir=/tmp/soak training.run.run_name=soak_fastsac_g1_walk_flat_4096 "
        "+execution=mps sim.task_cuda_graph=false",
        "python3 benchmarks/soak_sample.py --report /tmp/session/soak_fastsac_g1_walk_flat_4096.jsonl --warmup 300",
    ]
    plain = dry("soak", "--algo", "fastsac", "--task", "g1_walk_flat", "--envs", "64", "--seconds", "60",
                "--execution", "default", "--name", "s1", "--gpu", "1")
    assert "export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=1" in plain
    assert any("+execution=default" in line and "training.run.run_name=s1" in line for line in plain)


def test_faults_expansion():
    lines = dry("faults", "--algo", "fastsac", "--task", "g1_walk_flat", "--envs", "1024", "--gpu", "1")
    assert lines.count('eval "$(unilab mps env --gpu 1)"') == 3
    cmds = commands(lines)
    tools = [line.split(" -- ")[0] for line in cmds if line.startswith("python3 benchmarks/faults.py ")]
    assert tools == ["python3 benchmarks/faults.py kill learner --log-dir /tmp/session",
                     "python3 benchmarks/faults.py kill server --log-dir /tmp/session",
                     "python3 benchmarks/faults.py neighbours faults_stop_a faults_stop_b --log-dir /tmp/session"]
    trains = [line.split(" -- ")[1] for line in cmds if line.startswith("python3 benchmarks/faults.py ")]
    assert all(t.startswith("train --algo fastsac ") and "+execution=mps" in t and "training.run.log_dir=/tmp/faults" in t
               for t in trains)
    assert [t.split("training.run.run_name=")[1].split()[0] for t in trains[:2]] == ["faults_learner", "faults_server"]
    assert "training.run.run_name=" not in trains[2]  # the tool names each of the two runs
    assert "unilab mps status" in cmds and cmds.index("unilab mps status") < len(cmds) - 1  # before the stop test


def test_missing_option_is_an_error():
    out = subprocess.run(["bash", str(SCRIPT), "--dry-run", "gate", "--algo", "fastsac"], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 2 and "gate needs --task" in out.stderr


def _documented_invocations():
    for doc in DOCS:
        text = doc.read_text()
        found = re.findall(r"`([^`\n]*bash benchmarks/gpu_session\.sh[^`\n]*)`", text)
        for block in re.findall(r"```bash\n(.*?)```", text, re.S):
            found += [line for line in block.splitlines() if "bash benchmarks/gpu_session.sh" in line]
        for line in dict.fromkeys(found):
            if "SUBCOMMAND" in line:  # the general form, not a command
                continue
            yield pytest.param(line, id=f"{doc.relative_to(ROOT)}: {line[:70]}")


DOCUMENTED = list(_documented_invocations())


def test_the_docs_use_the_script():
    assert len(DOCUMENTED) >= 20


@pytest.mark.parametrize("line", DOCUMENTED)
def test_documented_invocation_expands(line):
    argv = shlex.split(line.split("  #")[0])
    env = dict(a.split("=", 1) for a in argv[:argv.index("bash")])  # e.g. TORCHINDUCTOR_...=1 bash ...
    dry(*argv[argv.index("bash") + 2:], env=env)


def test_documented_gate_expansion_is_the_scripts():
    """The appendix's example (en and zh): the commands it lists are the dry-run's."""
    for doc in (ROOT / "docs" / "en" / "performance-reference.md", ROOT / "docs" / "zh" / "performance-reference.md"):
        blocks = re.findall(r"```bash\n(.*?)```", doc.read_text(), re.S)
        listed = next(b for b in blocks if b.startswith("unilab mps start --gpu 0\ntrain -m")).splitlines()
        expanded = as_typed(commands(dry("mps-start") + dry("gate", "--algo", "fastsac", "--task", "g1_walk_flat",
                                                            "--envs", "2048", "--seeds", "2")  # its own threshold
                                     + dry("mps-stop")))
        assert expanded == listed, doc


def test_documented_learning_run_is_the_scripts():
    """The 400 s run of 2026-11-30 as documented (the performance history, English only, in that day's key
    spellings, which the upgrade shim reads as today's) is what `learn` runs."""
    from unilab.rundir.renamed import upgrade_overrides

    for doc in (ROOT / "docs" / "history" / "performance.md",):
        block = next(b for b in re.findall(r"```bash\n(.*?)```", doc.read_text(), re.S) if "run_name=walk6" in b)
        listed = shlex.join(upgrade_overrides(shlex.split(block.replace("\\\n  ", "").splitlines()[0]),
                                              say=lambda _: None))
        expanded = as_typed(commands(dry("learn", "--algo", "fastsac", "--task", "g1_walk_flat", "--envs", "4096",
                                         "--name", "walk6", "--seconds", "400")))
        assert listed in expanded, doc

"""`unilab bench gate`: the matrix, its refusals, the daemon it needs, the jobs it runs and its verdict.

The jobs run through a fake `train` (tests/fake_runs.py): in-process in place of `run_job`, or as a real
subprocess in place of `python -m unilab.cli.train`. The MPS daemon is the fake of `unilab mps`'s tests.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from fake_runs import STATUS_CODE, fake_train
from fakes_mps_tool import alive, started_pids

from unilab.bench import gate, gate_run
from unilab.cli.tools import main as tools_main
from unilab.mps import cli as mps_cli

TESTS = Path(__file__).resolve().parent
WALK, TRACK = "fastsac_g1_walk_flat", "flashsac_g1_motion_tracking"
TWO = ["--cases", f"{WALK},{TRACK}"]  # the two cases registered in every build


def bench_gate(*args) -> int:
    return tools_main(["bench", "gate", *map(str, args)])


@pytest.fixture
def jobs(monkeypatch, tmp_path):
    """`run_job` replaced by the fake `train` in-process; `jobs.spec` says what each job leaves behind."""

    class Jobs:
        spec: dict = {}
        ran: list = []

    def run_job(job, env):
        Jobs.ran.append((job, dict(env)))
        argv = job.argv[len(gate.TRAIN):]
        job.code = fake_train(argv, {**env, "FAKE_GATE_SPEC": json.dumps(Jobs.spec)})
        job.status = {code: status for status, code in STATUS_CODE.items()}[job.code]
        job.duration_s = 0.0

    monkeypatch.setattr(gate_run, "run_job", run_job)
    monkeypatch.setattr(gate_run, "check_commands", lambda plan, env: None)  # tested on its own
    return Jobs


def verdict_of(out: Path) -> dict:
    return json.loads((out / "gate.json").read_text())


def result(verdict: dict, case: str) -> dict:
    return next(r for r in verdict["results"] if r["case"] == case)


def test_dry_run_lists_the_matrix_and_creates_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert bench_gate("--dry-run") == 0
    out = capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []  # not even the default runs/gate/<time>
    commands = [line.strip() for line in out.splitlines() if "unilab.cli.train -m" in line]
    assert len(commands) == 12
    seen = set()
    for line in commands:
        words = line.split()
        arm = next(w for w in words if w.startswith("+execution=")).split("=")[1]
        algo, task = words[words.index("--algo") + 1], words[words.index("--task") + 1]
        seed = next(w for w in words if w.startswith("training.run.seed=")).split("=")[1]
        seen.add((algo, task, arm, seed))
        assert "+bench=offpolicy_gate" in words and "training.run.device=cuda:0" in words
        assert "task.num_envs=2048" in words and "algo.max_iterations=300" in words
        assert f"training.run.log_dir={Path('runs', 'gate')}" in line and f"training.run.run_name={arm}_seed-{seed}" in words
    assert seen == {(a, t, arm, s) for a, t in (("fastsac", "g1_walk_flat"), ("flashsac", "g1_motion_tracking"),
                                                ("warpsac", "g1_walk_flat"))
                    for arm in ("default", "mps") for s in ("1", "2")}
    assert "fastsac_g1_walk_flat: threshold +20 %" in out and "flashsac_g1_motion_tracking: threshold +10 %" in out
    assert "warpsac_g1_walk_flat: threshold +20 %" in out
    assert "SHORT" not in out


def test_dry_run_applies_the_options(tmp_path, capsys):
    out_dir = tmp_path / "g"
    assert bench_gate("--dry-run", "--cases", WALK, "--iterations", "400", "--repeats", "3", "--envs", "4096",
                      "--threshold", f"{WALK}=30", "--device", "cuda:1", "--out", out_dir, "--",
                      "training.loop.update_before_ingest=false") == 0
    out = capsys.readouterr().out
    commands = [line for line in out.splitlines() if "unilab.cli.train -m" in line]
    assert len(commands) == 6 and not out_dir.exists()
    assert all("task.num_envs=4096 algo.max_iterations=400" in c and "training.run.device=cuda:1" in c
               and c.endswith("training.loop.update_before_ingest=false") for c in commands)
    assert "training.run.seed=3" in commands[-1] and "+execution=mps" in commands[-1]
    assert "threshold +30 %, 4096 envs" in out


@pytest.mark.parametrize("args, words", [
    (["--iterations", "200"], "200 iterations per run, the design asks >= 300"),
    (["--repeats", "1"], "1 repeat per arm, the design asks >= 2"),
    (["--last", "50"], "the last 50 reported, the design asks >= 100"),
    (["--skip-first", "10"], "the first 10 ignored, the design asks >= 50"),
])
def test_a_short_shape_is_refused_before_anything(tmp_path, monkeypatch, capsys, jobs, args, words):
    monkeypatch.setattr(mps_cli, "make_host", lambda: pytest.fail("no daemon is looked for"))
    out = tmp_path / "g"
    assert bench_gate(*TWO, "--out", out, "--start-daemon", *args) == 2
    err = capsys.readouterr().err
    assert words in err and "--allow-short" in err
    assert not out.exists() and jobs.ran == []


def test_a_window_that_does_not_fit_is_refused_even_when_short_is_allowed(tmp_path, capsys, jobs):
    assert bench_gate(*TWO, "--out", tmp_path / "g", "--iterations", "120", "--allow-short") == 2
    assert "50 skipped + 100 reported iterations do not fit in 120" in capsys.readouterr().err
    assert not (tmp_path / "g").exists() and jobs.ran == []


@pytest.mark.parametrize("args, words", [
    (["--cases", "nope"], "unknown case nope"),
    (["--threshold", "nope=5"], "'nope' is not a case of this gate"),
    (["--envs", f"{WALK}=many"], "'many' is not a number"),
    (["--device", "cpu"], "needs a CUDA device"),
    (["--", "training.run.seed=3"], "use --repeats"),
    (["--", "training.seed=3"], "use --repeats"),  # its old spelling (unilab.rundir.renamed) too
    (["--", "task.num_envs=64"], "use --envs"),
    (["--", "--multirun"], "only train overrides KEY=VALUE"),
    (["--out", "/tmp/no,such,gate"], "choose a plainer path"),
])
def test_bad_input_is_refused_before_anything(tmp_path, capsys, jobs, args, words):
    assert bench_gate(*TWO, "--out", tmp_path / "g", *args) == 2
    assert words in capsys.readouterr().err
    assert not (tmp_path / "g").exists() and jobs.ran == []


def test_a_case_this_build_lacks_is_refused(tmp_path, monkeypatch, capsys, jobs):
    monkeypatch.setattr(gate, "CASES", (*gate.CASES, gate.Case("nosuchsac", "g1_walk_flat", 20.0, 2048)))
    assert bench_gate("--cases", f"{WALK},nosuchsac_g1_walk_flat", "--out", tmp_path / "g") == 2
    err = capsys.readouterr().err
    assert "algo nosuchsac (nosuchsac_g1_walk_flat)" in err and "--cases leaves a case out" in err
    assert jobs.ran == [] and not (tmp_path / "g").exists()


def test_an_out_folder_in_use_is_refused(tmp_path, capsys, jobs):
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "old").write_text("")
    assert bench_gate(*TWO, "--out", tmp_path / "g") == 2
    assert "not an empty folder" in capsys.readouterr().err and jobs.ran == []


def test_a_command_train_refuses_stops_the_gate_before_anything(tool, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(mps_cli, "make_host", tool.host)
    monkeypatch.setattr(gate_run, "run_job", lambda job, env: pytest.fail("no job runs"))
    tool.env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")  # the real `train -m ... --dry-run`
    assert bench_gate("--cases", WALK, "--out", tmp_path / "g", "--start-daemon", "--",
                      "training.no_such_key=1") == 2
    err = capsys.readouterr().err
    assert f"train refuses the jobs of {WALK}" in err and "no_such_key" in err and "--dry-run" in err
    assert not (tmp_path / "g").exists() and started_pids(tool.root) == []


def test_without_a_daemon_the_gate_names_the_fix_and_runs_nothing(tool, tmp_path, monkeypatch, capsys, jobs):
    tool.env["CUDA_MPS_PIPE_DIRECTORY"] = str(tool.tmp / "nvidia-mps")  # exported, but no daemon there
    monkeypatch.setattr(mps_cli, "make_host", tool.host)
    assert bench_gate(*TWO, "--out", tmp_path / "g") == 2
    err = capsys.readouterr().err
    assert "the MPS arm cannot run" in err and "nvidia-cuda-mps-control -d" in err
    assert "--start-daemon" in err
    assert jobs.ran == [] and not (tmp_path / "g").exists() and started_pids(tool.root) == []


def test_the_gate_runs_the_matrix_under_a_daemon_it_starts_and_stops(tool, tmp_path, monkeypatch, capsys, jobs):
    monkeypatch.setattr(mps_cli, "make_host", tool.host)
    out = tmp_path / "g"
    no_plot = [] if _has_matplotlib() else ["--no-plot"]
    assert bench_gate(*TWO, "--out", out, "--start-daemon", *no_plot) == 0
    captured = capsys.readouterr()
    # the jobs: per case, per seed, default then mps; only the MPS jobs get the daemon's pipe directory
    assert [(j.case, j.arm, j.seed) for j, _ in jobs.ran] == [
        (case, arm, seed) for case in (WALK, TRACK) for seed in (1, 2) for arm in ("default", "mps")]
    pipe = str(tool.base() / "pipe")
    assert all(env.get("CUDA_MPS_PIPE_DIRECTORY") == (pipe if j.arm == "mps" else None) for j, env in jobs.ran)
    # the daemon was started for the GPU of cuda:0 and is stopped
    (pid,) = started_pids(tool.root)
    assert not alive(pid) and not (tool.base() / "unilab-mps-state.json").exists()
    assert "GPU-aaaaaaaa" in tool.control_log()
    # the table: a row per case and arm with the design's columns, the change and the verdict
    table = captured.out
    assert ("| case | arm | n | iteration ms | env-steps/s | learner train ms | learner wait for collector ms | "
            "collector env step ms | backend step ms | replay write ms | change in env-steps/s | verdict |") in table
    assert "| fastsac / g1_walk_flat | default | 2 | 10.00 | 50,000 ± 0 | 4.00 | 1.00 | 3.00 | 2.50 | 0.25 |  |  |" \
        in table
    assert "|  | mps | 2 | 10.00 | 62,000 ± 0 | 4.00 | 1.00 | 3.00 | 2.50 | 0.25 | +24.0 % (>= 20 %) | PASS |" in table
    assert "+24.0 % (>= 10 %) | PASS |" in table
    assert "**PASS**: all 2 cases pass; 300 iterations per run, the last 100 reported after the first 50, " \
           "2 repeats per arm" in table
    assert (out / "gate.md").read_text().strip() == table.strip()
    # the JSON: plan, environment, commands, every check of every case
    verdict = verdict_of(out)
    assert verdict["passed"] is True and verdict["shape"]["short"] is False
    assert verdict["environment"]["gpu"]["uuid"].startswith("GPU-aaaaaaaa")
    assert verdict["environment"]["daemon"]["started_by_gate"] is True
    assert set(verdict["environment"]["versions"]) >= {"torch", "warp", "mujoco", "mujoco_warp", "nvidia_driver"}
    assert set(verdict["environment"]["source"]) == {"git_commit", "git_dirty"}
    assert verdict["command"].startswith("unilab bench gate --cases fastsac_g1_walk_flat,flashsac_g1_motion_tracking")
    walk = result(verdict, WALK)
    assert [c["gate"] for c in walk["criteria"]] == ["throughput", "completed", "mps_observed",
                                                     "baseline_without_mps", "backpressure", "nan_guard"]
    assert walk["threshold_pct"] == 20.0 and result(verdict, TRACK)["threshold_pct"] == 10.0
    assert len(verdict["jobs"]) == 8 and all(j["status"] == "completed" for j in verdict["jobs"])
    assert all(Path(j["run_dir"]).is_dir() for j in verdict["jobs"])
    assert sorted(p.name for p in (out / WALK).iterdir()) == ["default_seed-1", "default_seed-2", "mps_seed-1",
                                                              "mps_seed-2"]
    if not no_plot:
        assert (out / "gate.png").read_bytes()[:4] == b"\x89PNG"
    assert "[1/8] fastsac_g1_walk_flat default seed 1: started" in captured.err
    assert "[8/8] flashsac_g1_motion_tracking mps seed 2: completed in 0 s (exit 0)" in captured.err


def test_a_failed_case_fails_the_gate_and_names_what_failed(tool, tmp_path, monkeypatch, capsys, jobs):
    monkeypatch.setattr(mps_cli, "make_host", tool.host)
    jobs.spec = {"sps": {TRACK: [50_000, 52_500]},  # +5 %, under the 10 % of the case
                 "outcome": {f"{WALK}/mps/2": "failed", f"{WALK}/default/2": "refused"}}
    out = tmp_path / "g"
    assert bench_gate(*TWO, "--out", out, "--start-daemon", "--no-plot", "--json") == 1
    verdict = json.loads(capsys.readouterr().out)
    assert verdict == verdict_of(out)
    assert not verdict["passed"]
    walk, track = result(verdict, WALK), result(verdict, TRACK)
    assert walk["failed"] == ["completed"]
    completed = next(c for c in walk["criteria"] if c["gate"] == "completed")
    assert completed["detail"] == "mps_seed-2: failed; no run directory: default_seed-2 (refused)"
    assert track["failed"] == ["throughput"] and track["report"]["improvement_pct"] == pytest.approx(5.0)
    table = (out / "gate.md").read_text()
    assert "| +24.0 % (>= 20 %) | FAIL: completed |" in table and "| +5.0 % (>= 10 %) | FAIL: throughput |" in table
    assert f"- {TRACK}: throughput FAIL: env_steps_per_s +5.0% (threshold +10%)" in table
    assert f"**FAIL**: 2 of 2 cases fail ({WALK}, {TRACK})" in table
    assert not alive(started_pids(tool.root)[0])


def test_an_mps_run_without_the_daemon_fails_mps_observed(tool, tmp_path, monkeypatch, capsys, jobs):
    """A daemon that the gate found, but whose pipe directory the MPS jobs did not get: no MPS evidence."""
    monkeypatch.setattr(mps_cli, "make_host", tool.host)
    monkeypatch.setattr(gate_run, "_run_all", _without_daemon_env(gate_run._run_all))
    assert bench_gate("--cases", WALK, "--out", tmp_path / "g", "--start-daemon", "--no-plot") == 1
    assert result(verdict_of(tmp_path / "g"), WALK)["failed"] == ["mps_observed"]
    assert "mps_observed FAIL: no MPS evidence in mps_seed-1, mps_seed-2" in capsys.readouterr().out


def _without_daemon_env(real):
    def run_all(plan, daemon, base_env, record):
        daemon.env = {}
        return real(plan, daemon, base_env, record)

    return run_all


def test_a_short_gate_says_so(tool, tmp_path, monkeypatch, capsys, jobs):
    monkeypatch.setattr(mps_cli, "make_host", tool.host)
    out = tmp_path / "g"
    assert bench_gate("--cases", WALK, "--out", out, "--start-daemon", "--no-plot", "--repeats", "1",
                      "--iterations", "200", "--allow-short") == 0
    table = capsys.readouterr().out
    assert "SHORT: 200 iterations per run, the design asks >= 300; 1 repeat per arm, the design asks >= 2" in table
    assert "| fastsac / g1_walk_flat | default | 1 |" in table
    verdict = verdict_of(out)
    assert verdict["shape"]["short"] is True and "--allow-short" in verdict["command"]
    assert len(jobs.ran) == 2 and all("algo.max_iterations=200" in j.argv for j, _ in jobs.ran)


def test_the_gate_uses_a_running_daemon_and_leaves_it_running(tool, tmp_path, monkeypatch, capsys, jobs):
    monkeypatch.setattr(mps_cli, "make_host", tool.host)
    assert tools_main(["mps", "start", "--gpu", "0"]) == 0  # `unilab mps start`, in the shell before the gate
    capsys.readouterr()
    (pid,) = started_pids(tool.root)
    assert bench_gate("--cases", WALK, "--out", tmp_path / "g", "--no-plot") == 0
    assert all(env.get("CUDA_MPS_PIPE_DIRECTORY") == (str(tool.base() / "pipe") if j.arm == "mps" else None)
               for j, env in jobs.ran)
    assert alive(pid)  # not the gate's to stop
    assert verdict_of(tmp_path / "g")["environment"]["daemon"]["started_by_gate"] is False


def test_start_daemon_refuses_where_a_daemon_runs_and_leaves_it(tool, tmp_path, monkeypatch, capsys, jobs):
    monkeypatch.setattr(mps_cli, "make_host", tool.host)
    assert tools_main(["mps", "start", "--gpu", "0"]) == 0
    capsys.readouterr()
    (pid,) = started_pids(tool.root)
    assert bench_gate("--cases", WALK, "--out", tmp_path / "g", "--start-daemon") == 2
    err = capsys.readouterr().err
    assert "is running at" in err and "without --start-daemon the gate uses a daemon that is running" in err
    assert alive(pid) and jobs.ran == [] and not (tmp_path / "g").exists()


def test_the_jobs_are_train_subprocesses_with_the_gate_overrides(tool, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(mps_cli, "make_host", tool.host)
    tool.env["FAKE_GATE_SPEC"] = json.dumps({"calls": str(tmp_path / "calls.jsonl")})
    monkeypatch.setattr(gate, "TRAIN", (sys.executable, str(TESTS / "fake_runs.py")))
    out = tmp_path / "g"
    assert bench_gate("--cases", TRACK, "--out", out, "--start-daemon", "--no-plot", "--envs", "512", "--",
                      "sim.iterations=6") == 0
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [c["argv"][:2] for c in calls] == [["-m", "+execution=default"], ["-m", "+execution=mps"]] * 2
    first = calls[0]["argv"]
    assert first == ["-m", "+execution=default", "+bench=offpolicy_gate", "--algo", "flashsac", "--task",
                     "g1_motion_tracking", "training.run.device=cuda:0", "task.num_envs=512", "algo.max_iterations=300",
                     "training.run.seed=1", f"training.run.log_dir={out / TRACK}", "training.run.run_name=default_seed-1",
                     "sim.iterations=6"]
    assert [c["mps_pipe"] is not None for c in calls] == [False, True, False, True]
    logs = sorted(p.name for p in (out / "logs").iterdir())
    assert logs == [f"{TRACK}_{arm}_seed-{s}.log" for arm in ("default", "mps") for s in (1, 2)]
    err = capsys.readouterr().err
    assert f"[2/4] {TRACK} mps seed 1: started (log {out / 'logs' / (TRACK + '_mps_seed-1.log')})" in err
    assert f"[4/4] {TRACK} mps seed 2: completed in" in err


def test_an_interrupted_gate_stops_the_job_and_the_daemon(tool, tmp_path, monkeypatch, capsys):
    """SIGTERM (as Ctrl-C) while a job runs: the job gets SIGINT and ends, the daemon the gate started stops,
    the jobs after it do not run, exit 130."""
    out = tmp_path / "g"
    tool.env["FAKE_GATE_SPEC"] = json.dumps({"outcome": {f"{WALK}/mps/1": "wait"},
                                             "calls": str(tmp_path / "calls.jsonl")})
    monkeypatch.setattr(mps_cli, "make_host", tool.host)
    monkeypatch.setattr(gate, "TRAIN", (sys.executable, str(TESTS / "fake_runs.py")))
    marker = out / WALK / "mps_seed-1.waiting"

    def interrupt_when_waiting():
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=interrupt_when_waiting, daemon=True).start()
    assert bench_gate("--cases", WALK, "--out", out, "--start-daemon", "--no-plot") == 130
    err = capsys.readouterr().err
    assert f"[2/4] {WALK} mps seed 1: interrupted after" in err and "no verdict" in err
    record = verdict_of(out)
    assert record["interrupted"] is True and record["passed"] is None
    assert [j["status"] for j in record["jobs"]] == ["completed", "interrupted", None, None]
    assert not alive(started_pids(tool.root)[0])
    assert len((tmp_path / "calls.jsonl").read_text().splitlines()) == 2


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def test_the_gate_imports_no_torch():
    """The launcher of the jobs creates no CUDA context: nothing it imports brings torch, warp or MuJoCo."""
    import subprocess

    code = ("import sys; from unilab.cli.tools import build_parser; build_parser(); "
            "import unilab.bench.gate_run, unilab.mps.probe, unilab.mps.daemon, unilab.config.catalog, unilab.cli.sweep; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'warp', 'mujoco_warp', 'mujoco'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(TESTS.parent)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("case", [WALK, TRACK])
def test_the_real_train_accepts_the_gate_commands(tmp_path, capsys, case, fake_host, daemon):
    """Each arm's command composes and is validated in `train -m ... --dry-run` (one job, the preset's seed sweep
    overridden) on a GPU host with a daemon (fakes)."""
    from train_calls import run_train

    cases = gate.select_cases([case], [], [])
    plan = gate.plan_jobs(cases, gate.Shape(), "cuda:0", tmp_path / "g", ["training.loop.update_before_ingest=false"])
    for job in plan.jobs[:2]:
        assert run_train(*job.argv[len(gate.TRAIN):], "--dry-run") == 0
        out = capsys.readouterr().out
        assert "1 job(s) would run" in out and f"+execution={job.arm}" in out
    assert not (tmp_path / "g").exists()

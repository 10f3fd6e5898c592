"""`unilab bench extract/compare` on synthetic run directories, and the offpolicy_gate sweep preset."""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import pytest
from fake_runs import SPREAD, make_run
from train_compose import compose_train

from unilab.cli.tools import build_parser
from unilab.cli.tools import main as tools_main
from unilab.cli.train import CONF_DIR
from unilab.cli.train import main as train_main


def bench(*args) -> int:
    return tools_main(["bench", *args])


def ab_runs(root: Path, **mps_kwargs) -> list[Path]:
    """Baseline 50k and 52k env steps/s, MPS 62k and 64k: +23.5 %."""
    return [make_run(root, "base1", mode=None, sps=50_000, seed=1),
            make_run(root, "base2", mode=None, sps=52_000, seed=2),
            make_run(root, "mps1", mode="mps", sps=62_000, seed=1, **mps_kwargs),
            make_run(root, "mps2", mode="mps", sps=64_000, seed=2)]


def compare_json(capsys, *args) -> tuple[int, dict]:
    code = bench("compare", *map(str, args), "--json")
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


def gates(report: dict) -> dict[str, bool]:
    (group,) = report["groups"]
    return {g["gate"]: g["passed"] for g in group["gates"]}


def test_extract_reports_the_window_means(tmp_path, capsys):
    run = make_run(tmp_path, "r", mode="mps", sps=60_000, backpressure_every=10)
    assert bench("extract", str(run), "--json") == 0
    result = json.loads(capsys.readouterr().out)
    sps = result["metrics"]["env_steps_per_s"]
    assert sps["mean"] == pytest.approx(60_000) and sps["n"] == 100
    assert sps["std"] == pytest.approx(statistics.stdev([60_000 - SPREAD, 60_000 + SPREAD] * 50))
    assert result["metrics"]["iteration_ms"] == {"mean": 10.0, "std": 0.0, "n": 99}  # the last row has none
    assert result["metrics"]["collector_replay_write_ms"]["mean"] == 0.25
    assert result["metrics"]["ingress_backpressure"]["last"] == 29.0
    assert result["metrics"]["nan_guard_trips"]["last"] == 0.0
    assert result["window"] == {"skip_first": 50, "last": 100, "iterations_total": 300, "n": 100,
                                "first_iteration": 200, "last_iteration": 299}
    assert result["status"] == "completed" and (result["algo"], result["task"]) == ("fastsac", "g1_walk_flat")
    ev = result["evidence"]
    assert ev["configured"] == ev["effective"] == "mps" and ev["client_pids"] == {"learner": 101, "collector": 102}
    assert ev["server_pid"] == 900
    assert bench("extract", str(run)) == 0
    assert "env_steps_per_s" in capsys.readouterr().out


def test_extract_window_options(tmp_path, capsys):
    run = make_run(tmp_path, "r", mode=None, sps=40_000)
    assert bench("extract", str(run), "--last", "10", "--skip-first", "0", "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["window"]["first_iteration"] == 290 and result["metrics"]["env_steps_per_s"]["mean"] == 40_000


def test_extract_defaults_match_the_gate_preset():
    args = build_parser().parse_args(["bench", "extract", "run"])
    assert (args.skip_first, args.last) == (50, 100)
    text = (Path(CONF_DIR) / "bench" / "offpolicy_gate.yaml").read_text()
    assert "first 50" in text and "last 100" in text and "max_iterations: 300" in text


def test_extract_rejects_missing_and_partial_runs(tmp_path, capsys):
    assert bench("extract", str(tmp_path / "nope")) == 2
    assert "no such run directory" in capsys.readouterr().err
    running = make_run(tmp_path, "running", mode=None, sps=1.0)
    (running / "run_summary.json").unlink()
    assert bench("extract", str(running)) == 2
    assert "missing run_summary.json (the run has not finished" in capsys.readouterr().err
    short = make_run(tmp_path, "short", mode=None, sps=1.0, rows=120)
    assert bench("extract", str(short)) == 2
    assert "120 iterations" in capsys.readouterr().err
    torn = make_run(tmp_path, "torn", mode=None, sps=1.0)
    with open(torn / "metrics.jsonl", "a") as f:
        f.write('{"iteration": 300, "env_st')  # killed mid-write: the half line is ignored
    assert bench("extract", str(torn)) == 0


def test_compare_passes_with_the_right_improvement(tmp_path, capsys):
    ab_runs(tmp_path)
    code, report = compare_json(capsys, tmp_path)  # a folder of runs
    assert code == 0 and report["passed"]
    (group,) = report["groups"]
    assert group["improvement_pct"] == pytest.approx(100 * (63_000 / 51_000 - 1))
    base = group["baseline"]["metrics"]["env_steps_per_s"]
    assert base["mean"] == pytest.approx(51_000) and base["std"] == pytest.approx(math.sqrt(2) * 1000)
    assert group["baseline"]["mode"] is None and group["candidate"]["mode"] == "mps"
    assert all(gates(report).values())
    assert bench("compare", str(tmp_path)) == 0
    md = capsys.readouterr().out
    assert "| metric | null (n=2) | mps (n=2) | change |" in md and "| throughput | PASS |" in md
    assert "+23.5%" in md and "**PASS**" in md


def test_compare_fails_below_the_threshold(tmp_path, capsys):
    runs = ab_runs(tmp_path)
    code, report = compare_json(capsys, *runs, "--threshold-pct", "30")
    assert code == 1 and gates(report)["throughput"] is False and not report["passed"]


@pytest.mark.parametrize("kwargs", [{"effective": None}, {"clients": False}])
def test_compare_detects_missing_mps_evidence(tmp_path, capsys, kwargs):
    code, report = compare_json(capsys, *ab_runs(tmp_path, **kwargs))
    assert code == 1
    result = gates(report)
    assert result["mps_observed"] is False and result["throughput"] is True
    detail = next(g["detail"] for g in report["groups"][0]["gates"] if g["gate"] == "mps_observed")
    assert "mps1" in detail


@pytest.mark.parametrize("kwargs, gate", [
    ({"status": "failed", "rows": 80}, "completed"),
    ({"status": "interrupted"}, "completed"),
    ({"nan_trips": 1}, "nan_guard"),
    ({"backpressure_every": 2}, "backpressure"),
])
def test_compare_detects_regressions(tmp_path, capsys, kwargs, gate):
    code, report = compare_json(capsys, *ab_runs(tmp_path, **kwargs))
    assert code == 1
    result = gates(report)
    assert result[gate] is False
    assert all(passed for name, passed in result.items() if name not in (gate, "throughput"))


def test_compare_checks_every_rank_for_mps_evidence(tmp_path, capsys):
    runs = ab_runs(tmp_path)
    manifest_path = runs[3] / "runtime_manifest.json"
    manifest = json.loads(manifest_path.read_text())
    rank1 = dict(manifest["cuda_process_sharing"], effective=None, client_pids={})
    manifest["ranks"] = [{"rank": 0, "device": "cuda:0", "cuda_process_sharing": manifest["cuda_process_sharing"]},
                         {"rank": 1, "device": "cuda:1", "cuda_process_sharing": rank1}]
    manifest_path.write_text(json.dumps(manifest))
    code, report = compare_json(capsys, *runs)
    assert code == 1 and gates(report)["mps_observed"] is False


def test_compare_flags_a_baseline_that_reached_a_daemon(tmp_path, capsys):
    runs = ab_runs(tmp_path)
    make_run(tmp_path / "x", "base3", mode=None, sps=51_000, seed=3, daemon_reachable=True)
    code, report = compare_json(capsys, *runs, tmp_path / "x" / "base3")
    assert code == 1 and gates(report)["baseline_without_mps"] is False


def test_compare_accepts_a_baseline_that_blocked_the_daemon(tmp_path, capsys):
    """training.mps.block_ambient_mps (the gate preset): a reachable daemon does not taint the baseline, as long
    as the launcher found neither child among its clients (effective stays null)."""
    # the preset sets it for both arms (the MPS arm ignores it): configs differ only in the mode
    runs = [make_run(tmp_path, "base1", mode=None, sps=50_000, seed=1, daemon_reachable=True, blocked=True),
            make_run(tmp_path, "mps1", mode="mps", sps=62_000, seed=1, blocked=True)]
    code, report = compare_json(capsys, *runs)
    assert code == 0 and gates(report)["baseline_without_mps"] is True
    make_run(tmp_path / "y", "base2", mode=None, sps=51_000, seed=2, daemon_reachable=True, blocked=True,
             effective="mps")
    code, report = compare_json(capsys, *runs, tmp_path / "y" / "base2")
    assert code == 1 and gates(report)["baseline_without_mps"] is False


def test_compare_rejects_bad_input(tmp_path, capsys):
    base = make_run(tmp_path, "base1", mode=None, sps=50_000)
    assert bench("compare", str(base)) == 2
    assert "no candidate run" in capsys.readouterr().err
    other = make_run(tmp_path, "mps1", mode="mps", sps=60_000, num_envs=1024)
    assert bench("compare", str(base), str(other)) == 2
    assert "task.num_envs" in capsys.readouterr().err
    assert bench("compare", str(base), str(base)) == 2
    assert bench("compare", str(tmp_path / "missing")) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert bench("compare", str(empty)) == 2
    assert "neither a run directory" in capsys.readouterr().err


def test_compare_writes_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "ab.png"
    assert bench("compare", *map(str, ab_runs(tmp_path / "runs")), "--plot", str(out)) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_names_the_package(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert bench("compare", *map(str, ab_runs(tmp_path)), "--plot", str(tmp_path / "ab.png")) == 2
    assert "pip install matplotlib" in capsys.readouterr().err
    assert not (tmp_path / "ab.png").exists()


# The gate preset: one `train -m` command gives 2 arms x 2 repeats.


@pytest.fixture
def launch_spy(monkeypatch):
    import unilab.launcher.launch as launch_mod

    calls = []
    monkeypatch.setattr(launch_mod, "launch", lambda prepared, cfg: calls.append(prepared.run_dir) or 0)
    return calls


def test_gate_preset_sweeps_two_arms_times_two_seeds(tmp_path, launch_spy, fake_host):
    log_dir = tmp_path / "runs"
    try:
        train_main(["-m", "+execution=default,mps", "+bench=offpolicy_gate", f"training.run.log_dir={log_dir}"])
    except SystemExit as exc:
        assert not exc.code
    assert len(launch_spy) == 4
    configs = [json.loads((run / "run_config.json").read_text()) for run in launch_spy]
    jobs = sorted((str(c["training"]["mps"]["cuda_process_sharing"]), c["training"]["run"]["seed"]) for c in configs)
    assert jobs == [("None", 1), ("None", 2), ("mps", 1), ("mps", 2)]
    for c in configs:
        assert c["algo"]["max_iterations"] == 300 and c["algo"]["save_interval"] == 100000
        assert c["training"]["outputs"]["no_play"] is True and c["training"]["outputs"]["export_onnx"] is False


def test_gate_preset_composes_per_arm():
    cfg = compose_train(["+execution=mps", "+bench=offpolicy_gate"], with_hydra_node=True)
    assert cfg.algo.max_iterations == 300 and cfg.algo.save_interval == 100000
    assert cfg.training.mps.cuda_process_sharing.value == "mps"
    assert dict(cfg.hydra.sweeper.params) == {"training.run.seed": "1,2"}


def test_compare_refuses_a_verdict_without_both_arms(tmp_path, capsys):
    """An arm whose jobs made no run directory (refused at compose) or none of whose runs completed (a failed
    sweep job) gets no verdict: exit 2, naming the arm and its runs."""
    make_run(tmp_path, "base1", mode=None, sps=50_000, seed=1)
    make_run(tmp_path, "base2", mode=None, sps=52_000, seed=2)
    assert bench("compare", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert "no verdict without both arms" in err
    assert "fastsac/g1_walk_flat: no candidate run (configured mode mps)" in err
    assert "train -m" in err
    failed = make_run(tmp_path, "mps1", mode="mps", sps=62_000, seed=1, status="failed", rows=20)
    (failed / "metrics.jsonl").unlink()  # failed before its first iteration
    make_run(tmp_path, "mps2", mode="mps", sps=64_000, seed=2, status="interrupted", rows=20)
    assert bench("compare", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert ("no completed candidate run (configured mode mps): mps1 failed (the learner raised); "
            "mps2 interrupted") in err
    assert capsys.readouterr().out == ""


def test_compare_reports_a_partly_failed_arm(tmp_path, capsys):
    """One repeat failed, the other completed: a verdict (FAIL), with the failed run named in the `completed` gate."""
    runs = ab_runs(tmp_path)
    (runs[3] / "metrics.jsonl").unlink()
    summary = json.loads((runs[3] / "run_summary.json").read_text())
    (runs[3] / "run_summary.json").write_text(json.dumps(dict(summary, status="failed")))
    code, report = compare_json(capsys, tmp_path)
    assert code == 1 and gates(report)["completed"] is False
    detail = next(g["detail"] for g in report["groups"][0]["gates"] if g["gate"] == "completed")
    assert detail == "mps2: failed"
    assert bench("compare", str(tmp_path)) == 1
    # the failed run has no rows: the candidate's means come from one run, and the header says so
    assert "| metric | null (n=2) | mps (n=1 of 2 runs) | change |" in capsys.readouterr().out

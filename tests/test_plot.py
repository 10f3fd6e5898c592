"""`unilab plot`: learning curves of synthesized run directories (CPU, no training)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unilab.bench.curves import curve, group_by_seed, window_for
from unilab.cli.tools import main

pytest.importorskip("matplotlib")


def make_run(root: Path, name: str, *, seed: int, lr: float = 3e-4, rows: int = 120, t0: float = 1.7e9) -> Path:
    run = root / name
    run.mkdir(parents=True)
    config = {"algo": {"name": "fastsac", "actor_lr": lr}, "task": {"name": "g1_walk_flat", "num_envs": 8},
              "training": {"run": {"seed": seed, "run_name": name, "log_dir": str(root)}}}
    (run / "run_config.json").write_text(json.dumps(config))
    with open(run / "metrics.jsonl", "w") as f:
        for i in range(1, rows + 1):
            f.write(json.dumps({"schema_version": 1, "iteration": i, "env_steps": 8 * 32 * i, "time": t0 + 0.5 * i,
                                "episode_return": float(i + seed) if i % 3 else None,
                                "episode_length": 10.0 * i, "episodes_finished": i % 3,
                                "metrics/lin_vel_error": 1.0 / i}) + "\n")
    return run


@pytest.fixture
def runs(tmp_path):
    return [make_run(tmp_path, "walk_s1", seed=1), make_run(tmp_path, "walk_s2", seed=2, t0=1.8e9),
            make_run(tmp_path, "walk_lr", seed=1, lr=1e-3)]


def test_seeds_of_one_config_are_grouped(runs):
    assert group_by_seed(runs) == [[runs[0], runs[1]], [runs[2]]]
    assert group_by_seed([runs[2], runs[0], runs[1]]) == [[runs[2]], [runs[0], runs[1]]]


@pytest.mark.parametrize("x", ["env_steps", "wall_clock", "iteration"])
def test_plot_each_x_axis(runs, tmp_path, x, capsys):
    import matplotlib.image

    out = tmp_path / f"curves_{x}.png"
    argv = ["plot", *map(str, runs), "--x", x, "--metric", "episode_return", "metrics/lin_vel_error", "--out", str(out)]
    assert main(argv) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    image = matplotlib.image.imread(out)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 500


def test_short_run_still_plots(tmp_path):
    import matplotlib.image

    run = make_run(tmp_path, "tiny", seed=0, rows=5)
    out = tmp_path / "tiny.png"
    assert main(["plot", str(run), "--out", str(out)]) == 0
    assert matplotlib.image.imread(out).size
    assert window_for(5) == 1 and window_for(10_000) == 500 and window_for(10_000, 50) == 50


def test_wall_clock_from_first_row_and_weighted_mean(runs):
    from unilab.rundir.metrics import read_metrics

    rows = read_metrics(runs[1], latest_per_iteration=True)
    xs, _ = curve(rows, "metrics/lin_vel_error", "wall_clock", 1)
    assert xs[0] == 0.0 and xs[-1] == pytest.approx(0.5 * 119 / 60)
    # weighted by episodes_finished: 10*i with weights i%3 over iterations 1..3 -> (10*1 + 20*2) / 3
    xs, ys = curve(rows[:3], "episode_length", "iteration", 3)
    assert xs == [3.0] and ys == [pytest.approx(50 / 3)]


def test_bad_input_exits_2(runs, tmp_path, capsys):
    assert main(["plot", str(tmp_path / "nothing"), "--out", str(tmp_path / "a.png")]) == 2
    assert "not a run directory" in capsys.readouterr().err
    assert main(["plot", str(runs[0]), "--metric", "no/such_key", "--out", str(tmp_path / "b.png")]) == 2
    assert "no/such_key" in capsys.readouterr().err
    assert not (tmp_path / "a.png").exists() and not (tmp_path / "b.png").exists()


def test_missing_matplotlib_is_a_clear_error(runs, tmp_path, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert main(["plot", str(runs[0]), "--out", str(tmp_path / "c.png")]) == 2
    assert "pip install 'unilab[plot]'" in capsys.readouterr().err

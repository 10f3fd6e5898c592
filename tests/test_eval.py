"""`unilab eval`: the walk metrics on scripted dynamics, the PD torque against MuJoCo, and the command
end to end on a tiny CPU run (report, table, bad input)."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import mujoco
import numpy as np
import pytest

from unilab.tasks.g1_walk_flat.evaluation import COMMAND_GRID
import torch

from unilab.assets import g1
from unilab.eval import walk
from unilab.eval.cli import EVAL_SCHEMA

K = 2  # envs per command


class ScriptedWalkEnv:
    """Moves every base at `gain` times its held command; env 0 of the command block `falls_in`
    terminates once, mid-hold. Only what `walk.rollout` reads."""

    def __init__(self, gain: float, falls_in: int, commands=walk.COMMAND_GRID, deadband: float = 0.0):
        self.device = torch.device("cpu")
        self.num_envs = K * len(commands)
        self.dt = 0.02
        self.gain, self.falls_in, self.deadband = gain, falls_in, deadband
        self.mj_model = g1.build_g1_model()
        nu = self.mj_model.nu
        self.backend = SimpleNamespace(ctrl=torch.zeros(self.num_envs, nu))
        self.joint_pos = torch.zeros(self.num_envs, nu)
        self.joint_vel = torch.zeros(self.num_envs, nu)
        self.t = 0

    def hold_commands(self, commands):
        self.commands = commands.clone()

    def reset(self):
        return torch.zeros(self.num_envs, 4)

    def step(self, action):
        self.t += 1
        # A policy that stands still under commands whose largest part is below `deadband`.
        moves = (self.commands.abs().max(dim=1, keepdim=True).values >= self.deadband).float()
        reached = self.gain * moves * self.commands
        self.base_lin_vel_b = torch.cat([reached[:, :2], torch.zeros(self.num_envs, 1)], dim=1)
        self.base_ang_vel_b = torch.cat([torch.zeros(self.num_envs, 2), reached[:, 2:]], dim=1)
        terminated = torch.zeros(self.num_envs, dtype=torch.bool)
        if self.t == 10:
            terminated[self.falls_in * K] = True
        return torch.zeros(self.num_envs, 4), None, None, terminated, None, None


def test_rollout_errors_on_scripted_dynamics():
    env = ScriptedWalkEnv(gain=0.8, falls_in=1)
    settings = walk.WalkEvalSettings(envs_per_command=K, hold_s=0.6, window_s=0.2)
    rows = walk.rollout(env, lambda obs: torch.zeros(obs.shape[0], 29), settings)
    assert [r["command"] for r in rows] == [list(c) for c in walk.COMMAND_GRID]
    for i, (row, cmd) in enumerate(zip(rows, walk.COMMAND_GRID)):
        vx, vy, wz = cmd
        assert row["achieved"] == pytest.approx([0.8 * vx, 0.8 * vy, 0.8 * wz], abs=1e-4)
        assert row["lin_error"] == pytest.approx(0.2 * float(np.hypot(vx, vy)), abs=1e-5)
        assert row["yaw_error"] == pytest.approx(0.2 * abs(wz), abs=1e-5)
        assert row["fall_fraction"] == (0.5 if i == 1 else 0.0)
        assert row["torque_share"] == 0.0  # targets on the joints, at rest
    o = walk.overall(rows)
    lin = [0.2 * float(np.hypot(c[0], c[1])) for c in walk.COMMAND_GRID]
    assert o["lin_error"] == pytest.approx(sum(lin) / len(lin), abs=1e-5)
    assert o["fall_fraction"] == pytest.approx(0.5 / len(walk.COMMAND_GRID))
    assert walk.WalkEvalSettings().hold_s >= 10.0 and {(-0.5, 0, 0), (0, 0.4, 0), (0, 0, -0.8)} <= set(walk.COMMAND_GRID)


def test_the_slow_suite_shows_a_policy_that_stands_still_at_slow_commands():
    """A policy that walks every grid command but stands under 0.35 (m/s or rad/s) passes the grid's walking
    commands and fails every slow one: the slow suite's rows are its own commands, their errors the full command."""
    settings = walk.WalkEvalSettings(envs_per_command=K, hold_s=0.6, window_s=0.2)
    policy = lambda obs: torch.zeros(obs.shape[0], 29)  # noqa: E731
    env = ScriptedWalkEnv(gain=1.0, falls_in=0, commands=walk.SLOW_GRID, deadband=0.35)
    rows = walk.rollout(env, policy, settings, walk.suite_commands("slow"))
    assert [r["command"] for r in rows] == [list(c) for c in walk.SLOW_GRID]
    for row, (vx, vy, wz) in zip(rows, walk.SLOW_GRID):
        assert row["achieved"] == pytest.approx([0.0, 0.0, 0.0], abs=1e-6)
        assert row["lin_error"] == pytest.approx(float(np.hypot(vx, vy)), abs=1e-5)
        assert row["yaw_error"] == pytest.approx(abs(wz), abs=1e-5)
    assert all(max(map(abs, c)) <= 0.3 for c in walk.SLOW_GRID) and (0.0, 0.0, 0.0) == walk.SLOW_GRID[-1]
    assert walk.overall(rows)["lin_error"] > 0.1 and walk.overall(rows)["combined_lin_error"] > 0.2
    grid = walk.rollout(ScriptedWalkEnv(gain=1.0, falls_in=0, deadband=0.35), policy, settings)
    walking = [r for r in grid if max(map(abs, r["command"])) >= 0.35]
    assert walking and all(r["lin_error"] == pytest.approx(0.0, abs=1e-5) for r in walking)
    assert walk.suite_commands("nominal") == walk.suite_commands("push") == walk.COMMAND_GRID


def test_torque_share_is_the_actuator_force_over_its_limit():
    env = ScriptedWalkEnv(gain=1.0, falls_in=0)
    m = env.mj_model
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    gen = np.random.default_rng(0)
    joints = m.actuator_trnid[:, 0]
    d.qpos[m.jnt_qposadr[joints]] += gen.uniform(-0.3, 0.3, m.nu)
    d.qvel[m.jnt_dofadr[joints]] = gen.uniform(-3.0, 3.0, m.nu)
    d.ctrl[:] = g1.G1_DEFAULT_QPOS_JOINTS + gen.uniform(-1.5, 1.5, m.nu)  # some torques saturate
    mujoco.mj_forward(m, d)
    expected = np.mean(np.abs(d.actuator_force) / m.actuator_forcerange[:, 1])
    env.backend.ctrl[:] = torch.as_tensor(d.ctrl, dtype=torch.float32)
    env.joint_pos[:] = torch.as_tensor(d.qpos[m.jnt_qposadr[joints]], dtype=torch.float32)
    env.joint_vel[:] = torch.as_tensor(d.qvel[m.jnt_dofadr[joints]], dtype=torch.float32)
    share = walk.pd_torque_share(env)
    assert share.shape == (env.num_envs,)
    assert share[0].item() == pytest.approx(expected, rel=1e-4)
    assert (np.abs(d.actuator_force) >= m.actuator_forcerange[:, 1] - 1e-6).any()


def test_suites_change_the_randomisation_only():
    s = walk.WalkEvalSettings(envs_per_command=3, hold_s=4.0)
    nominal, robust = walk.task_overrides("nominal", s), walk.task_overrides("robust", s)
    assert nominal["observations"]["noise_scale"] == 0.0 and nominal["randomization"]["push_interval_s"] is None
    assert robust["randomization"]["friction_range"] == [0.3, 1.2] and robust["observations"]["noise_scale"] == 1.0
    for over in (nominal, robust):
        assert over["num_envs"] == 3 * len(walk.COMMAND_GRID) and over["episode_length_s"] > 4.0
        assert over["randomization"]["stagger_first_episode"] is False
    slow = walk.task_overrides("slow", s)
    assert slow["num_envs"] == 3 * len(walk.SLOW_GRID)
    assert {k: v for k, v in slow.items() if k != "num_envs"} == {k: v for k, v in nominal.items() if k != "num_envs"}
    with pytest.raises(ValueError, match="unknown suite"):
        walk.task_overrides("windy", s)


def _args(run, *flags):
    import argparse

    from unilab.eval.cli import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["eval", str(run), *map(str, flags)])


def _recorded_run(tmp_path, task="g1_walk_flat", device="cpu"):
    (tmp_path / "run_config.json").write_text(json.dumps({"task": {"name": task}, "algo": {"name": "fastsac"},
                                                          "training": {"run": {"device": device}}}))
    return tmp_path


def test_on_the_cpu_eval_takes_cpu_sizes_and_says_so(tmp_path):
    from unilab.eval.cli import CPU_WALK, _settings

    run = _recorded_run(tmp_path)
    settings, lines = _settings(_args(run), cpu=True)
    assert vars(settings) == CPU_WALK
    (line,) = lines
    assert line.startswith("on the CPU: 4 envs per command held 6 s, the last 3 s measured (on a GPU: 32 envs per "
                           "command held 10 s, the last 6 s measured;")
    settings, lines = _settings(_args(run), cpu=False)  # a GPU: the settings' own defaults, nothing said
    assert vars(settings) == vars(walk.WalkEvalSettings()) and lines == []
    settings, lines = _settings(_args(run, "--envs-per-command", 2, "--hold-s", 4, "--window-s", 2), cpu=True)
    assert (settings.envs_per_command, settings.hold_s, settings.window_s) == (2, 4.0, 2.0) and lines == []


def test_a_gpu_sized_grid_on_the_cpu_is_warned_of(tmp_path):
    from unilab.eval.cli import _settings

    run = _recorded_run(tmp_path)
    settings, lines = _settings(_args(run, "--envs-per-command", 32, "--hold-s", 10, "--window-s", 6), cpu=True)
    assert settings.envs_per_command == 32  # used as asked
    (warning,) = lines
    assert warning.startswith("warning: a GPU-sized evaluation on the CPU") and "13x the env steps" in warning
    _, lines = _settings(_args(run, "--envs-per-command", 32), cpu=False)
    assert lines == []
    tracking = _recorded_run(tmp_path, task="g1_motion_tracking")
    settings, lines = _settings(_args(tracking), cpu=True)
    assert settings.envs_per_clip == 2
    assert lines[0].startswith("on the CPU: 2 envs per clip (on a GPU: 16 envs per clip;")
    _, lines = _settings(_args(tracking, "--envs-per-clip", 16), cpu=True)
    assert lines[0].startswith("warning: a GPU-sized evaluation") and "8x" in lines[0]


def test_a_run_trained_on_a_gpu_is_evaluated_on_the_cpu_of_a_host_without_one(monkeypatch):
    from unilab.runtime.play import device_here

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    device, note = device_here(None, "cuda:0")
    assert device == "cpu" and note.startswith("no GPU here: on the CPU (the run trained on cuda:0")
    assert device_here("cuda:1", "cuda:0") == ("cuda:1", None)  # asked for: as given
    assert device_here(None, "cpu") == ("cpu", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert device_here(None, "cuda:0") == ("cuda:0", None)


def test_the_rollout_shows_its_progress_and_time_left():
    from unilab.eval.cli import _Progress

    env = ScriptedWalkEnv(gain=1.0, falls_in=0)
    settings = walk.WalkEvalSettings(envs_per_command=K, hold_s=0.1, window_s=0.04)
    said, ticks = [], iter(range(100))
    counted = _Progress(env, "nominal", lambda e: round(settings.hold_s / e.dt), said.append, every_s=2.0,
                        clock=lambda: float(next(ticks)))
    rows = walk.rollout(counted, lambda obs: torch.zeros(obs.shape[0], 29), settings)
    assert len(rows) == len(walk.COMMAND_GRID) and env.t == 5
    # one clock tick a step: a line every 2 s, and the last step's
    assert said == ["nominal: step 2/5 (40 %), 2 s, ETA 3 s", "nominal: step 4/5 (80 %), 4 s, ETA 1 s",
                    "nominal: step 5/5 (100 %), 5 s, ETA 0 s"]


def test_a_command_where_every_env_fell_reads_so_instead_of_nan():
    from unilab.eval.cli import format_table

    class EveryEnvFalls(ScriptedWalkEnv):  # both envs of the first command's block, at step 2
        def step(self, action):
            obs, reward, _, terminated, truncated, info = super().step(action)
            terminated[:K] |= self.t == 2
            return obs, reward, None, terminated, truncated, info

    env = EveryEnvFalls(gain=1.0, falls_in=0)
    settings = walk.WalkEvalSettings(envs_per_command=K, hold_s=0.4, window_s=0.1)
    rows = walk.rollout(env, lambda obs: torch.zeros(obs.shape[0], 29), settings)
    report = {"checkpoint": "c.pt", "iteration": 1, "env_steps": 8, "task": "g1_walk_flat",
              "suites": {"nominal": {"per_command": rows, "overall": walk.overall(rows)}}}
    assert rows[0]["achieved"] is None and rows[0]["lin_error"] is None  # eval.json: null, not NaN
    assert "NaN" not in json.dumps(rows)
    table = format_table(report)
    assert "nan" not in table.lower()
    (fell,) = [line for line in table.splitlines() if "(+0.50, +0.00, +0.00)" in line]
    assert "every env fell during the hold: nothing measured" in fell and "100.0%" in fell


TINY = ["--envs-per-command", "1", "--hold-s", "0.2", "--window-s", "0.1", "--device", "cpu"]


def _eval(*args) -> int:
    from unilab.cli.tools import main as tools_main

    return tools_main(["eval", *map(str, args)])


@pytest.mark.integration
def test_eval_writes_a_versioned_report_and_a_table(walk_run, capsys):
    assert _eval(walk_run, *TINY) == 0
    report = json.loads((walk_run / "eval.json").read_text())
    assert report["schema"] == EVAL_SCHEMA and report["task"] == "g1_walk_flat" and report["algo"] == "fastsac"
    assert report["iteration"] == 6 and set(report["suites"]) == {"nominal", "robust", "push", "slow"}
    assert report["checkpoint_time"] == pytest.approx((walk_run / "checkpoints" / "iter_0000006.pt").stat().st_mtime)
    for name, suite in report["suites"].items():
        assert [r["command"] for r in suite["per_command"]] == [list(c) for c in walk.suite_commands(name)]
        assert set(suite["overall"]) == {"lin_error", "yaw_error", "fall_fraction", "torque_share",
                                         "combined_lin_error", "combined_fall_fraction", "max_fall_fraction",
                                         "mirror_lin_gap", "mirror_yaw_gap"}
    table = capsys.readouterr().out
    assert "[nominal]" in table and "[robust]" in table and "[slow]" in table and "overall" in table
    # An older checkpoint, one suite, another file.
    out = walk_run / "eval_iter3.json"
    ckpt = walk_run / "checkpoints" / "iter_0000003.pt"
    assert _eval(walk_run, "--checkpoint", ckpt, "--suite", "nominal", "--out", out, "--json", *TINY) == 0
    report = json.loads(out.read_text())
    assert report["iteration"] == 3 and list(report["suites"]) == ["nominal"]


@pytest.mark.integration
def test_eval_on_the_cpu_states_its_sizes_and_shows_progress(walk_run, tmp_path, capsys):
    """No size given on the CPU: the CPU's (the hold shortened here to keep the test short), said before the rollout,
    whose progress follows the build's stages."""
    assert _eval(walk_run, "--suite", "nominal", "--hold-s", 0.2, "--window-s", 0.1, "--out", tmp_path / "e.json") == 0
    err = capsys.readouterr().err
    assert "unilab eval: on the CPU: 4 envs per command held 0.2 s, the last 0.1 s measured" in err
    assert json.loads((tmp_path / "e.json").read_text())["settings"]["envs_per_command"] == 4
    lines = err.splitlines()
    order = [next(i for i, line in enumerate(lines) if needle in line) for needle in (
        f"nominal: building {4 * len(COMMAND_GRID)} envs on cpu", "nominal: physics kernels ready", "nominal: step 10/10 (100 %)")]
    assert order == sorted(order), err


@pytest.mark.integration
def test_bad_input_exits_2_and_writes_nothing(walk_run, tmp_path, capsys):
    assert _eval(tmp_path, *TINY) == 2
    assert "not a run directory" in capsys.readouterr().err
    # A run without checkpoints.
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(walk_run / "run_config.json", bare / "run_config.json")
    assert _eval(bare, *TINY) == 2
    assert "no checkpoint" in capsys.readouterr().err
    # A checkpoint of another algorithm's run.
    other = tmp_path / "other"
    (other / "checkpoints").mkdir(parents=True)
    config = json.loads((walk_run / "run_config.json").read_text())
    config["algo"]["name"] = "flashsac"
    (other / "run_config.json").write_text(json.dumps(config))
    shutil.copy(walk_run / "checkpoints" / "iter_0000003.pt", other / "checkpoints" / "iter_0000003.pt")
    assert _eval(walk_run, "--checkpoint", other / "checkpoints" / "iter_0000003.pt", "--out", tmp_path / "x.json", *TINY) == 2
    assert "checkpoint of flashsac" in capsys.readouterr().err
    # A checkpoint whose shapes do not fit (not a run's file: nothing to compare names with).
    stray = tmp_path / "stray.pt"
    torch.save({"iteration": 1, "env_steps": 8, "learner": {"actor": {}}}, stray)
    assert _eval(walk_run, "--checkpoint", stray, "--out", tmp_path / "y.json", *TINY) == 2
    assert "does not fit" in capsys.readouterr().err
    # A task without an evaluation.
    config["task"]["name"], config["algo"]["name"] = "g1_dance", "fastsac"
    (bare / "run_config.json").write_text(json.dumps(config))
    assert _eval(bare, *TINY) == 2
    assert "no evaluation for task" in capsys.readouterr().err
    assert not list(tmp_path.rglob("*.json")) or {p.name for p in tmp_path.rglob("*.json")} == {"run_config.json"}


# ------------------------------------------------------------------ motion tracking
class ScriptedTrackingEnv:
    """Two clips (21 and 11 frames, one frame per step); errors grow with the step. Env 0 of clip 0
    terminates at step 5, env 1 of clip 1 at step 1; the others truncate at their clip's end."""

    def __init__(self):
        self.device = torch.device("cpu")
        self.num_envs, self.num_clips = 4, 2
        self.clip_names, self.clip_num_frames = ["long", "short"], [21, 11]
        self.clip_length = torch.tensor([21, 11])
        self.frames_per_step = 1.0
        self.part_names = {"body_pos": ("pelvis", "wrist"), "joint_pos": ("knee", "elbow", "ankle")}
        self.t = 0

    def reset_to_clips(self, clip_ids, frames=None):
        assert clip_ids.tolist() == [0, 0, 1, 1] and frames is None
        self.clips = clip_ids
        self.episode_limit = self.clip_length[clip_ids] - 1
        return torch.zeros(4, 3)

    def step(self, action):
        self.t += 1
        terminated = torch.tensor([self.t == 5, False, False, self.t == 1])
        truncated = (self.t == self.episode_limit) & ~terminated
        self.errors = {"body_pos": torch.full((4,), 0.001 * self.t), "joint_pos": torch.full((4,), 0.1),
                       "anchor_ori": torch.full((4,), 0.2 * self.t)}
        return torch.zeros(4, 3), None, None, terminated, truncated, None

    def tracking_errors_and_parts(self):
        # the wrist's error is three times the pelvis's; the elbow's is the env's index in tenths
        body = torch.stack((self.errors["body_pos"] / 2, self.errors["body_pos"] * 1.5), dim=1)
        joint = torch.stack((torch.zeros(4), torch.arange(4) / 10, torch.full((4,), 0.3)), dim=1)
        return self.errors, {"body_pos": body, "joint_pos": joint}

    def protocol_errors(self):
        # global: env 1 drifts 30 mm a step (past 0.5 m at step 17, though it plays the clip to its end); env 2
        # stays at 40 mm. Root-relative: half of global.
        glob = torch.tensor([0.01, 0.03 * self.t, 0.04, 0.02])
        return {"global": glob, "root_relative": glob / 2}


def test_tracking_rollout_on_scripted_episodes():
    from unilab.eval import tracking

    rows = tracking.rollout(ScriptedTrackingEnv(), lambda obs: obs, envs_per_clip=2)
    long, short = rows
    assert (long["clip"], long["frames"], short["clip"]) == ("long", 21, "short")
    # Clip "long": env 0 tracked 4 of 20 frames, env 1 all of them.
    assert long["completion"] == pytest.approx((4 / 20 + 1) / 2) and long["fall_fraction"] == 0.5
    # Measured while still running after the step: env 0 steps 1-4, env 1 steps 1-19 (step 20 ended it).
    assert long["body_pos_error_mm"] == pytest.approx((2.5 + 10.0) / 2)
    assert long["anchor_ori_error_rad"] == pytest.approx((0.5 + 2.0) / 2)
    assert long["joint_pos_error_rad"] == pytest.approx(0.1)
    # Clip "short": env 3 failed on the first step (no measured step: left out of the errors).
    assert short["completion"] == pytest.approx(0.5) and short["fall_fraction"] == 0.5
    assert short["body_pos_error_mm"] == pytest.approx(5.0)
    # The published protocol: env 1 completes "long" but strays past 0.5 m, so neither env of it succeeds;
    # env 2 succeeds on "short", env 3 fell.
    assert long["global_body_pos_error_mm"] == pytest.approx((10.0 + 300.0) / 2)
    assert long["root_relative_body_pos_error_mm"] == pytest.approx((10.0 + 300.0) / 4)
    assert short["global_body_pos_error_mm"] == pytest.approx(40.0)
    assert (long["success"], short["success"]) == (0.0, 0.5)
    o = tracking.overall(rows)
    assert o["success"] == pytest.approx(0.25) and o["global_body_pos_error_mm"] == pytest.approx((155.0 + 40.0) / 2)
    assert o["completion"] == pytest.approx((0.6 + 0.5) / 2) and o["body_pos_error_mm"] == pytest.approx(5.625)
    # The breakdown is averaged like the means: over the steps each env was tracking, then over the envs.
    assert long["body_pos_error_mm_by_body"] == pytest.approx({"pelvis": 6.25 / 2, "wrist": 6.25 * 1.5})
    assert long["joint_pos_error_rad_by_joint"] == pytest.approx({"knee": 0.0, "elbow": 0.05, "ankle": 0.3})
    assert short["joint_pos_error_rad_by_joint"]["elbow"] == pytest.approx(0.2)  # env 2 only: env 3 never tracked
    assert o["joint_pos_error_rad_by_joint"]["elbow"] == pytest.approx((0.05 + 0.2) / 2)
    assert o["body_pos_error_mm_by_body"]["wrist"] == pytest.approx((6.25 + 5.0) * 1.5 / 2)
    lines = tracking.format_suite("robust", {"per_clip": rows, "overall": o}, parts=2)
    below_long = lines[lines.index(next(ln for ln in lines if ln.strip().startswith("long"))) + 1]
    assert below_long.split(":")[0].strip() == "largest bodies" and below_long.index("wrist") < below_long.index("pelvis")
    assert any(ln.strip() == "largest joints: ankle 0.300 rad, elbow 0.200 rad" for ln in lines)
    assert not any("largest" in ln for ln in tracking.format_suite("robust", {"per_clip": rows, "overall": o}))
    (short_line,) = [ln for ln in lines if ln.strip().startswith("short")]
    assert short_line.split()[-3:] == ["40.0", "20.0", "50.0%"] and "success (global <= 500 mm)" in lines[1]


def test_protocol_errors_split_whole_body_drift_from_the_pose():
    """Global error counts a robot that drifted as a whole; root-relative error does not, but sees a limb moved."""
    from types import SimpleNamespace

    from unilab.tasks.g1_motion_tracking.env import G1MotionTrackingEnv

    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(3, 5, 3, generator=gen)  # 3 envs, 5 bodies (4 tracked), root at index 4
    pos = ref + torch.tensor([0.3, -0.4, 0.0])  # drifted 0.5 m as a whole
    pos[1, 2] += torch.tensor([0.0, 0.0, 0.2])  # env 1: one tracked body 0.2 m off as well
    env = SimpleNamespace(ref_body_pos=ref, body_pos=pos, num_tracked=4, _root=4)
    err = G1MotionTrackingEnv.protocol_errors(env)
    assert err["root_relative"][[0, 2]] == pytest.approx([0.0, 0.0], abs=1e-6)
    assert err["root_relative"][1].item() == pytest.approx(0.2 / 4, abs=1e-6)
    assert err["global"][0].item() == pytest.approx(0.5, abs=1e-6) and err["global"][1] > err["global"][0]


def test_tracking_suites_turn_off_only_existing_randomisation():
    from unilab.eval import tracking

    task = {"num_envs": 4096, "motion_file": "a.npz", "episode_length_s": 10.0,
            "randomization": {"reset_root_pos": 0.05, "reset_vel": 0.1, "push_interval_s": [1.0, 3.0],
                              "push_enabled": True, "com_offset_range": [-0.02, 0.02],
                              "kick": {"max_vel": 0.5, "range": [1, 2]}},
            "observations": {"noise_scale": 1.0, "history": 3, "noise": {"joint_pos": 0.01}}}
    s = tracking.TrackingEvalSettings(envs_per_clip=4)
    nominal, kept = tracking.task_overrides("nominal", task, s, max_clip_s=7.5, num_clips=3)
    assert nominal["num_envs"] == 12 and nominal["episode_length_s"] == 8.5 and "motion_file" not in nominal
    assert nominal["randomization"] == {"reset_root_pos": 0.0, "reset_vel": 0.0, "push_interval_s": None,
                                        "push_enabled": False, "kick": {"max_vel": 0.0}}
    assert nominal["observations"] == {"noise_scale": 0.0, "noise": {"joint_pos": 0.0}}
    assert kept == ["randomization.com_offset_range", "randomization.kick.range"]
    robust, kept = tracking.task_overrides("robust", task, tracking.TrackingEvalSettings(2, "clips"), 7.5, 3)
    assert robust == {"num_envs": 6, "episode_length_s": 8.5, "motion_file": "clips"} and kept == []
    # A config without those sections (an older run) is left alone.
    assert tracking.task_overrides("nominal", {"num_envs": 2}, s, 1.0, 1)[0] == {"num_envs": 4, "episode_length_s": 2.0}
    with pytest.raises(ValueError, match="unknown suite"):
        tracking.task_overrides("windy", task, s, 1.0, 1)


@pytest.fixture(scope="module")
def tracking_run(tmp_path_factory):
    """A tiny finished CPU run of the tracking task on a two-clip directory (checkpoints at 2 and 4)."""
    import subprocess
    import sys

    from conftest import SMOKE_WALK
    from unilab.motion import save_motion_clip
    from unilab.motion.synth import synthesize

    root = tmp_path_factory.mktemp("tracking_runs")
    save_motion_clip(synthesize(duration=0.6, seed=1), root / "clips" / "kick.npz")
    save_motion_clip(synthesize(duration=0.4, seed=2), root / "clips" / "bow.npz")
    smoke = [a for a in SMOKE_WALK if not a.startswith(("algo.max_iterations", "algo.save_interval"))]
    cmd = [sys.executable, "-m", "unilab.cli.train", "--task", "g1_motion_tracking", *smoke, "algo.max_iterations=4",
           "algo.save_interval=2", f"task.motion_file={root / 'clips'}", f"training.run.log_dir={root}",
           "training.run.run_name=track", "training.outputs.no_play=true"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "track"


@pytest.mark.integration
def test_tracking_eval_writes_a_row_per_clip(tracking_run, tmp_path, capsys):
    assert _eval(tracking_run, "--envs-per-clip", 2, "--device", "cpu") == 0
    report = json.loads((tracking_run / "eval.json").read_text())
    assert report["schema"] == EVAL_SCHEMA and report["task"] == "g1_motion_tracking" and report["iteration"] == 4
    assert report["clips"] == ["bow", "kick"] and report["settings"] == {"envs_per_clip": 2, "motion": None}
    for suite in ("nominal", "robust"):
        rows = report["suites"][suite]["per_clip"]
        assert [r["clip"] for r in rows] == ["bow", "kick"] and [r["frames"] for r in rows] == [21, 31]
        for r in [*rows, report["suites"][suite]["overall"]]:
            assert 0.0 <= r["completion"] <= 1.0 and 0.0 <= r["fall_fraction"] <= 1.0
            assert r["body_pos_error_mm"] is None or r["body_pos_error_mm"] >= 0
            if r["body_pos_error_mm"] is not None:  # the breakdown's mean is the row's mean
                by_body = r["body_pos_error_mm_by_body"]
                assert len(by_body) == 14 and "torso_link" in by_body
                assert sum(by_body.values()) / len(by_body) == pytest.approx(r["body_pos_error_mm"], rel=1e-4)
                by_joint = r["joint_pos_error_rad_by_joint"]
                assert len(by_joint) == 29 and "left_knee_joint" in by_joint
                assert sum(by_joint.values()) / len(by_joint) == pytest.approx(r["joint_pos_error_rad"], rel=1e-4)
    table = capsys.readouterr().out
    assert "[nominal]" in table and "bow" in table and "kick" in table and "mean" in table
    assert "largest" not in table
    # Another motion (one clip file), one suite, another file.
    clip = tmp_path / "wave.npz"
    from unilab.motion import save_motion_clip
    from unilab.motion.synth import synthesize

    save_motion_clip(synthesize(duration=0.3, seed=4), clip)
    out = tmp_path / "wave.json"
    assert _eval(tracking_run, "--motion", clip, "--suite", "nominal", "--envs-per-clip", 1, "--out", out,
                 "--device", "cpu") == 0
    report = json.loads(out.read_text())
    assert report["clips"] == ["wave"] and [r["clip"] for r in report["suites"]["nominal"]["per_clip"]] == ["wave"]
    assert _eval(tracking_run, "--suite", "nominal", "--envs-per-clip", 1, "--parts", 3, "--out", out,
                 "--device", "cpu") == 0
    worst = [ln for ln in capsys.readouterr().out.splitlines() if "largest bodies" in ln]
    assert len(worst) == 2 and worst[0].count(" mm") == 3  # one line per clip, three bodies each


@pytest.mark.integration
def test_tracking_eval_bad_input_exits_2(tracking_run, walk_run, tmp_path, capsys):
    assert _eval(tracking_run, "--motion", tmp_path / "none.npz", "--out", tmp_path / "a.json") == 2
    assert "--motion=" in capsys.readouterr().err
    assert _eval(tracking_run, "--envs-per-clip", 0, "--out", tmp_path / "b.json") == 2
    assert "--envs-per-clip" in capsys.readouterr().err
    assert _eval(walk_run, "--motion", tmp_path / "none.npz", "--out", tmp_path / "c.json", *TINY) == 2
    assert "--motion is for motion tracking runs" in capsys.readouterr().err
    assert _eval(walk_run, "--parts", 3, "--out", tmp_path / "d.json", *TINY) == 2
    assert "--parts is for motion tracking runs" in capsys.readouterr().err
    assert _eval(tracking_run, "--parts", -1, "--out", tmp_path / "e.json") == 2
    assert "--parts -1" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.json"))

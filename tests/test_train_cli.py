"""`train` composition: fail-closed before anything exists, evidence files when it passes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fakes import GPU_A, FakeNvml
from train_calls import Spy, interrupt_real_sweep, run_dirs, run_train, tree_digest
from train_compose import refusal
from unilab.cli.tools import main as tools_main


def test_default_composes_and_records_effective_null(tmp_path, spies, capsys):
    log_dir = tmp_path / "runs"
    assert run_train("training.run.device=cpu", f"training.run.log_dir={log_dir}") == 0
    (run,) = run_dirs(log_dir)
    manifest = json.loads((run / "runtime_manifest.json").read_text())
    sharing = manifest["cuda_process_sharing"]
    assert sharing["configured"] is None and sharing["effective"] is None
    assert sharing["schema_version"] == 1 and sharing["probed_at"]
    config = json.loads((run / "run_config.json").read_text())
    assert config["training"]["mps"]["cuda_process_sharing"] is None
    assert "execution_evidence" not in config
    launcher, _ = spies
    assert len(launcher.calls) == 1


def test_mps_on_this_host_fails_closed(tmp_path, spies, capsys, monkeypatch):
    """With no usable GPU/daemon: exit 2, first unmet prerequisite and its fix, nothing created."""
    import unilab.mps.host as host_mod

    monkeypatch.setattr(host_mod, "SystemNvml", lambda: FakeNvml(available=False))
    log_dir = tmp_path / "runs"
    assert run_train("+execution=mps", f"training.run.log_dir={log_dir}") == 2
    err = capsys.readouterr().err
    assert "nvml_available" in err and "fix:" in err
    assert "Traceback" not in err
    assert not log_dir.exists()
    launcher, env_factory = spies
    assert launcher.calls == [] and env_factory.calls == []


def test_cfg_resolve_fails_with_the_same_diagnostic(tmp_path, spies, capsys, fake_host, monkeypatch):
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "no-daemon"))
    assert run_train("--cfg", "job", "--resolve", "+execution=mps") == 2
    err = capsys.readouterr().err
    assert "mps_pipe_directory" in err and "nvidia-cuda-mps-control -d" in err


def test_cpu_learner_with_mps_fails_closed(tmp_path, spies, capsys, fake_host):
    log_dir = tmp_path / "runs"
    assert run_train("+execution=mps", "training.run.device=cpu", f"training.run.log_dir={log_dir}") == 2
    assert "learner_cuda" in capsys.readouterr().err
    assert not log_dir.exists() and spies[0].calls == []


@pytest.mark.parametrize("mode, share, needle", [
    ("+execution=mps", 0, "expected 1 to 100"),
    ("+execution=mps", 101, "expected 1 to 100"),
    ("+execution=default", 50, "applies to MPS clients only"),
])
def test_bad_thread_share_fails_before_the_run(tmp_path, spies, capsys, fake_host, daemon, mode, share, needle):
    log_dir = tmp_path / "runs"
    code = run_train(mode, f"training.mps.mps_active_thread_percentage.learner={share}", f"training.run.log_dir={log_dir}")
    assert code == 2 and needle in capsys.readouterr().err
    assert run_dirs(log_dir) == [] and spies[0].calls == []


@pytest.mark.parametrize("mode, priority, needle", [
    ("+execution=mps", "low", "mps_client_priority"),
    ("+execution=default", "below_normal", "applies to MPS clients only"),
])
def test_bad_client_priority_fails_before_the_run(tmp_path, spies, capsys, fake_host, daemon, mode, priority,
                                                  needle):
    log_dir = tmp_path / "runs"
    code = run_train(mode, f"training.mps.mps_client_priority.collector={priority}", f"training.run.log_dir={log_dir}")
    assert code == 2 and needle in capsys.readouterr().err
    assert run_dirs(log_dir) == [] and spies[0].calls == []


@pytest.mark.parametrize("algo", ["fastsac", "flashsac"])
def test_bad_algo_setting_fails_before_the_run(tmp_path, spies, capsys, algo):
    # The algorithm's own checks (its schema's __post_init__) run before anything is created.
    log_dir = tmp_path / "runs"
    code = run_train(f"algo={algo}", "algo.compile_mode=max-autotune", f"training.run.log_dir={log_dir}")
    assert code == 2 and "algo.compile_mode='max-autotune': choose one of" in capsys.readouterr().err
    assert run_dirs(log_dir) == [] and spies[0].calls == []


def test_mps_valid_writes_evidence(tmp_path, spies, fake_host, daemon):
    log_dir = tmp_path / "runs"
    assert run_train("+execution=mps", f"training.run.log_dir={log_dir}") == 0
    (run,) = run_dirs(log_dir)
    sharing = json.loads((run / "runtime_manifest.json").read_text())["cuda_process_sharing"]
    assert sharing["configured"] == "mps" and sharing["validated"] is True
    assert sharing["gpu_uuid"] == GPU_A.uuid
    assert sharing["control_pipe"] == str(daemon.control)
    assert sharing["control_daemon_pid"] == os.getpid() and sharing["server_pid"] is None
    assert json.loads((run / "run_config.json").read_text())["training"]["mps"]["cuda_process_sharing"] == "mps"


@pytest.mark.parametrize(
    "override, needle",
    [
        ("training.mps.cuda_process_sharing=mpss", "expected one of [mps]"),
        ("training.mps.cuda_process_sharing=MPS", "expected one of [mps]"),
        ("training.mps.cuda_process_sharing=' mps '", "expected one of [mps]"),
        ("training.no_such_key=1", "no_such_key"),
        ("training.run.seed=abc", "training.run.seed"),
        ("+execution=mpss", "execution=mpss: no such execution; did you mean mps?"),
        ("execution_evidence=forged", "execution_evidence"),
    ],
)
def test_bad_keys_and_values_fail_at_compose(tmp_path, spies, capsys, override, needle):
    log_dir = tmp_path / "runs"
    assert run_train(override, f"training.run.log_dir={log_dir}") == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not log_dir.exists() and spies[0].calls == []


def test_multirun_composes_two_jobs(tmp_path, spies, fake_host, daemon):
    log_dir = tmp_path / "runs"
    assert run_train("-m", "+execution=default,mps", f"training.run.log_dir={log_dir}") == 0
    runs = run_dirs(log_dir)
    modes = sorted(str(json.loads((r / "runtime_manifest.json").read_text())["cuda_process_sharing"]["configured"])
                   for r in runs)
    assert modes == ["None", "mps"]
    assert len(spies[0].calls) == 2
    # The A/B check: only the execution mode differs between the two runs.
    assert tools_main(["config", "diff", str(runs[0]), str(runs[1]), "--json"]) == 1


def test_config_diff_shows_only_the_mode(tmp_path, spies, fake_host, daemon, capsys):
    log_dir = tmp_path / "runs"
    run_train("+execution=default", f"training.run.log_dir={log_dir}", "training.run.run_name=a")
    run_train("+execution=mps", f"training.run.log_dir={log_dir}", "training.run.run_name=b")
    capsys.readouterr()
    assert tools_main(["config", "diff", str(log_dir / "a"), str(log_dir / "b"), "--ignore", "training.run.run_name"]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out == ['training.mps.cuda_process_sharing  null -> "mps"']
    assert tools_main(["config", "diff", str(log_dir / "a"), str(log_dir / "a")]) == 0
    assert tools_main(["config", "diff", str(log_dir / "a"), str(log_dir / "missing")]) == 2


def test_short_form_maps_onto_groups(tmp_path, spies):
    log_dir = tmp_path / "runs"
    args = ["--algo", "fastsac", "--task=g1_walk_flat", "--sim", "mjwarp", "training.run.device=cpu",
            f"training.run.log_dir={log_dir}"]
    assert run_train(*args) == 0
    (run,) = run_dirs(log_dir)
    config = json.loads((run / "run_config.json").read_text())
    assert config["algo"]["name"] == "fastsac" and config["task"]["name"] == "g1_walk_flat"


def test_sac_is_an_alias_of_fastsac(tmp_path, spies):
    log_dir = tmp_path / "runs"
    assert run_train("--algo", "sac", "training.run.device=cpu", f"training.run.log_dir={log_dir}") == 0
    (run,) = run_dirs(log_dir)
    assert json.loads((run / "run_config.json").read_text())["algo"]["name"] == "fastsac"


@pytest.mark.parametrize("args", [["--algo"], ["--algo", "fastsac", "algo=sac"], ["--task", "--sim", "mjwarp"]])
def test_short_form_usage_errors(args, spies, capsys):
    assert run_train(*args) == 2
    assert "train:" in capsys.readouterr().err


def test_manifest_schema_command(capsys):
    assert tools_main(["manifest", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert "cuda_process_sharing" in schema["properties"]
    evidence = schema["$defs"]["CudaProcessSharingEvidence"]["properties"]
    for field in ("configured", "effective", "validated", "control_daemon_pid", "server_pid", "control_pipe",
                  "pipe_directory", "pipe_directory_source", "learner_device", "collector_device", "gpu_uuid",
                  "compute_mode", "probed_at"):
        assert field in evidence


def test_console_script_fails_closed_without_importing_cuda_libraries(tmp_path):
    """The real entry point in a fresh interpreter: exit 2, no run dir, torch/warp never imported."""
    log_dir = tmp_path / "runs"
    script = (
        "import sys\n"
        "from unilab.cli.train import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    code = e.code\n"
        "print('RESULT', code, *(m in sys.modules for m in ('torch', 'warp', 'mujoco_warp')))\n"
    )
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(tmp_path / "none"))
    done = subprocess.run(
        [sys.executable, "-c", script, "+execution=mps", "training.run.device=cpu", f"training.run.log_dir={log_dir}"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert "RESULT 2 False False False" in done.stdout, done.stdout + done.stderr
    assert "learner_cuda" in done.stderr
    assert not log_dir.exists()


def test_cuda_device_without_a_gpu_fails_before_anything_exists(tmp_path, spies, capsys, monkeypatch):
    import unilab.mps.host as host_mod

    monkeypatch.setattr(host_mod, "SystemNvml", lambda: FakeNvml(available=False))
    log_dir = tmp_path / "runs"
    assert run_train("training.run.device=cuda:0", f"training.run.log_dir={log_dir}") == 2
    err = capsys.readouterr().err
    assert "training.run.device=cpu" in err and "Traceback" not in err
    assert not log_dir.exists() and spies[0].calls == []


# Each value is checked beside its field (its schema's __post_init__) or across the groups (unilab.config.sizes).
RANGE_CASES = [
    ("task.num_envs=0", "task.num_envs=0: expected an integer >= 1"),
    ("task.num_envs=-4", "task.num_envs=-4: expected an integer >= 1"),
    ("algo.batch_size=0", "algo.batch_size=0: expected an integer >= 1"),
    ("algo.batch_size=-1", "algo.batch_size=-1: expected an integer >= 1"),
    ("algo.updates_per_step=0", "algo.updates_per_step=0: expected an integer in [1, 10000]"),
    ("algo.policy_delay=0", "algo.policy_delay=0: expected an integer in [1, 8]"),
    ("algo.replay_capacity=0", "algo.replay_capacity=0: expected an integer >= 1"),
    ("algo.save_interval=0", "algo.save_interval=0: expected an integer in [1, 1000000000]"),
    ("algo.max_iterations=0", "algo.max_iterations=0: expected an integer in [1, "),
    ("algo.max_iterations=-5", "algo.max_iterations=-5: expected an integer in [1, "),
    ("training.outputs.keep_checkpoints=0", "training.outputs.keep_checkpoints=0: expected null (keep every checkpoint) or a count"),
    ("training.outputs.keep_checkpoints=-1", "training.outputs.keep_checkpoints=-1: expected null (keep every checkpoint) or a count"),
    ("training.loop.env_steps_per_sync=0", "training.loop.env_steps_per_sync=0: expected an integer >= 1"),
    ("training.loop.ingress_slots=0", "training.loop.ingress_slots=0: expected an integer in [1, 256]"),
    ("sim.timestep=0", "sim.timestep=0.0: expected a number in (0, 0.1]"),
    ("sim.timestep=-0.005", "sim.timestep=-0.005: expected a number in (0, 0.1]"),
    ("sim.iterations=0", "sim.iterations=0: expected an integer in [1, 1000]"),
    ("sim.ls_iterations=-1", "sim.ls_iterations=-1: expected an integer in [1, 1000]"),
    ("sim.overflow=bogus", "sim.overflow='bogus': expected one of error, count"),
    ("training.run.device=gpu", "training.run.device='gpu': expected cpu, cuda or cuda:N"),
    ("algo.v_min=20", "algo.v_min=20.0: expected less than algo.v_max=20.0"),
    ("algo.v_min=30", "algo.v_min=30.0: expected less than algo.v_max=20.0"),
    ("algo.gamma=0", "algo.gamma=0.0: expected a number in (0, 1] (a discount)"),
    ("algo.gamma=1.01", "algo.gamma=1.01: expected a number in (0, 1] (a discount)"),
    ("algo.gamma=nan", "algo.gamma=nan: expected a number in (0, 1] (a discount)"),
    ("training.run.resume_refill_fraction=-0.1", "training.run.resume_refill_fraction=-0.1: expected a number in [0, 1] "
                                             "(a share of the replay capacity)"),
    ("training.run.resume_refill_fraction=1.5", "training.run.resume_refill_fraction=1.5: expected a number in [0, 1]"),
    ("training.run.run_name=../x", "training.run.run_name='../x': expected a name relative to training.run.log_dir"),
    ("training.run.run_name=a/../../x", "training.run.run_name='a/../../x': expected a name relative to training.run.log_dir"),
    ("training.run.run_name=/tmp/elsewhere", "training.run.run_name='/tmp/elsewhere': a run name is a name, not a path; give "
                                         "the folder as training.run.log_dir: training.run.log_dir=/tmp "
                                         "training.run.run_name=elsewhere"),
    ("training.run.run_name=" + "x" * 300, "name too long (300 bytes in one folder name; at most 251: file systems take "
                                       "255 bytes per name, less room for the _N that a taken name gets); choose a "
                                       "shorter training.run.run_name"),
    ("training.run.run_name=" + "x" * 252, "name too long (252 bytes"),
    ("training.run.run_name='" + "é" * 128 + "'", "name too long (256 bytes"),  # bytes, not characters
    ("training.run.run_name=" + "d" * 256 + "/r", "name too long (256 bytes in one folder name; at most 255: file "
                                             "systems take 255 bytes per name); choose"),
    # Accepted at compose before every number had a range (policy_delay: refused only once the learner started):
    ("algo.tau=5", "algo.tau=5.0: expected a number in (0, 1]"),
    ("algo.lr=inf", "algo.lr=inf: expected a number in (0, 1] (a learning rate)"),
    ("algo.policy_delay=9", "algo.policy_delay=9: expected an integer in [1, 8] (at most algo.updates_per_step"),
    ("algo.max_iterations=9223372036854775808", "algo.max_iterations=9223372036854775808: expected an integer in"),
    ("algo.num_atoms=1", "algo.num_atoms=1: expected an integer in [2, 1001]"),
    ("task.rewards.weights.alive=1e300", "task.rewards.weights.alive=1e+300: expected a number in [-1e+06, 1e+06]"),
    ("task.observations.clip=-1", "task.observations.clip=-1.0: expected a number in (0, 1e+06]"),
    ("task.commands.lin_vel_x=[1,-1]", "task.commands.lin_vel_x=[1.0, -1.0]: expected [low, high] with -10 <= low"),
    ("task.episode_length_s=0.001", "task.episode_length_s=0.001: expected at least 1 control step(s) of "
                                    "sim.timestep x sim.decimation = 0.02 s"),
    ("sim.decimation=1000000000", "sim.decimation=1000000000: expected an integer in [1, 200]"),
    ("sim.backend=''", "sim.backend='': expected one of mjwarp"),
    ("training.run.seed=9223372036854775808", "training.run.seed=9223372036854775808: expected an integer in"),
    ("training.run.run_name=.", "training.run.run_name='.': expected a name relative to training.run.log_dir"),
    # Sizes the simulator cannot hold (Warp's 32-bit array sizes; unilab.config.sizes):
    ("sim.nconmax=100000000", "task.num_envs=4096: expected at most 21 envs (or a lower sim.nconmax=100000000)"),
    ("sim.njmax=100000000", "sim.njmax=100000000: expected at most 11184800 constraint rows per world"),
    # A replay that cannot hold what the first update waits for never trains (the run used to start and idle):
    ("algo.batch_size=2000000", "algo.replay_capacity=1000000: expected at least 2000000, the rows the first update"),
    ("algo.learning_starts=300", "algo.replay_capacity=1000000: expected at least 1228800"),  # 300 x 4096 envs
]
# The cases `train` runs end to end: every group, and each way a value is written (nan, a list, an empty string,
# bytes past a limit, a path).
RANGE_CASES_END_TO_END = ["task.num_envs=-4", "algo.gamma=nan", "sim.overflow=bogus", "sim.backend=''",
                          "training.run.device=gpu", "training.run.run_name=../x",
                          "training.run.run_name='" + "é" * 128 + "'", "task.commands.lin_vel_x=[1,-1]",
                          "sim.nconmax=100000000", "algo.learning_starts=300"]


@pytest.mark.parametrize("override, needle", RANGE_CASES)
def test_out_of_range_values_are_refused_by_validation(override, needle):
    """The key, its value and the allowed range, in the message `train` prints."""
    message = refusal(override)
    assert message is not None and needle in message, message


@pytest.mark.parametrize("override, needle", [case for case in RANGE_CASES if case[0] in RANGE_CASES_END_TO_END])
def test_out_of_range_values_fail_at_compose(tmp_path, spies, capsys, override, needle):
    """Each value is checked beside its field (its schema's __post_init__) and refused before anything exists:
    exit 2, the key, its value and the allowed range on the console, no run directory."""
    log_dir = tmp_path / "runs"
    device = [] if override.startswith("training.run.device=") else ["training.run.device=cpu"]
    assert run_train(*device, override, f"training.run.log_dir={log_dir}") == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not log_dir.exists() and not (tmp_path / "x").exists() and spies[0].calls == []


def test_a_run_name_at_the_length_limit_is_taken(tmp_path, spies):
    log_dir = tmp_path / "runs"
    assert run_train("training.run.device=cpu", f"training.run.log_dir={log_dir}", "training.run.run_name=" + "x" * 251) == 0
    assert (log_dir / ("x" * 251)).is_dir()


def test_a_run_directory_path_too_long_for_the_system_creates_nothing(tmp_path, spies, capsys):
    """Every name fits, the whole path does not (PATH_MAX): the folders made on the way are removed again and the
    fix is a shorter name, not a writable log_dir."""
    room = 4030 - len(str(tmp_path))  # log_dir and log_dir/r fit in PATH_MAX (4,096 bytes), the run name does not
    log_dir = tmp_path.joinpath(*["d" * 250] * (room // 251), "d" * (room % 251 - 1))
    assert run_train("training.run.device=cpu", f"training.run.log_dir={log_dir}", "training.run.run_name=r/" + "x" * 250) == 2
    err = capsys.readouterr().err
    assert "File name too long; choose a shorter training.run.run_name" in err, err
    assert "writable" not in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == [] and spies[0].calls == []


def test_a_tmpdir_too_long_for_the_sockets_is_refused_when_no_short_one_is_there(tmp_path, spies, capsys, monkeypatch):
    """The learner and the collector pass CPU tensors over Unix sockets in the temporary directory: a TMPDIR too long
    for them, with no short directory to take them instead (unilab.processes.socket_temp_dir), is refused before
    anything exists. (With /tmp there, the children put them there: tests/test_processes.py.)"""
    import tempfile

    import unilab.processes as processes

    long_dir = tmp_path / ("t" * processes.SOCKET_PATH_MAX)
    long_dir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long_dir))
    monkeypatch.setattr(processes, "SHORT_TEMP_DIRS", ())
    log_dir = tmp_path / "runs"
    assert run_train("training.run.device=cpu", f"training.run.log_dir={log_dir}") == 2
    err = capsys.readouterr().err
    assert f"TMPDIR={long_dir}: too long for the Unix sockets" in err and "set TMPDIR to a shorter directory" in err
    assert "Traceback" not in err and not log_dir.exists() and spies[0].calls == []


@pytest.mark.parametrize("content, needle", [
    (None, "file not found"),
    (b"not a zip archive", "not an npz archive"),
    ({"fps": 50.0}, "field 'body_names': missing"),
])
def test_bad_motion_file_fails_at_compose(tmp_path, spies, capsys, content, needle):
    import numpy as np

    clip = tmp_path / "clip.npz"
    if isinstance(content, bytes):
        clip.write_bytes(content)
    elif content is not None:
        np.savez(clip, **content)
    log_dir = tmp_path / "runs"
    code = run_train("--task", "g1_motion_tracking", "training.run.device=cpu", f"task.motion_file={clip}",
                     f"training.run.log_dir={log_dir}")
    err = capsys.readouterr().err
    assert code == 2 and f"task.motion_file='{clip}': expected a G1 motion clip" in err and needle in err
    assert not log_dir.exists() and spies[0].calls == []


def test_a_valid_motion_file_composes(tmp_path, spies):
    from unilab.motion.default_clip import default_clip_path

    log_dir = tmp_path / "runs"
    assert run_train("--task", "g1_motion_tracking", "training.run.device=cpu", f"task.motion_file={default_clip_path()}",
                     f"training.run.log_dir={log_dir}") == 0
    assert len(run_dirs(log_dir)) == 1


def _clip_file(path, duration: float, fps: float = 50.0, stored_fps: float | None = None):
    """A synthesised clip of `duration` s at `fps`, its stored frame rate replaced by `stored_fps` where given."""
    import numpy as np

    from unilab.motion.synth import synthesize

    fields = synthesize(duration=duration, fps=fps).to_npz_dict()
    if stored_fps is not None:
        fields["fps"] = np.asarray(stored_fps)
    np.savez(path, **fields)
    return path


@pytest.mark.parametrize("entry", ["run", "cfg job", "sweep"])
def test_a_clip_with_an_absurd_frame_rate_is_refused_by_every_entry_point(tmp_path, spies, capsys, entry):
    """fps=1e12 once ran to exit 0 with episodes one step long: now exit 2 naming the field and its range, for a run,
    `train --cfg job` and each job of `train -m`, nothing created."""
    clip = _clip_file(tmp_path / "fast.npz", 2.0, stored_fps=1e12)
    good = _clip_file(tmp_path / "good.npz", 2.0)
    log_dir = tmp_path / "runs"
    args = ["--task", "g1_motion_tracking", "training.run.device=cpu", f"training.run.log_dir={log_dir}"]
    if entry == "sweep":
        args = ["-m", *args, f"task.motion_file={good},{clip}"]
    else:
        args = [*(["--cfg", "job"] if entry == "cfg job" else []), *args, f"task.motion_file={clip}"]
    assert run_train(*args) == 2
    err = capsys.readouterr().err
    assert "field 'fps': 1e+12: expected frames per second in [1, 1000]" in err and "Traceback" not in err
    assert not log_dir.exists() and spies[0].calls == []


@pytest.mark.parametrize("decimation, code", [(4, 2), (1, 0)])
def test_a_clip_must_last_a_few_control_steps(tmp_path, spies, capsys, decimation, code):
    """Three frames at 50 fps (0.04 s) are 2 control steps of 0.02 s (sim.decimation=4): refused, naming the clip; at
    sim.decimation=1 (0.005 s) the same clip lasts 8 control steps and is accepted: the check reads the control step."""
    clip = _clip_file(tmp_path / "short.npz", 0.04)
    log_dir = tmp_path / "runs"
    assert run_train("--task", "g1_motion_tracking", "training.run.device=cpu", f"task.motion_file={clip}",
                     f"sim.decimation={decimation}", f"training.run.log_dir={log_dir}") == code
    if code:
        err = capsys.readouterr().err
        assert "clips of at least 5 control steps of 0.02 s = 0.1 s" in err and "'short' lasts 0.04 s" in err
        assert not log_dir.exists() and spies[0].calls == []
    else:
        assert len(run_dirs(log_dir)) == 1


@pytest.mark.parametrize("override", ["+training.some_typo=1", "+algo.some_typo=1", "+task.rewards.some_typo=1"])
def test_an_appended_key_the_schema_lacks_is_refused(tmp_path, spies, capsys, override):
    """`+key=value` adds a key past Hydra's check: refused like the override without `+`."""
    log_dir = tmp_path / "runs"
    assert run_train("training.run.device=cpu", override, f"training.run.log_dir={log_dir}") == 2
    err = capsys.readouterr().err
    key = override[1:].partition("=")[0]
    assert f"{key}: no such key" in err and "Traceback" not in err
    assert not log_dir.exists() and spies[0].calls == []


def test_the_unknown_key_message_does_not_recommend_appending(tmp_path, spies, capsys):
    log_dir = tmp_path / "runs"
    assert run_train("training.some_typo=1", f"training.run.log_dir={log_dir}") == 2
    err = capsys.readouterr().err
    assert "some_typo" in err and "+training.some_typo" not in err and "append" not in err


@pytest.mark.parametrize("override", ["training.learner_device=cuda:1", "training.collector_device=cuda:1"])
def test_per_role_devices_are_not_keys(tmp_path, spies, capsys, override):
    """Both roles of a rank run on training.run.device: a per-role device, which the probe and the manifest
    recorded but the launcher never used, is refused."""
    log_dir = tmp_path / "runs"
    assert run_train("training.run.device=cpu", override, f"training.run.log_dir={log_dir}") == 2
    assert override.partition("=")[0] in capsys.readouterr().err
    assert not log_dir.exists() and spies[0].calls == []


def test_manifest_devices_are_the_placement(tmp_path, spies):
    log_dir = tmp_path / "runs"
    assert run_train("training.run.device=cpu", f"training.run.log_dir={log_dir}") == 0
    (run,) = run_dirs(log_dir)
    sharing = json.loads((run / "runtime_manifest.json").read_text())["cuda_process_sharing"]
    assert sharing["learner_device"] == sharing["collector_device"] == "cpu"
    (prepared, _cfg), _ = spies[0].calls[0]
    assert prepared.rank_devices == ["cpu"]
    assert "learner_device" not in prepared.config.values["training"]
    assert "collector_device" not in prepared.config.values["training"]


@pytest.mark.parametrize("where", ["file", "under_a_file", "read_only"])
def test_unusable_log_dir_fails_before_the_run(tmp_path, spies, capsys, monkeypatch, where):
    """A log_dir that is a file (or under one) or cannot be written: exit 2 naming it, no traceback."""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    log_dir = {"file": blocker, "under_a_file": blocker / "runs", "read_only": tmp_path / "ro"}[where]
    if where == "read_only":  # chmod does not stop root: the file system's answer, as a read-only mount gives it
        log_dir.mkdir()
        real_mkdir = Path.mkdir

        def mkdir(self, *args, **kwargs):
            if self.parent == log_dir:
                raise PermissionError(13, "Permission denied", str(self))
            return real_mkdir(self, *args, **kwargs)

        monkeypatch.setattr(Path, "mkdir", mkdir)
    assert run_train("training.run.device=cpu", f"training.run.log_dir={log_dir}", "training.run.run_name=r") == 2
    err = capsys.readouterr().err
    assert f"training.run.log_dir={log_dir}" in err and "Traceback" not in err
    assert ("Permission denied" if where == "read_only" else "Not a directory") in err
    assert spies[0].calls == []


# ---------------------------------------------------------------- resume: checked before the run dir is touched

@pytest.fixture
def resumable(tmp_path, spies):
    """A (spied) cpu run with checkpoints at iterations 10 and 20 and 20 metrics rows."""
    from unilab.rundir.checkpoint import save_checkpoint

    log_dir = tmp_path / "runs"
    assert run_train("+preset=cpu_smoke", f"training.run.log_dir={log_dir}", "training.run.run_name=r") == 0
    run = log_dir / "r"
    for iteration in (10, 20):
        save_checkpoint(run, iteration, 16 * iteration, {})
    (run / "metrics.jsonl").write_text("".join(json.dumps({"iteration": i}) + "\n" for i in range(20)))
    spies[0].calls.clear()
    return run, spies[0]


def resume(run, *args) -> int:
    return run_train("+preset=cpu_smoke", f"training.run.log_dir={run.parent}", f"training.run.resume={run}", *args)


def untouched(run) -> bool:
    return not (run / "segments").exists()


def test_both_roles_start_at_the_resumed_iteration(resumable):
    """The resume point is read once and handed to both roles: the learner's restore and metrics, and the
    collector's clip numbering (videos/iter_N), start at the checkpoint's iteration, not at 0."""
    from unilab.launcher.launch import _role_spec
    from unilab.world import ONE_RANK

    run, launcher = resumable
    assert resume(run) == 0
    ((prepared, _cfg), _kwargs) = launcher.calls[0]
    spec = _role_spec(prepared, "cpu", ONE_RANK)
    assert spec.resume.iteration == 20 and spec.start_iteration == 20
    assert spec.resume.checkpoint.endswith("iter_0000020.pt")
    assert spec.training.run.seed == prepared.config.training.run.seed and spec.task.num_envs == prepared.config.task.num_envs


def test_resume_tolerates_a_torn_last_metrics_line(resumable, capsys):
    run, launcher = resumable
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"iteration": 20, "env_st')
    assert resume(run) == 0
    assert (run / "segments" / "0" / "run_config.json").exists() and len(launcher.calls) == 1
    # the torn row is one the resume from iteration 20 redoes: nothing is lost, nothing said
    assert "lost" not in capsys.readouterr().err
    ((prepared, _cfg), _kwargs) = launcher.calls[0]
    assert prepared.notes == []


@pytest.mark.parametrize("metrics, lost", [
    ("".join(json.dumps({"iteration": i}) + "\n" for i in range(18)) + '{"iteration": 18, "env_st',
     "metrics.jsonl: rows of iterations 18-19 lost (torn last line)"),
    (None, "metrics.jsonl: rows of iterations 0-19 lost (the file is missing)"),
    ("".join(json.dumps({"iteration": i}) + "\n" for i in range(19)),
     "metrics.jsonl: row of iteration 19 lost (not written before the run ended)"),
])
def test_a_resume_names_the_metric_rows_it_finds_lost(resumable, capsys, metrics, lost):
    """Rows before the checkpoint's iteration that are gone stay gone (the resume redoes only those after it):
    one note names them, on the console and in run_summary.json's notes."""
    run, launcher = resumable
    if metrics is None:
        (run / "metrics.jsonl").unlink()
    else:
        (run / "metrics.jsonl").write_text(metrics)
    assert resume(run) == 0
    note = f"{lost}; resuming from checkpoint iter_0000020.pt"
    assert capsys.readouterr().err.count(f"unilab: note: {note}") == 1
    ((prepared, _cfg), _kwargs) = launcher.calls[0]
    assert prepared.notes == [note]


def test_resume_refuses_unreadable_metrics_before_touching_the_run_dir(resumable, capsys):
    run, launcher = resumable
    (run / "metrics.jsonl").write_text('{"iteration": 0}\nnot json\n{"iteration": 2}\n')
    assert resume(run) == 2
    assert "metrics.jsonl:2: not a metrics row" in capsys.readouterr().err
    assert untouched(run) and not launcher.calls


def test_resume_with_another_network_or_algo_names_the_differing_keys(resumable, capsys):
    run, launcher = resumable
    assert resume(run, "algo.critic_hidden_dim=64") == 2
    assert "algo.critic_hidden_dim: checkpoint 128, now 64" in capsys.readouterr().err
    assert resume(run, "--algo", "flashsac") == 2
    assert "algo.name: checkpoint fastsac, now flashsac" in capsys.readouterr().err
    assert untouched(run) and not launcher.calls


def test_resume_refuses_max_iterations_at_or_below_the_checkpoint(resumable, capsys):
    run, launcher = resumable
    assert resume(run, "algo.max_iterations=20") == 2
    assert "algo.max_iterations=20 but iter_0000020.pt is at iteration 20" in capsys.readouterr().err
    assert untouched(run) and not launcher.calls


def test_resume_falls_back_from_a_corrupt_latest_checkpoint(resumable, capsys):
    run, launcher = resumable
    newest = run / "checkpoints" / "iter_0000020.pt"
    newest.write_bytes(newest.read_bytes()[:64])
    assert resume(run) == 0
    ((prepared, _cfg), _kwargs) = launcher.calls[0]
    assert prepared.resume.checkpoint == str(run / "checkpoints" / "iter_0000010.pt") and prepared.resume.iteration == 10
    assert "resuming from iter_0000010.pt instead" in capsys.readouterr().err
    assert any("iter_0000010.pt instead" in note for note in prepared.notes)  # for run_summary.json


def test_resume_refuses_a_checkpoint_that_does_not_fit_the_learner_leaving_the_run_dir_as_it_was(resumable, capsys):
    """The check of play, eval and export (the learner state loads into this config's learner), run before the
    run directory is touched: not a segment archived and a failed run, then the learner's KeyError."""
    import dataclasses

    from unilab.algos.base import make_learner
    from unilab.registry import instantiate
    from unilab.rundir.checkpoint import save_checkpoint
    from unilab.rundir.run_config import load_run_config

    run, launcher = resumable
    sizes = {"obs_dim": 98, "critic_obs_dim": 106, "action_dim": 29}
    algo = dataclasses.replace(instantiate("algo", load_run_config(run)["algo"]), replay_capacity=1)
    whole = make_learner(algo, *sizes.values(), "cpu", 0).state_dict()
    save_checkpoint(run, 30, 480, {k: v for k, v in whole.items() if k != "actor"}, meta={"dims": sizes})
    before = tree_digest(run, contents_of_lock=False)
    assert resume(run) == 2
    err = capsys.readouterr().err
    assert "iter_0000030.pt: does not fit this run's fastsac learner for g1_walk_flat ('actor')" in err, err
    assert "Traceback" not in err and not launcher.calls
    assert tree_digest(run, contents_of_lock=False) == before
    save_checkpoint(run, 30, 480, whole, meta={"dims": sizes})  # the whole state fits: the resume goes ahead
    assert resume(run) == 0 and len(launcher.calls) == 1


def test_a_resume_removes_what_saves_cut_short_left(resumable, capsys):
    run, launcher = resumable
    folder = run / "checkpoints"
    (folder / "iter_0000030.tmp").write_bytes(b"the first bytes of a checkpoint")  # killed mid-save
    (folder / "latest.pt.tmp").symlink_to("iter_0000030.pt")  # killed between the link and its rename
    kept = sorted(p.name for p in folder.iterdir() if p.suffix != ".tmp")
    assert resume(run, "algo.max_iterations=20") == 2  # a refused resume touches nothing
    assert (folder / "iter_0000030.tmp").exists()
    capsys.readouterr()
    assert resume(run) == 0
    note = "removed iter_0000030.tmp, latest.pt.tmp from checkpoints/: left by a save that was cut short"
    assert f"unilab: note: {note}" in capsys.readouterr().err
    assert sorted(p.name for p in folder.iterdir()) == kept
    ((prepared, _cfg), _kwargs) = launcher.calls[0]
    assert note in prepared.notes  # for run_summary.json


def test_a_run_dir_in_use_is_refused_naming_the_holder(resumable, capsys):
    from unilab.rundir.lock import RunDirLock

    run, launcher = resumable
    held = RunDirLock(run)  # as a launcher still training there holds it
    try:
        assert resume(run) == 2
    finally:
        held.release()
    assert f"in use by pid {os.getpid()}" in capsys.readouterr().err
    assert untouched(run) and not launcher.calls
    assert resume(run) == 0  # released: the resume goes ahead


TIMEOUT_KEYS = ["mps.mps_probe_timeout_s", "mps.mps_attach_timeout_s", "loop.stall_timeout_s", "loop.startup_timeout_s",
                "loop.dist_timeout_s"]
TIMEOUTS_REFUSED = ["inf", "nan", "0", "-1", "1e308", "604801"]
TIMEOUT_RANGE = "expected a number in (0, 604800] (seconds, at most a week)"


@pytest.mark.parametrize("key", TIMEOUT_KEYS)
@pytest.mark.parametrize("value", TIMEOUTS_REFUSED)
def test_timeouts_are_range_checked(key, value):
    """An infinite timeout waits for ever, zero or less never waits, one past a week is no timeout anyone means
    (and Python's waits refuse those past threading.TIMEOUT_MAX)."""
    message = refusal(f"training.{key}={value}")
    assert message is not None and f"training.{key}=" in message and TIMEOUT_RANGE in message, message


@pytest.mark.parametrize("key, value", [(key, "inf") for key in TIMEOUT_KEYS]
                         + [("loop.stall_timeout_s", value) for value in TIMEOUTS_REFUSED if value != "inf"])
def test_timeouts_are_range_checked_at_compose(tmp_path, spies, capsys, key, value):
    """`train` refuses them with exit 2 before anything exists: every key once, every value once."""
    log_dir = tmp_path / "runs"
    assert run_train(f"training.{key}={value}", f"training.run.log_dir={log_dir}") == 2
    err = capsys.readouterr().err
    assert f"training.{key}=" in err and TIMEOUT_RANGE in err, err
    assert "Traceback" not in err and not log_dir.exists() and spies[0].calls == []


# ---------------------------------------------------------------- evidence: what produced the run

def test_the_manifest_records_the_source_and_the_versions(tmp_path):
    """The real entry point in a fresh interpreter (only the process launch stubbed): the git commit and dirty flag
    of this checkout, the library versions from the package metadata, torch's CUDA version; torch and Warp still
    never imported by the launcher."""
    import importlib.metadata

    log_dir = tmp_path / "runs"
    script = (
        "import sys\n"
        "import unilab.launcher.launch as launch\n"
        "launch.launch = lambda prepared, cfg: 0\n"
        "from unilab.cli.train import main\n"
        "main(sys.argv[1:])\n"
        "print('RESULT', *(m in sys.modules for m in ('torch', 'warp', 'mujoco_warp')))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, "training.run.device=cpu", f"training.run.log_dir={log_dir}",
                           "training.run.run_name=r"], capture_output=True, text=True, timeout=120)
    assert "RESULT False False False" in done.stdout, done.stdout + done.stderr
    manifest = json.loads((log_dir / "r" / "runtime_manifest.json").read_text())
    root = Path(__file__).resolve().parents[1]
    top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if top.returncode == 0 and Path(top.stdout.strip()).resolve() == root:  # a checkout of unilab (not a copy)
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
        assert manifest["source"]["git_commit"] == head.stdout.strip()
        assert isinstance(manifest["source"]["git_dirty"], bool)
    versions = manifest["versions"]
    for key, dist in (("torch", "torch"), ("warp", "warp-lang"), ("mujoco", "mujoco"), ("mujoco_warp", "mujoco-warp")):
        assert versions[key] == importlib.metadata.version(dist)
    import torch

    assert versions["cuda"] == torch.version.cuda
    assert versions["nvidia_driver"] is None or versions["nvidia_driver"][0].isdigit()
    assert manifest["schema_version"] == 3


@pytest.mark.parametrize("args, said", [
    (("--task", "g1_walk"), "task=g1_walk: no such task; did you mean g1_walk_flat? choose one of: g1_motion_tracking, "
                            "g1_walk_flat"),
    (("--algo", "fastsak"), "algo=fastsak: no such algo; did you mean fastsac"),
    (("task.num_env=8",), "task.num_env: no such key in task; did you mean num_envs"),
    (("training.seeed=3",), "training.seeed: no such key in training; did you mean run.seed?"),
    (("+task.num_env=8",), "task.num_env: no such key in task; did you mean num_envs"),
    (("+num_env=8",), "num_env: no such key at the top level of the config; did you mean task.num_envs"),
    (("+seed=3",), "seed: no such key at the top level of the config; did you mean training.run.seed?"),
    (("seed=3",), "seed: no such key at the top level of the config; did you mean training.run.seed?"),
    (("Mjlab-Velocity-Flat-Unitree-G1",), "Mjlab-Velocity-Flat-Unitree-G1: not a key=value override. Tasks are chosen "
                                          "with --task NAME (available: g1_motion_tracking, g1_walk_flat)"),
])
def test_common_slips_get_a_suggestion_in_unilab_terms(tmp_path, capsys, args, said):
    """A typo or an mjlab habit gets the nearest choice or key, from the registry and the schema; no Hydra
    internals (schema nodes, the config search path, the override grammar) reach the user."""
    log_dir = tmp_path / "runs"
    assert run_train(*args, "training.run.device=cpu", f"training.run.log_dir={log_dir}") == 2
    err = capsys.readouterr().err
    assert said in err, err
    for internal in ("_schema", "search path", "provider=", "EQUAL", "hydra.cc"):
        assert internal not in err, (internal, err)
    assert not log_dir.exists()


def test_a_config_is_shown_on_a_host_without_a_gpu(tmp_path, monkeypatch, capsys):
    """`train --cfg job` needs no GPU: it prints the config and notes that a run would refuse training.run.device=cuda:0
    here; the run itself still exits 2 before anything exists, and +execution=mps still fails in its probe."""
    import unilab.mps.host as host_mod
    from fakes import FakeNvml

    monkeypatch.setattr(host_mod, "SystemNvml", lambda: FakeNvml(available=False))
    log_dir = tmp_path / "runs"
    assert run_train("--cfg", "job", f"training.run.log_dir={log_dir}") == 0
    out, err = capsys.readouterr()
    assert "device: cuda:0" in out and "a run would refuse this config: training.run.device=cuda:0" in err
    assert run_train(f"training.run.log_dir={log_dir}") == 2
    assert "no NVIDIA GPU can be used here" in capsys.readouterr().err and not log_dir.exists()
    assert run_train("--cfg", "job", "+execution=mps", f"training.run.log_dir={log_dir}") == 2
    assert "cannot be honoured" in capsys.readouterr().err


def test_no_git_and_no_driver_record_none_and_the_run_goes_ahead(tmp_path, spies, monkeypatch):
    import unilab.mps.nvml as nvml

    def no_driver(self):
        raise nvml.NvmlUnavailable("NVML Shared Library Not Found (fake)")

    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))
    monkeypatch.setattr(nvml.SystemNvml, "driver_version", no_driver)
    log_dir = tmp_path / "runs"
    assert run_train("training.run.device=cpu", f"training.run.log_dir={log_dir}") == 0
    (run,) = run_dirs(log_dir)
    manifest = json.loads((run / "runtime_manifest.json").read_text())
    assert manifest["source"] == {"git_commit": None, "git_dirty": None}
    assert manifest["versions"]["nvidia_driver"] is None and manifest["versions"]["torch"]


def test_an_installed_copy_inside_another_repository_records_no_commit(tmp_path):
    """unilab installed in a virtual environment inside some project's checkout: that project's commit is not
    unilab's."""
    from unilab.rundir.provenance import source_evidence

    project = tmp_path / "project"
    site = project / ".venv" / "site-packages"
    (site / "unilab").mkdir(parents=True)
    if subprocess.run(["git", "init", "-q", str(project)], capture_output=True).returncode != 0:
        pytest.skip("git is not usable here")
    assert source_evidence(site).git_commit is None
    assert source_evidence(tmp_path / "not-a-checkout").git_commit is None


def test_the_manifest_schema_lists_source_and_versions(capsys):
    assert tools_main(["manifest", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert {"source", "versions"} <= set(schema["properties"])
    assert set(schema["$defs"]["SourceEvidence"]["properties"]) == {"git_commit", "git_dirty"}
    assert set(schema["$defs"]["VersionEvidence"]["properties"]) == {"torch", "warp", "mujoco", "mujoco_warp", "cuda",
                                                                      "nvidia_driver"}


# ---------------------------------------------------------------- CLI habits

def test_short_form_value_flags(tmp_path, spies):
    log_dir = tmp_path / "runs"
    assert run_train("--num-envs", "8", "--seed=-3", "--max-iterations", "7", "--device", "cpu", "--run-name", "walk",
                     f"training.run.log_dir={log_dir}") == 0
    config = json.loads((log_dir / "walk" / "run_config.json").read_text())
    assert config["task"]["num_envs"] == 8 and config["training"]["run"]["seed"] == -3
    assert config["algo"]["max_iterations"] == 7 and config["training"]["run"]["device"] == "cpu"
    assert config["training"]["run"]["run_name"] == "walk"


@pytest.mark.parametrize("args, needle", [
    (["--seed", "1", "training.run.seed=2"], "'training.run.seed' is chosen twice"),
    (["--num-envs"], "--num-envs needs a value"),
    (["--device", "--seed", "1"], "--device needs a value"),
    (["--algo", "flashsac_schema"], "flashsac_schema holds the defaults"),
    (["--task=g1_walk_flat_schema"], "choose one of: g1_motion_tracking, g1_walk_flat"),
    (["-m", "algo=fastsac,fastsac_schema"], "fastsac_schema holds the defaults"),
    (["--sim", "mjwarp_schema"], "choose one of: mjwarp"),
])
def test_short_form_refusals(tmp_path, spies, capsys, args, needle):
    log_dir = tmp_path / "runs"
    assert run_train(*args, "training.run.device=cpu" if "--device" not in args else "x=1",
                     f"training.run.log_dir={log_dir}") == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not log_dir.exists() and spies[0].calls == []


def test_train_help_shows_the_short_form_and_no_schema_nodes():
    """`train --help` as a user runs it (a fresh interpreter)."""
    done = subprocess.run([sys.executable, "-m", "unilab.cli.train", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for flag, key in (("--algo NAME", "algo=NAME"), ("--num-envs N", "task.num_envs=N"), ("--seed N", "training.run.seed=N"),
                      ("--max-iterations N", "algo.max_iterations=N"), ("--device DEV", "training.run.device=DEV"),
                      ("--run-name NAME", "training.run.run_name=NAME")):
        assert re.search(rf"{re.escape(flag)}\s+{re.escape(key)}", out), flag
    assert re.search(r"algo\s+fastsac, flashsac,", out) and "preset     cpu_smoke" in out
    assert "_schema" not in out


def test_unilab_version_and_list(capsys):
    from unilab import __version__

    with pytest.raises(SystemExit) as exc:
        tools_main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"unilab {__version__}"
    done = subprocess.run([sys.executable, "-m", "unilab.cli.tools", "list"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "_schema" not in done.stdout
    for line in ("algo:", "  fastsac ", "  flashsac_g1_walk_flat ", "task:", "  g1_walk_flat ", "preset:", "  cpu_smoke ",
                 "execution:", "  mps "):
        assert line in done.stdout, line
    assert tools_main(["list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in listed["task"]] == ["g1_motion_tracking", "g1_walk_flat"]
    assert "sac" in [m["name"] for m in listed["algo"]] and listed["preset"][0]["name"] == "cpu_smoke"


# ---------------------------------------------------------------- sweeps (`train -m`)

class CodeSpy(Spy):
    """A launcher returning the next of `codes` per job (the run directory recorded)."""

    def __init__(self, codes):
        super().__init__()
        self.codes = list(codes)

    def __call__(self, prepared, cfg):
        self.calls.append(prepared.run_dir)
        return self.codes.pop(0)


@pytest.fixture
def sweep_launcher(monkeypatch):
    import unilab.launcher.launch as launch_mod

    def install(*codes):
        spy = CodeSpy(codes)
        monkeypatch.setattr(launch_mod, "launch", spy)
        return spy

    return install




def test_a_sweep_with_a_refused_job_launches_none(tmp_path, sweep_launcher, capsys):
    """Every job is validated before the first is launched: one refused job refuses the sweep (exit 2), names
    the job and its error, and creates nothing."""
    log_dir = tmp_path / "runs"
    spy = sweep_launcher(0, 0)
    code = run_train("-m", "training.run.device=cpu", "task.num_envs=8,0,4", f"training.run.log_dir={log_dir}")
    assert code == 2 and spy.calls == []
    err = capsys.readouterr().err
    assert "job #1 (task.num_envs=0) refused" in err and "task.num_envs=0: expected an integer >= 1" in err
    assert "1 of 3 job(s) refused; no job was launched" in err
    assert not log_dir.exists()


def test_sweep_runs_every_job_and_exits_with_the_worst(tmp_path, sweep_launcher, capsys, monkeypatch):
    """A run that fails (exit 1) and a job refused at its own start (the host changed after every job was
    checked) do not stop the sweep."""
    import unilab.config as config_pkg

    real, calls = config_pkg.validate, []

    def validate(cfg):  # the check pass validates jobs 0-2, then each job again at its start
        calls.append(int(cfg.task.num_envs))
        if len(calls) == 5:
            raise config_pkg.ConfigError("the host changed")
        return real(cfg)

    monkeypatch.setattr(config_pkg, "validate", validate)
    log_dir = tmp_path / "runs"
    spy = sweep_launcher(1, 0)
    code = run_train("-m", "training.run.device=cpu", "task.num_envs=8,6,4", f"training.run.log_dir={log_dir}")
    assert code == 2
    assert calls == [8, 6, 4, 8, 6, 4] and len(spy.calls) == 2  # num_envs=6 was refused at its start
    err = capsys.readouterr().err
    assert "the host changed" in err
    summary = err[err.index("unilab: sweep done"):]
    assert "1 failed" in summary and "1 refused" in summary and "1 completed" in summary
    lines = summary.splitlines()[1:]
    assert lines[0].startswith("  #0 task.num_envs=8 -> failed, ") and lines[0].endswith(spy.calls[0].name)
    assert lines[1] == "  #1 task.num_envs=6 -> refused, no run directory"
    assert lines[2].startswith("  #2 task.num_envs=4 -> completed, ")


def test_sweep_exit_status_is_a_failed_runs_when_no_job_was_refused(tmp_path, sweep_launcher, capsys):
    spy = sweep_launcher(1, 0)
    assert run_train("-m", "training.run.device=cpu", "training.run.seed=1,2", f"training.run.log_dir={tmp_path}") == 1
    assert len(spy.calls) == 2
    spy = sweep_launcher(0, 0)
    assert run_train("-m", "training.run.device=cpu", "training.run.seed=1,2", f"training.run.log_dir={tmp_path}") == 0


def test_an_interrupted_job_stops_the_sweep(tmp_path, sweep_launcher, capsys):
    spy = sweep_launcher(1, 130, 0)
    assert run_train("-m", "training.run.device=cpu", "training.run.seed=1,2,3", f"training.run.log_dir={tmp_path}") == 130
    assert len(spy.calls) == 2  # the third job never started
    err = capsys.readouterr().err
    assert "unilab: sweep interrupted: 1 failed, 1 interrupted" in err and "#2" not in err


def test_ctrl_c_outside_a_run_stops_the_sweep(tmp_path, sweep_launcher, capsys, monkeypatch):
    """SIGINT while a job is being prepared (no supervisor yet): KeyboardInterrupt ends the sweep with 130."""
    import unilab.launcher.prepare as prepare_mod

    real, seen = prepare_mod.prepare_run, []

    def prepare(request, **kw):
        seen.append(request.config.training.run.seed)
        if len(seen) == 2:
            raise KeyboardInterrupt
        return real(request, **kw)

    monkeypatch.setattr(prepare_mod, "prepare_run", prepare)
    spy = sweep_launcher(0, 0, 0)
    assert run_train("-m", "training.run.device=cpu", "training.run.seed=1,2,3", f"training.run.log_dir={tmp_path}") == 130
    assert seen == [1, 2] and len(spy.calls) == 1


def test_sweep_run_names_carry_the_swept_values(tmp_path, sweep_launcher, capsys):
    log_dir = tmp_path / "runs"
    sweep_launcher(0, 0, 0, 0)
    assert run_train("-m", "training.run.device=cpu", "+execution=default", "task.num_envs=4,8", "training.run.seed=1,2",
                     f"training.run.log_dir={log_dir}") == 0
    names = sorted(p.name for p in run_dirs(log_dir))
    assert len(names) == 4
    assert sorted(n.split("_g1_walk_flat_")[1] for n in names) == [
        "num_envs-4_seed-1", "num_envs-4_seed-2", "num_envs-8_seed-1", "num_envs-8_seed-2"]
    # a given run_name is left alone (a second job with the same name gets _1, as before)
    sweep_launcher(0, 0)
    assert run_train("-m", "training.run.device=cpu", "training.run.seed=1,2", "training.run.run_name=mine",
                     f"training.run.log_dir={tmp_path / 'named'}") == 0
    assert sorted(p.name for p in run_dirs(tmp_path / "named")) == ["mine", "mine_1"]


def test_single_runs_keep_the_plain_name(tmp_path, spies):
    assert run_train("training.run.device=cpu", "training.run.seed=3", f"training.run.log_dir={tmp_path}") == 0
    (run,) = run_dirs(tmp_path)
    assert run.name.endswith("_fastsac_g1_walk_flat")


def test_the_gate_sweep_names_its_runs_by_mode_and_seed(tmp_path, sweep_launcher, fake_host, daemon):
    """Sweeps from the config (+bench=offpolicy_gate's training.run.seed: 1,2) are swept values too."""
    log_dir = tmp_path / "runs"
    sweep_launcher(0, 0, 0, 0)
    assert run_train("-m", "+execution=default,mps", "+bench=offpolicy_gate", f"training.run.log_dir={log_dir}") == 0
    suffixes = sorted(p.name.split("_g1_walk_flat_")[1] for p in run_dirs(log_dir))
    assert suffixes == ["seed-1_execution-default", "seed-1_execution-mps", "seed-2_execution-default",
                        "seed-2_execution-mps"]


def test_dry_run_lists_the_jobs_and_creates_nothing(tmp_path, spies, capsys, fake_host, daemon):
    log_dir = tmp_path / "runs"
    assert run_train("-m", "+execution=default,mps", "+bench=offpolicy_gate", "training.run.device=cuda:0",
                     f"training.run.log_dir={log_dir}", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "4 job(s) would run" in out
    jobs = [line for line in out.splitlines() if line.startswith("  #")]
    assert len(jobs) == 4 and not any("refused" in job for job in jobs)
    assert "+execution=mps" in jobs[3] and "training.run.seed=2" in jobs[3]
    assert not log_dir.exists() and spies[0].calls == []
    assert run_train("--dry-run", "training.run.device=cpu") == 2
    assert "train -m ... --dry-run" in capsys.readouterr().err


def test_dry_run_validates_every_job(tmp_path, spies, capsys):
    """A job the host cannot honour (MPS with a CPU learner) is marked in the list; exit 2, nothing created."""
    log_dir = tmp_path / "runs"
    assert run_train("-m", "+execution=default,mps", "training.run.device=cpu", f"training.run.log_dir={log_dir}",
                     "--dry-run") == 2
    captured = capsys.readouterr()
    jobs = [line for line in captured.out.splitlines() if line.startswith("  #")]
    assert [job.endswith("-> refused") for job in jobs] == [False, True]
    assert "learner_cuda" in captured.err and "no job was launched" in captured.err
    assert not log_dir.exists() and spies[0].calls == []


@pytest.mark.integration
def test_a_real_sweep_with_a_failing_run_runs_the_other_job(tmp_path):
    """`train -m` end to end on the CPU: job 0's run fails (start-up past its 1 ms timeout), job 1 still trains;
    the exit status is the failed run's (1) and the summary names both run directories."""
    log_dir = tmp_path / "runs"
    done = subprocess.run(
        [sys.executable, "-m", "unilab.cli.train", "-m", "+preset=cpu_smoke", "training.loop.startup_timeout_s=0.001,900",
         "task.num_envs=8", "algo.max_iterations=4", "training.outputs.logger=[]", "training.outputs.no_play=true",
         f"training.run.log_dir={log_dir}"],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(tmp_path / "none")),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    failed, completed = run_dirs(log_dir)
    assert failed.name.endswith("_startup_timeout_s-0.001") and completed.name.endswith("_startup_timeout_s-900")
    statuses = [json.loads((r / "run_summary.json").read_text())["status"] for r in (failed, completed)]
    assert statuses == ["failed", "completed"]
    summary = done.stderr[done.stderr.index("unilab: sweep done: 1 failed, 1 completed"):].splitlines()
    assert summary[1] == f"  #0 training.loop.startup_timeout_s=0.001 -> failed, {failed}"
    assert summary[2] == f"  #1 training.loop.startup_timeout_s=900 -> completed, {completed}"


@pytest.mark.integration
def test_ctrl_c_stops_a_real_sweep(tmp_path):
    """SIGINT to the sweep's process group (Ctrl-C) during job 0's run: the run stops as interrupted, job 1 never
    starts, exit status 130."""
    log_dir = tmp_path / "runs"
    code, err = interrupt_real_sweep(["+preset=cpu_smoke", "training.run.seed=1,2", "task.num_envs=8",
                                      "algo.max_iterations=100000", "training.outputs.logger=[]", "training.outputs.no_play=true"],
                                     log_dir, tmp_path)
    assert code == 130, err[-4000:]
    (run,) = run_dirs(log_dir)
    assert json.loads((run / "run_summary.json").read_text())["status"] == "interrupted"
    assert "unilab: sweep interrupted: 1 interrupted" in err and f"#0 training.run.seed=1 -> interrupted, {run}" in err
    assert "#1" not in err


def test_plain_overrides_of_one_key_keep_hydras_last_wins():
    """Only a value flag's key set again is refused; two plain overrides of it stay Hydra's business."""
    from unilab.cli.short_form import UsageError, expand_short_form

    assert expand_short_form(["task.num_envs=16", "task.num_envs=8"]) == ["task.num_envs=16", "task.num_envs=8"]
    for args in (["--num-envs", "8", "task.num_envs=16"], ["task.num_envs=16", "--num-envs", "8"],
                 ["--algo", "fastsac", "algo=flashsac"]):
        with pytest.raises(UsageError, match="chosen twice"):
            expand_short_form(args)


def test_symmetry_needs_a_task_with_a_mirror(tmp_path, spies, capsys):
    """algo.symmetry on a task without a left-right mirror: exit 2 before anything exists; on the walk it runs."""
    log_dir = tmp_path / "runs"
    code = run_train("algo=fastsac", "task=g1_motion_tracking", "algo.symmetry=true", f"training.run.log_dir={log_dir}")
    assert code == 2 and "algo.symmetry=true: the task g1_motion_tracking has no left-right mirror" in capsys.readouterr().err
    assert run_dirs(log_dir) == [] and spies[0].calls == []
    assert run_train("algo=fastsac", "task=g1_walk_flat", "algo.symmetry=true", "training.run.device=cpu",
                     f"training.run.log_dir={log_dir}") == 0
    (run,) = run_dirs(log_dir)
    assert json.loads((run / "run_config.json").read_text())["algo"]["symmetry"] is True

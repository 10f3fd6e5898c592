"""Every entry point that composes a `train` config fails closed the same way: `train`, `train --cfg job`,
`train -m` (before any job is launched) and Hydra's compose API followed by a resolve."""

from __future__ import annotations

import contextlib
import functools
import io
import math
import os
import subprocess
import sys
import tempfile

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from fakes import GPU_A, FakeNvml
from train_calls import run_train
from train_compose import compose_train
from unilab.config import RequestError, TrainingConfig
from unilab.config.schema import OutputSettings, RunSettings
from unilab.mps import CudaProcessSharingError, Prerequisite

TYPO = "+training.stall_timeot_s=5"


@pytest.fixture
def no_driver(monkeypatch, tmp_path):
    """A host without an NVIDIA driver (NVML fails) and no daemon."""
    import unilab.mps.host as host_mod

    monkeypatch.setattr(host_mod, "SystemNvml", lambda: FakeNvml(available=False))
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "no-daemon"))


# ---------------------------------------------------------------- train --cfg job


def test_cfg_job_refuses_mps_on_a_host_without_a_driver(no_driver, capsys):
    assert run_train("--cfg", "job", "training.run.device=cuda:0", "+execution=mps") == 2
    out, err = capsys.readouterr()
    assert out == ""  # nothing printed as if it would run
    assert "nvml_available" in err and "fix:" in err and "Traceback" not in err


def test_cfg_job_refuses_the_cpu_smoke_preset_under_mps(no_driver, capsys):
    assert run_train("--cfg", "job", "+preset=cpu_smoke", "+execution=mps") == 2
    assert "learner_cuda" in capsys.readouterr().err


def test_cfg_job_refuses_an_appended_typo(capsys):
    assert run_train("--cfg", "job", "+preset=cpu_smoke", TYPO) == 2
    out, err = capsys.readouterr()
    assert out == "" and "training.stall_timeot_s: no such key" in err


@pytest.mark.parametrize("cfg_type", ["hydra", "all"])
def test_cfg_hydra_and_all_are_validated_too(cfg_type, capsys):
    assert run_train("--cfg", cfg_type, "+preset=cpu_smoke", TYPO) == 2
    assert capsys.readouterr().out == ""
    assert run_train("--cfg", cfg_type, "+preset=cpu_smoke") == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert "hydra" in printed


def test_cfg_job_prints_the_evidence_a_valid_mps_request_would_record(fake_host, daemon, capsys):
    assert run_train("--cfg", "job", "training.run.device=cuda:0", "+execution=mps") == 0
    out = capsys.readouterr().out
    printed = yaml.safe_load(out)
    evidence = printed["execution_evidence"]
    assert evidence["configured"] == "mps" and evidence["validated"] is True and evidence["effective"] is None
    assert evidence["gpu_uuid"] == GPU_A.uuid and evidence["control_pipe"] == str(daemon.control)
    assert printed["training"]["mps"]["cuda_process_sharing"] == "mps" and printed["algo"]["name"] == "fastsac"
    assert "# execution_evidence: what runtime_manifest.json records" in out


def test_cfg_job_honours_package_and_resolve(capsys):
    assert run_train("--cfg", "job", "--package", "training", "--resolve", "+preset=cpu_smoke") == 0
    out = capsys.readouterr().out
    assert out.startswith("# @package training\n")
    assert yaml.safe_load(out)["run"]["device"] == "cpu"
    assert run_train("--cfg", "job", "-p", "training.no_such_node", "+preset=cpu_smoke") == 1
    assert "not found" in capsys.readouterr().err


def test_cfg_with_an_unknown_type_is_a_usage_error(capsys):
    assert run_train("--cfg", "jobs") == 2
    assert "expected job, hydra or all" in capsys.readouterr().err


def test_the_console_script_refuses_cfg_job(tmp_path):
    """The issue's own command line, through the installed entry point in a fresh interpreter."""
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(tmp_path / "none"))
    for extra, needle in (("+execution=mps", "learner_cuda"), (TYPO, "stall_timeot_s")):
        done = subprocess.run([sys.executable, "-m", "unilab.cli.train", "--cfg", "job", "+preset=cpu_smoke", extra],
                              capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 2 and needle in done.stderr, done.stdout + done.stderr
        assert done.stdout == ""


# ---------------------------------------------------------------- train -m


def test_a_sweep_with_an_mps_job_the_host_cannot_honour_launches_nothing(tmp_path, spies, no_driver, capsys):
    log_dir = tmp_path / "runs"
    assert run_train("-m", "+execution=default,mps", "training.run.device=cpu", "training.run.seed=1,2",
                     f"training.run.log_dir={log_dir}") == 2
    err = capsys.readouterr().err
    assert "2 of 4 job(s) refused; no job was launched" in err and "learner_cuda" in err
    assert not log_dir.exists() and spies[0].calls == []


def test_a_sweep_with_an_appended_typo_launches_nothing(tmp_path, spies, capsys):
    log_dir = tmp_path / "runs"
    assert run_train("-m", "training.run.device=cpu", "training.run.seed=1,2", TYPO, f"training.run.log_dir={log_dir}") == 2
    assert "training.stall_timeot_s: no such key" in capsys.readouterr().err
    assert not log_dir.exists() and spies[0].calls == []


# ---------------------------------------------------------------- Hydra's compose API


RESOLVES = {
    "to_object": OmegaConf.to_object,
    "resolve": OmegaConf.resolve,
    "to_container": lambda cfg: OmegaConf.to_container(cfg, resolve=True),
    "the node": lambda cfg: cfg.execution_evidence,
}


@pytest.mark.parametrize("how", sorted(RESOLVES))
def test_the_compose_api_raises_the_probe_error_on_resolve(how, no_driver):
    cfg = compose_train(["training.run.device=cuda:0", "+execution=mps"])
    with pytest.raises(RequestError) as raised:
        RESOLVES[how](cfg)
    error = raised.value.error
    assert isinstance(error, CudaProcessSharingError) and error.prerequisite is Prerequisite.NVML
    assert "nvml_available" in str(raised.value) and "fix:" in str(raised.value)


@pytest.mark.parametrize("how", sorted(RESOLVES))
@pytest.mark.parametrize("override, needle", [
    (TYPO, "training.stall_timeot_s: no such key"),
    ("+algo.some_typo=1", "algo.some_typo: no such key"),
    ("+some_typo=1", "some_typo: no such key at the top level"),
    ("task.num_envs=0", "task.num_envs=0: expected an integer >= 1"),
    ("training.loop.stall_timeout_s=inf", "training.loop.stall_timeout_s"),
    ("training.run.device=gpu", "training.run.device='gpu'"),
])
def test_the_compose_api_raises_the_value_error_on_resolve(how, override, needle):
    cfg = compose_train(["+preset=cpu_smoke", override])
    with pytest.raises(RequestError, match=needle.replace("(", r"\(").replace("[", r"\[")):
        RESOLVES[how](cfg)


def test_the_compose_api_resolves_a_valid_request_to_its_evidence(fake_host, daemon):
    cfg = compose_train(["training.run.device=cuda:0", "+execution=mps"])
    obj = OmegaConf.to_object(cfg)
    assert obj.execution_evidence["configured"] == "mps" and obj.execution_evidence["validated"] is True
    assert obj.training.mps.cuda_process_sharing.value == "mps"
    assert OmegaConf.to_object(compose_train(["+preset=cpu_smoke"])).execution_evidence["configured"] is None


def test_a_request_error_is_the_message_train_prints(no_driver, capsys):
    cfg = compose_train(["training.run.device=cuda:0", "+execution=mps"])
    with pytest.raises(RequestError) as raised:
        OmegaConf.to_object(cfg)
    assert run_train("training.run.device=cuda:0", "+execution=mps") == 2
    assert capsys.readouterr().err.strip() == str(raised.value).strip()


# ---------------------------------------------------------------- sizes the simulator or the device cannot hold


def _nconmax(task: str = "g1_walk_flat") -> int:
    from unilab.registry import instantiate
    from unilab.sim.capacity import derive_capacity

    return derive_capacity(instantiate("task", {"name": task}).build_model(), None, None)[0]


@pytest.mark.parametrize("entry", [(), ("--cfg", "job")])
def test_more_envs_than_warp_can_index_are_refused_at_compose(tmp_path, spies, capsys, entry):
    """task.num_envs=1e8 once made a run directory and failed 12 s later in Warp (32-bit array sizes): MJWarp holds
    the contacts of all worlds in one array. Now exit 2, naming the key and the largest value that fits."""
    log_dir = tmp_path / "runs"
    assert run_train(*entry, "training.run.device=cpu", "task.num_envs=100000000", f"training.run.log_dir={log_dir}") == 2
    out, err = capsys.readouterr()
    fits = (2**31 - 1) // _nconmax()
    assert f"task.num_envs=100000000: expected at most {fits} envs" in err and "Traceback" not in err
    assert out == "" and not log_dir.exists() and spies[0].calls == []


@pytest.mark.parametrize("task", ["g1_walk_flat", "g1_motion_tracking"])
def test_the_env_bound_is_the_largest_count_that_fits(task):
    from unilab.config.sizes import check_simulator_sizes
    from unilab.registry import instantiate

    fits = (2**31 - 1) // _nconmax(task)
    sim, training = instantiate("sim", {}), TrainingConfig(run=RunSettings(device="cpu"))
    check_simulator_sizes(instantiate("task", {"name": task, "num_envs": fits}), sim, training)
    with pytest.raises(ValueError, match=f"task.num_envs={fits + 1}: expected at most {fits} envs"):
        check_simulator_sizes(instantiate("task", {"name": task, "num_envs": fits + 1}), sim, training)
    with pytest.raises(ValueError, match=f"training.outputs.play_envs={fits + 1}: expected at most {fits}"):
        check_simulator_sizes(instantiate("task", {"name": task, "num_envs": 8}), sim,
                              TrainingConfig(run=RunSettings(device="cpu"), outputs=OutputSettings(play_envs=fits + 1)))


def test_a_replay_larger_than_the_gpu_is_refused(tmp_path, spies, capsys, fake_host):
    """On CUDA the budget is NVML's total memory of the rank's GPU (the fake's: 143771 MiB)."""
    from unilab.config.sizes import row_bytes
    from unilab.registry import instantiate

    log_dir = tmp_path / "runs"
    assert run_train("training.run.device=cuda:0", "algo.replay_capacity=1000000000", f"training.run.log_dir={log_dir}") == 2
    err = capsys.readouterr().err
    row = row_bytes(instantiate("task", {"name": "g1_walk_flat"}))
    slots = 4 * 4096 * row  # training.loop.ingress_slots x task.num_envs x env_steps_per_sync rows
    fits = (143_771 * 2**20 - slots) // row
    assert f"algo.replay_capacity=1000000000: expected at most {fits}" in err and "cuda:0's 140 GiB" in err
    assert not log_dir.exists() and spies[0].calls == []
    assert run_train("training.run.device=cuda:0", f"algo.replay_capacity={fits}", f"training.run.log_dir={log_dir}") == 0


def test_a_replay_larger_than_the_host_is_refused_on_the_cpu(tmp_path, spies, capsys, monkeypatch):
    """On the CPU the replay lives in host memory: the budget is the host's (a fake 8 GiB here), shared by the ranks
    `training.run.devices` starts on it."""
    import unilab.config.sizes as sizes

    monkeypatch.setattr(sizes, "host_memory_bytes", lambda: 8 * 2**30)
    log_dir = tmp_path / "runs"
    args = ["+preset=cpu_smoke", "algo.replay_capacity=5000000", f"training.run.log_dir={log_dir}"]
    assert run_train(*args) == 2  # 5e6 rows of 1756 bytes: 8.2 GiB
    assert "algo.replay_capacity=5000000: expected at most" in capsys.readouterr().err
    assert run_train(*args, "algo.replay_capacity=3000000") == 0  # 4.9 GiB
    assert run_train(*args, "algo.replay_capacity=3000000", "training.run.devices=[0,1]") == 2  # two of them
    assert "shared by 2 ranks" in capsys.readouterr().err
    assert spies[0].calls and len(spies[0].calls) == 1


class _PerGpuNvml(FakeNvml):
    def memory(self, index: int):
        from unilab.mps.nvml import GpuMemory

        return GpuMemory(free_mib=0.0, total_mib=1000.0 * (index + 1))


def test_device_memory_follows_cuda_visible_devices(monkeypatch):
    import dataclasses

    import unilab.mps.host as host_mod
    from fakes import GPU_B
    from unilab.config.sizes import device_memory_bytes

    monkeypatch.setattr(host_mod, "SystemNvml", lambda: _PerGpuNvml())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert device_memory_bytes("cuda") == device_memory_bytes("cuda:0") == 1000 * 2**20
    assert device_memory_bytes("cuda:1") == 2000 * 2**20
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", GPU_B.uuid)  # cuda:0 is NVML's GPU 1
    assert device_memory_bytes("cuda:0") == 2000 * 2**20 and device_memory_bytes("cuda:1") is None
    mig = dataclasses.replace(GPU_B, mig_enabled=True)  # a MIG GPU's instances have shares NVML's total is not
    monkeypatch.setattr(host_mod, "SystemNvml", lambda: _PerGpuNvml(devices=[GPU_A, mig]))
    assert device_memory_bytes("cuda:0") is None


@pytest.mark.parametrize("task", ["g1_walk_flat", "g1_motion_tracking"])
def test_the_transition_sizes_at_compose_are_the_envs(task):
    """The replay's row at compose comes from the task config (no env exists yet): the env's own sizes, read once it
    is sized (before any kernel compiles)."""
    from unilab.registry import instantiate
    from unilab.tasks import make_env

    class Sized(Exception):
        pass

    def stop(env):
        raise Sized((env.obs_dim, env.critic_obs_dim, env.action_dim))

    cfg = instantiate("task", {"name": task, "num_envs": 1})
    with pytest.raises(Sized) as sized:
        make_env(cfg, {}, "cpu", 0, on_sized=stop)
    assert sized.value.args[0] == cfg.transition_dims()


# ---------------------------------------------------------------- hostile values for every key (property test)

# Override texts as a user could type them: out of range, NaN, inf, huge, negative, empty, wrong type.
HOSTILE = ["-1", "0", "-0.5", "0.5", "1e308", "-1e308", "nan", "inf", "-inf", "2147483648", "9223372036854775808",
           "1000000000000000000000000000000", "true", "''", "' '", "abc", "'a\x01b'", "'../x'", "'/abs/x'", "null",
           "[]", "[nan,1]", "[1e308,1e308]", "[5,1]", "[1,2,3]", "{a: 1}", "'" + "x" * 300 + "'"]
# Composed configs whose keys are drawn; training.run.log_dir is the test's own (and nothing may appear in it).
TASKS = {"g1_walk_flat": ("+preset=cpu_smoke",), "g1_motion_tracking": ("+preset=cpu_smoke", "task=g1_motion_tracking")}
HUGE = 1e15  # no number this large is a setting anyone means; an accepted one is a hole in a schema


def _leaves(node, prefix):
    for key, value in node.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


@functools.lru_cache(maxsize=None)
def _keys(task: str) -> tuple[str, ...]:
    cfg = compose_train(list(TASKS[task]))
    keys = [k for group in ("algo", "task", "sim", "training")
            for k in _leaves(OmegaConf.to_container(cfg[group], resolve=True), f"{group}.")]
    return tuple(k for k in keys if k != "training.run.log_dir")


def _select(printed: dict, key: str):
    for part in key.split("."):
        printed = printed[part]
    return printed


def _acceptable(value) -> bool:
    """What an accepted value may be: finite numbers of sane size, non-empty text (for every item of a list)."""
    if isinstance(value, list):
        return all(_acceptable(v) for v in value)
    if isinstance(value, bool) or value is None:
        return True
    if isinstance(value, (int, float)):
        return math.isfinite(value) and abs(value) < HUGE
    if isinstance(value, str):
        return value.strip() != "" and value.isprintable()
    return isinstance(value, dict)


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(data=st.data())
def test_every_hostile_value_is_refused_at_compose_or_harmless(data):
    """A hostile value for any key of the composed config of either task: `train --cfg job` (what `train` does before
    it creates anything) exits 2 with a message and no traceback, or accepts a value that is finite, of sane size and
    non-empty. Nothing is created under training.run.log_dir either way."""
    task = data.draw(st.sampled_from(sorted(TASKS)), label="task")
    key = data.draw(st.sampled_from(_keys(task)), label="key")
    value = data.draw(st.sampled_from(HOSTILE), label="value")
    with tempfile.TemporaryDirectory() as tmp:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run_train("--cfg", "job", "--resolve", *TASKS[task], f"training.run.log_dir={tmp}/runs", f"{key}={value}")
        assert os.listdir(tmp) == []
    err = err.getvalue()
    assert code in (0, 2) and "Traceback" not in err, err
    if code == 2:
        assert err.startswith(("unilab: invalid configuration", "train: ")) and out.getvalue() == "", err
    else:
        accepted = _select(yaml.safe_load(out.getvalue()), key)
        assert _acceptable(accepted), f"{key}={value} accepted as {accepted!r}"

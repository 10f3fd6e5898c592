"""Every entry point that composes a `train` config fails closed the same way: `train`, `train --cfg job`,
`train -m` (before any job is launched) and Hydra's compose API followed by a resolve."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from fakes import GPU_A, FakeNvml
from train_calls import run_train
from unilab.cli.train import CONF_DIR
from unilab.config import RequestError, register_configs, register_resolvers
from unilab.mps import CudaProcessSharingError, Prerequisite

TYPO = "+training.stall_timeot_s=5"


@pytest.fixture
def no_driver(monkeypatch, tmp_path):
    """A host without an NVIDIA driver (NVML fails) and no daemon."""
    import unilab.mps.probe as probe_mod

    monkeypatch.setattr(probe_mod, "SystemNvml", lambda: FakeNvml(available=False))
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "no-daemon"))


def composed(*overrides: str):
    register_configs()
    register_resolvers()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides))


# ---------------------------------------------------------------- train --cfg job


def test_cfg_job_refuses_mps_on_a_host_without_a_driver(no_driver, capsys):
    assert run_train("--cfg", "job", "training.device=cuda:0", "+execution=mps") == 2
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
    assert run_train("--cfg", "job", "training.device=cuda:0", "+execution=mps") == 0
    out = capsys.readouterr().out
    printed = yaml.safe_load(out)
    evidence = printed["execution_evidence"]
    assert evidence["configured"] == "mps" and evidence["validated"] is True and evidence["effective"] is None
    assert evidence["gpu_uuid"] == GPU_A.uuid and evidence["control_pipe"] == str(daemon.control)
    assert printed["training"]["cuda_process_sharing"] == "mps" and printed["algo"]["name"] == "fastsac"
    assert "# execution_evidence: what runtime_manifest.json records" in out


def test_cfg_job_honours_package_and_resolve(capsys):
    assert run_train("--cfg", "job", "--package", "training", "--resolve", "+preset=cpu_smoke") == 0
    out = capsys.readouterr().out
    assert out.startswith("# @package training\n")
    assert yaml.safe_load(out)["device"] == "cpu"
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
    assert run_train("-m", "+execution=default,mps", "training.device=cpu", "training.seed=1,2",
                     f"training.log_dir={log_dir}") == 2
    err = capsys.readouterr().err
    assert "2 of 4 job(s) refused; no job was launched" in err and "learner_cuda" in err
    assert not log_dir.exists() and spies[0].calls == []


def test_a_sweep_with_an_appended_typo_launches_nothing(tmp_path, spies, capsys):
    log_dir = tmp_path / "runs"
    assert run_train("-m", "training.device=cpu", "training.seed=1,2", TYPO, f"training.log_dir={log_dir}") == 2
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
    cfg = composed("training.device=cuda:0", "+execution=mps")
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
    ("training.stall_timeout_s=inf", "training.stall_timeout_s"),
    ("training.device=gpu", "training.device='gpu'"),
])
def test_the_compose_api_raises_the_value_error_on_resolve(how, override, needle):
    cfg = composed("+preset=cpu_smoke", override)
    with pytest.raises(RequestError, match=needle.replace("(", r"\(").replace("[", r"\[")):
        RESOLVES[how](cfg)


def test_the_compose_api_resolves_a_valid_request_to_its_evidence(fake_host, daemon):
    cfg = composed("training.device=cuda:0", "+execution=mps")
    obj = OmegaConf.to_object(cfg)
    assert obj.execution_evidence["configured"] == "mps" and obj.execution_evidence["validated"] is True
    assert obj.training.cuda_process_sharing.value == "mps"
    assert OmegaConf.to_object(composed("+preset=cpu_smoke")).execution_evidence["configured"] is None


def test_a_request_error_is_the_message_train_prints(no_driver, capsys):
    cfg = composed("training.device=cuda:0", "+execution=mps")
    with pytest.raises(RequestError) as raised:
        OmegaConf.to_object(cfg)
    assert run_train("training.device=cuda:0", "+execution=mps") == 2
    assert capsys.readouterr().err.strip() == str(raised.value).strip()

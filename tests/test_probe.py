"""The execution probe against fake host facts (NVML, a real-socket fake daemon, PATH)."""

from __future__ import annotations

import dataclasses
import json
import os
import time

import pytest
from pydantic import ValidationError

from fakes import GPU_A, GPU_B, FakeNvml
from train_compose import compose_train
from unilab.mps import (
    CudaProcessSharingError,
    CudaProcessSharingEvidence,
    HostFacts,
    Prerequisite,
    probe_cuda_process_sharing,
    verify_mps_clients,
)
from unilab.mps.layout import default_root
from unilab.mps.nvml import MigEntry, visible_devices


def probe(host, mode="mps", learner="cuda:0", collector="cuda:0", backend="mjwarp", **kw):
    return probe_cuda_process_sharing(mode, learner, collector, backend=backend, host=host, **kw)


def fails_with(prerequisite: Prerequisite, host, **kw) -> CudaProcessSharingError:
    with pytest.raises(CudaProcessSharingError) as info:
        probe(host, **kw)
    assert info.value.prerequisite is prerequisite, info.value.render()
    assert info.value.fix, "every failure names a fix"
    return info.value


def test_null_mode_records_effective_null_without_daemon(short_tmp):
    host = HostFacts(platform="linux", env={"CUDA_MPS_PIPE_DIRECTORY": str(short_tmp / "none")}, nvml=FakeNvml())
    ev = probe(host, mode=None, learner="cpu", collector="cpu")
    assert ev.configured is None and ev.effective is None and not ev.validated
    assert ev.daemon_reachable is False and ev.pipe_directory_source == "env"


def test_null_mode_never_fails_even_on_a_hostile_host():
    host = HostFacts(platform="darwin", env={}, nvml=FakeNvml(available=False), which=lambda *a, **k: None)
    ev = probe(host, mode=None, learner="cpu", collector="cuda:7", backend="genesis")
    assert ev.effective is None
    assert ev.pipe_directory == "/tmp/nvidia-mps" and ev.pipe_directory_source == "default"


def test_null_mode_notes_an_ambient_daemon(host, daemon):
    ev = probe(host, mode=None)
    assert ev.effective is None
    assert ev.daemon_reachable is True
    assert ev.control_daemon_pid == os.getpid()
    assert any("MPS" in n for n in ev.notes)


def test_mps_valid(host, daemon):
    ev = probe(host)
    assert ev.configured == "mps" and ev.validated
    # Attachment of the learner/collector PIDs is verified later by the runtime.
    assert ev.effective is None and not ev.clients_verified
    assert ev.gpu_uuid == GPU_A.uuid and ev.compute_mode == "DEFAULT"
    assert ev.control_pipe == str(daemon.control) and ev.pipe_directory_source == "env"
    assert ev.control_daemon_pid == os.getpid()
    # No server runs before the first client: the daemon pid is not a server pid.
    assert ev.server_pid is None and ev.server_pids == []
    assert "get_server_list" in daemon.commands


def test_mps_valid_records_running_server(host, daemon):
    daemon.servers[4242] = [11, 12]
    ev = probe(host)
    assert ev.server_pid == 4242 and ev.server_pids == [4242]


def test_evidence_is_frozen_and_json_round_trips(host, daemon):
    ev = probe(host)
    again = CudaProcessSharingEvidence.model_validate(json.loads(ev.model_dump_json()))
    assert again == ev
    with pytest.raises(ValidationError):
        ev.validated = False


def test_invalid_mode_value(host):
    err = fails_with(Prerequisite.MODE_VALUE, host, mode="mpss")
    assert "mpss" in err.found


def test_unsupported_backend(host):
    fails_with(Prerequisite.BACKEND, host, backend="genesis")


def test_non_linux(host):
    fails_with(Prerequisite.PLATFORM, dataclasses.replace(host, platform="darwin"))


@pytest.mark.parametrize("device", ["cpu", "mps", "cuda:x", ""])
def test_cpu_learner_rejected(host, device):
    fails_with(Prerequisite.LEARNER_CUDA, host, learner=device)


def test_cpu_collector_rejected(host):
    fails_with(Prerequisite.COLLECTOR_CUDA, host, collector="cpu")


def test_nvml_unavailable(host):
    fails_with(Prerequisite.NVML, dataclasses.replace(host, nvml=FakeNvml(available=False)))


def test_different_physical_gpus(host):
    err = fails_with(Prerequisite.SAME_GPU, host, learner="cuda:0", collector="cuda:1")
    assert GPU_A.uuid in err.found and GPU_B.uuid in err.found


def test_two_indices_that_map_to_the_same_uuid(host):
    env = dict(host.env, CUDA_VISIBLE_DEVICES=f"{GPU_A.uuid},0")
    ev = probe(dataclasses.replace(host, env=env), learner="cuda:0", collector="cuda:1")
    assert ev.gpu_uuid == GPU_A.uuid


def test_visible_devices_given_as_uuids(host):
    env = dict(host.env, CUDA_VISIBLE_DEVICES=GPU_B.uuid)
    ev = probe(dataclasses.replace(host, env=env), learner="cuda", collector="cuda:0")
    assert ev.gpu_uuid == GPU_B.uuid and ev.cuda_visible_devices == GPU_B.uuid


def test_visible_devices_index_remaps_ordinals(host):
    env = dict(host.env, CUDA_VISIBLE_DEVICES="1")
    assert probe(dataclasses.replace(host, env=env)).gpu_uuid == GPU_B.uuid


def test_device_not_visible(host):
    env = dict(host.env, CUDA_VISIBLE_DEVICES="1")
    fails_with(Prerequisite.DEVICE_VISIBLE, dataclasses.replace(host, env=env), learner="cuda:1", collector="cuda:1")


def test_visible_devices_stop_at_first_invalid_entry():
    assert visible_devices("1,7,0", [GPU_A, GPU_B]) == [GPU_B]
    assert visible_devices("", [GPU_A, GPU_B]) == []
    assert visible_devices(None, [GPU_A, GPU_B]) == [GPU_A, GPU_B]
    assert visible_devices("GPU-bbbb", [GPU_A, GPU_B]) == [GPU_B]  # CUDA accepts unique prefixes
    assert visible_devices("MIG-1234", [GPU_A]) == [MigEntry("MIG-1234")]


def test_mig_instance_rejected(host):
    env = dict(host.env, CUDA_VISIBLE_DEVICES="MIG-0123-4567")
    fails_with(Prerequisite.NO_MIG, dataclasses.replace(host, env=env))


def test_gpu_in_mig_mode_rejected(host):
    nvml = FakeNvml([dataclasses.replace(GPU_A, mig_enabled=True)])
    fails_with(Prerequisite.NO_MIG, dataclasses.replace(host, nvml=nvml))


def test_missing_pipe_directory(host, short_tmp):
    env = dict(host.env, CUDA_MPS_PIPE_DIRECTORY=str(short_tmp / "nowhere"))
    err = fails_with(Prerequisite.PIPE_DIRECTORY, dataclasses.replace(host, env=env))
    # The exported pipe directory is kept; the log directory is the convention's for the probed GPU.
    root = default_root(os.geteuid())
    base, pipe = root / GPU_A.uuid, short_tmp / "nowhere"
    assert err.fix == [f"mkdir -p -m 700 {root} {base} {pipe} {base}/log",
                       f"export CUDA_MPS_PIPE_DIRECTORY={pipe}",
                       f"export CUDA_MPS_LOG_DIRECTORY={base}/log",
                       "nvidia-cuda-mps-control -d"]


def test_default_pipe_directory_is_named_when_unset(host):
    env = {k: v for k, v in host.env.items() if k != "CUDA_MPS_PIPE_DIRECTORY"}
    if os.path.exists("/tmp/nvidia-mps/control"):
        pytest.skip("a real MPS daemon uses the default directory on this host")
    with pytest.raises(CudaProcessSharingError) as info:
        probe(dataclasses.replace(host, env=env))
    assert "/tmp/nvidia-mps" in info.value.found and "default" in info.value.found


def test_missing_control_pipe(host, short_tmp):
    (short_tmp / "empty").mkdir()
    env = dict(host.env, CUDA_MPS_PIPE_DIRECTORY=str(short_tmp / "empty"))
    fails_with(Prerequisite.CONTROL_PIPE, dataclasses.replace(host, env=env))


def test_control_is_not_a_socket(host, short_tmp):
    (short_tmp / "stale").mkdir()
    (short_tmp / "stale" / "control").write_text("not a socket")
    env = dict(host.env, CUDA_MPS_PIPE_DIRECTORY=str(short_tmp / "stale"))
    fails_with(Prerequisite.CONTROL_PIPE_SOCKET, dataclasses.replace(host, env=env))


def test_permission_denied(host, daemon):
    def deny_control(path, mode):
        return not str(path).endswith("control")

    fails_with(Prerequisite.CONTROL_PIPE_ACCESS, dataclasses.replace(host, access=deny_control))


def test_control_binary_missing(host, short_tmp):
    env = dict(host.env, PATH=str(short_tmp / "empty-bin"))
    err = fails_with(Prerequisite.CONTROL_BINARY, dataclasses.replace(host, env=env))
    assert "nvidia-cuda-mps-control" in err.message


def test_daemon_not_answering_is_bounded(host, daemon):
    daemon.silent = True  # it holds each query 30 s: an unbounded probe would wait that long
    start = time.monotonic()
    err = fails_with(Prerequisite.DAEMON_ANSWERS, host, timeout_s=0.5)
    assert "no answer" in err.found and "0.5 s" in err.found, err.found  # its own bound ended the wait
    assert time.monotonic() - start < 25  # not the daemon's 30 s: room for a busy machine


def test_dead_daemon_leaves_a_socket_that_does_not_answer(host, daemon, fake_bin):
    daemon.stop()
    import socket

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(daemon.control))  # a socket file nobody listens on
    s.close()
    fails_with(Prerequisite.DAEMON_ANSWERS, host)


def test_prohibited_compute_mode(host):
    nvml = FakeNvml([dataclasses.replace(GPU_A, compute_mode="PROHIBITED")])
    fails_with(Prerequisite.COMPUTE_MODE, dataclasses.replace(host, nvml=nvml))


def test_first_unmet_prerequisite_wins(host, short_tmp):
    # CPU learner *and* no daemon: the earlier check (device) is the one reported.
    env = dict(host.env, CUDA_MPS_PIPE_DIRECTORY=str(short_tmp / "nowhere"))
    fails_with(Prerequisite.LEARNER_CUDA, dataclasses.replace(host, env=env), learner="cpu")


def test_no_silent_fallback(host, short_tmp):
    """An unmet mps request raises; it never comes back as an evidence record of some other mode."""
    env = dict(host.env, CUDA_MPS_PIPE_DIRECTORY=str(short_tmp / "nowhere"))
    broken = [
        dict(host=dataclasses.replace(host, env=env)),
        dict(host=dataclasses.replace(host, platform="win32")),
        dict(host=host, learner="cpu"),
        dict(host=dataclasses.replace(host, nvml=FakeNvml(available=False))),
    ]
    for case in broken:
        h = case.pop("host")
        with pytest.raises(CudaProcessSharingError):
            probe(h, **case)


def test_error_renders_id_found_and_fix(host):
    err = fails_with(Prerequisite.PLATFORM, dataclasses.replace(host, platform="darwin"))
    text = err.render()
    assert "platform_linux" in text and "darwin" in text and "fix:" in text
    assert err.as_dict()["prerequisite"] == "platform_linux"


class _Clock:
    """time for verify_mps_clients' deadline: it moves only while the verification sleeps between polls. (Each
    query still runs the fake control binary, bounded by its own timeout.)"""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_verify_mps_clients_attached_and_not(host, daemon, monkeypatch):
    import unilab.mps.verify as verify_mod

    ev = probe(host)
    daemon.servers[5000] = [101, 102]
    report = verify_mps_clients(ev, [101, 102], timeout_s=60, host=host)  # returns at the first poll
    assert report.all_attached and report.server_pids == [5000]
    monkeypatch.setattr(verify_mod, "time", _Clock())
    report = verify_mps_clients(ev, [101, 999], timeout_s=60, host=host, poll_s=60)  # two polls, then the deadline
    assert not report.all_attached and report.missing() == [999] and report.error is None


def test_verify_mps_clients_waits_for_late_clients(host, daemon):
    answer = daemon._answer

    def clients_after_the_first_poll(command: str) -> str:
        reply = answer(command)
        if command == "get_server_list":
            daemon.servers[6000] = [7]  # the client shows up after the first poll
        return reply

    daemon._answer = clients_after_the_first_poll
    ev = probe(host)
    daemon.servers.clear()
    commands = len(daemon.commands)
    assert verify_mps_clients(ev, [7], timeout_s=60, host=host, poll_s=0.05).all_attached
    assert daemon.commands[commands:] == ["get_server_list", "get_server_list", "get_client_list 6000"]


def test_verify_mps_clients_daemon_gone(host, daemon):
    ev = probe(host)
    daemon.stop()
    report = verify_mps_clients(ev, [1], timeout_s=0.3, host=host)
    assert not report.all_attached and report.error


def test_a_cancelled_client_verification_verifies_nothing(host, daemon, fake_host):
    """The launcher's check that both children are clients: a SIGINT/SIGTERM mid-way (cancelled) ends the
    daemon queries unfinished, and then nothing may be recorded or printed as verified (the launcher
    once printed `MPS clients verified ... -> server pid None` there)."""
    import io
    from types import SimpleNamespace

    from unilab.launcher.console import Console
    from unilab.launcher.launch import _verify


    class Manifest:
        written = 0

        def model_copy(self, update):
            return self

        def write(self, run_dir):
            Manifest.written += 1

    from unilab.world import single_host

    spec = SimpleNamespace(rank=0, name=lambda role: f"{role}[0]", world=single_host(1, None)[0])
    ranks = [SimpleNamespace(spec=spec, evidence=probe(host), device="cuda:0")]
    ready = {"learner[0]": SimpleNamespace(pid=101, gpu_uuid=None),
             "collector[0]": SimpleNamespace(pid=102, gpu_uuid=None)}
    for cancelled, verified in ((lambda: True, False), (lambda: False, True)):
        # Cancelled: the children are not clients (yet), so only the cancellation ends the polling. Then
        # they are, and the verification passes.
        daemon.servers.clear()
        if verified:
            daemon.servers[5000] = [101, 102]
        prepared = SimpleNamespace(config=SimpleNamespace(training=SimpleNamespace(mps=SimpleNamespace(
                                       mps_attach_timeout_s=5.0, block_ambient_mps=False))),
                                   manifest=Manifest(),
                                   role_mps_env={}, run_dir=None, own_dir=None)
        out = io.StringIO()
        assert _verify(prepared, ranks, ready, cancelled=cancelled, console=Console(stream=out)) is None
        assert ("MPS clients verified: learner pid 101, collector pid 102 -> server pid 5000" in out.getvalue()) \
            is verified, out.getvalue()
        assert Manifest.written == int(verified)


# ---------------------------------------------------------------- every rank of a data-parallel run


def _validated(*overrides: str):
    """`train`'s checks (unilab.config.validate) on a composed config."""
    from unilab.config import validate

    return validate(compose_train(list(overrides)))


DATA_PARALLEL_MPS = ("+execution=mps", "training.run.device=cuda:0", "training.run.devices=[0,1]")


def test_every_rank_of_a_data_parallel_run_is_probed(fake_host, daemon):
    """training.run.devices=[0,1] under MPS: rank 1's GPU is probed itself (its device, its UUID, the daemon asked
    again), not rank 0's evidence passed on."""
    asked = daemon.commands.count("get_server_list")
    request = _validated(*DATA_PARALLEL_MPS)
    assert [(e.learner_device, e.collector_device, e.gpu_uuid, e.validated) for e in request.rank_evidence] == [
        ("cuda:0", "cuda:0", GPU_A.uuid, True), ("cuda:1", "cuda:1", GPU_B.uuid, True)]
    assert daemon.commands.count("get_server_list") - asked == 2  # one probe per rank


def test_a_fault_of_rank_1s_gpu_is_found_before_the_run(fake_host, daemon, monkeypatch):
    """Rank 0's GPU is fine, rank 1's is in MIG mode: the request is refused (no_mig, naming rank 1's GPU)."""
    import unilab.mps.host as host_mod

    mig_b = dataclasses.replace(GPU_B, mig_enabled=True)
    monkeypatch.setattr(host_mod, "SystemNvml", lambda: FakeNvml(devices=[GPU_A, mig_b]))
    with pytest.raises(CudaProcessSharingError) as info:
        _validated(*DATA_PARALLEL_MPS)
    assert info.value.prerequisite is Prerequisite.NO_MIG and info.value.found == GPU_B.uuid


def _two_ranks(host, tmp_path):
    """The launcher's view of a two-rank MPS run once its four children are Ready (rank r: learner pid 1r1,
    collector pid 1r2, each on its rank's GPU), and its prepared run (a real manifest under tmp_path)."""
    from types import SimpleNamespace

    from unilab.rundir.manifest import RuntimeManifest
    from unilab.world import single_host

    ranks, ready = [], {}
    for world, device, gpu in zip(single_host(2, 29500), ("cuda:0", "cuda:1"), (GPU_A, GPU_B)):
        r = world.rank
        spec = SimpleNamespace(rank=r, name=lambda role, r=r: f"{role}[{r}]", world=world)
        ranks.append(SimpleNamespace(spec=spec, evidence=probe(host, learner=device, collector=device), device=device))
        ready[f"learner[{r}]"] = SimpleNamespace(pid=100 + 10 * r + 1, gpu_uuid=gpu.uuid)
        ready[f"collector[{r}]"] = SimpleNamespace(pid=100 + 10 * r + 2, gpu_uuid=gpu.uuid)
    manifest = RuntimeManifest(run_dir=str(tmp_path), algo="fastsac", task="g1_walk_flat", backend="mjwarp",
                               world_size=2, cuda_process_sharing=ranks[0].evidence)
    training = SimpleNamespace(mps=SimpleNamespace(mps_attach_timeout_s=0.5, block_ambient_mps=False))
    prepared = SimpleNamespace(config=SimpleNamespace(training=training), manifest=manifest,
                               role_mps_env={}, run_dir=str(tmp_path), own_dir=tmp_path)
    return prepared, ranks, ready


def test_every_rank_s_children_are_verified_as_clients(host, daemon, fake_host, tmp_path):
    """Two ranks under MPS, each pair the clients of its own server: the manifest records each rank's own
    verification (its pids, its server, its GPU), and the console names both."""
    import io

    from unilab.launcher.console import Console
    from unilab.launcher.launch import _verify

    prepared, ranks, ready = _two_ranks(host, tmp_path)
    daemon.servers.update({5000: [101, 102], 5001: [111, 112]})
    out = io.StringIO()
    assert _verify(prepared, ranks, ready, console=Console(world_size=2, stream=out)) is None
    recorded = json.loads((tmp_path / "runtime_manifest.json").read_text())["ranks"]
    assert [(r["rank"], r["learner_pid"], r["collector_pid"]) for r in recorded] == [(0, 101, 102), (1, 111, 112)]
    sharing = [r["cuda_process_sharing"] for r in recorded]
    assert [(s["effective"], s["clients_verified"], s["client_pids"], s["server_pid"], s["gpu_uuid"])
            for s in sharing] == [("mps", True, {"learner": 101, "collector": 102}, 5000, GPU_A.uuid),
                                  ("mps", True, {"learner": 111, "collector": 112}, 5001, GPU_B.uuid)]
    for line in ("[rank 0] MPS clients verified: learner pid 101, collector pid 102 -> server pid 5000",
                 "[rank 1] MPS clients verified: learner pid 111, collector pid 112 -> server pid 5001"):
        assert line in out.getvalue(), out.getvalue()


@pytest.mark.parametrize("fault", ["not a client", "another GPU"])
def test_a_rank_above_0_whose_child_fails_verification_stops_the_run(host, daemon, fake_host, tmp_path, fault):
    """Rank 0's pair passes; rank 1's collector is not a client of the daemon, or sees rank 0's GPU: the
    verification fails naming that child, and nothing is recorded as verified."""
    from unilab.launcher.launch import _verify

    prepared, ranks, ready = _two_ranks(host, tmp_path)
    daemon.servers.update({5000: [101, 102], 5001: [111]})
    if fault == "another GPU":
        daemon.servers[5001].append(112)
        ready["collector[1]"].gpu_uuid = GPU_A.uuid
    error = _verify(prepared, ranks, ready)
    assert error is not None
    if fault == "not a client":
        assert error.prerequisite is Prerequisite.CLIENTS_ATTACHED
        assert error.message.startswith("the collector[1] (pid 112) is not a client of the MPS server")
    else:
        assert error.prerequisite is Prerequisite.SAME_GPU
        assert error.found == f"collector[1] {GPU_A.uuid}, probe {GPU_B.uuid}"
    assert not (tmp_path / "runtime_manifest.json").exists()

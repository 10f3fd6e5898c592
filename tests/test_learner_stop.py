"""The learner's stop-time checkpoint when its GPU work does not end (an update whose collective waits for a rank
that is gone): no wait for ever, no checkpoint of weights that cannot be read, and the reason in its summary."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from unilab.runtime.learner import LearnerLoop


def _must_not(what: str):
    def called(*_args, **_kwargs):
        raise AssertionError(f"{what} was called: it waits for the GPU work that never ends")

    return called


def test_a_stop_whose_gpu_work_does_not_end_reports_instead_of_waiting_or_saving():
    loop = SimpleNamespace(
        spec=SimpleNamespace(training=SimpleNamespace(loop=SimpleNamespace(stall_timeout_s=120.0)), world_size=2), iteration=37,
        summary=lambda status: {"status": status, "iterations": 37},
        _gpu_work_ends=lambda timeout_s: False,  # the host fact: an update stuck in an NCCL all-reduce
        leave_collector=_must_not("leave_collector (a device synchronisation)"), save=_must_not("save"),
        log=SimpleNamespace(flush=_must_not("log.flush"), pending=[{"iteration": 35}]))
    out = LearnerLoop.save_on_stop(loop)
    assert out["status"] == "interrupted" and out["iterations"] == 37
    (error,) = out["stop_errors"]
    assert error.startswith("no stop-time checkpoint (iteration 37): this learner's GPU work did not end within 10 s "
                            "(an update waits in a collective for a rank that is gone)")
    assert "a resume starts from the last periodic checkpoint" in error


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_work_that_does_not_end_is_seen_within_the_bound():
    device = torch.device("cuda:0")
    loop = SimpleNamespace(torch=torch, device=device, upd_stream=torch.cuda.Stream(device),
                           inf_stream=torch.cuda.Stream(device))
    assert LearnerLoop._gpu_work_ends(loop, 5.0)
    with torch.cuda.stream(loop.upd_stream):
        torch.cuda._sleep(10_000_000_000)  # seconds of GPU time: an update that waits in a collective
    assert not LearnerLoop._gpu_work_ends(loop, 0.2)  # seen as not ending, where a synchronisation would wait
    torch.cuda.synchronize(device)
    assert LearnerLoop._gpu_work_ends(loop, 5.0)

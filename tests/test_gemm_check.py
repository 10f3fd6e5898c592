"""The half-precision GEMM self-check run by a process under an MPS thread share (CPU, with fakes
for the broken products seen on the H200)."""

from __future__ import annotations

import pytest
import torch

from unilab.runtime.gemm_check import (
    MAX_RELATIVE_ERROR,
    HalfPrecisionGemmError,
    check_half_gemm,
    check_under_thread_share,
    half_gemm_errors,
)

SMALL = (((2, 64, 96), (2, 96, 48)), ((64, 96), (96, 48)))
CPU = torch.device("cpu")


def test_correct_products_pass():
    errors = half_gemm_errors(CPU, shapes=SMALL)
    assert len(errors) == 4 and all(0 < e < MAX_RELATIVE_ERROR for e in errors.values()), errors
    check_half_gemm(CPU, "learner", "75", shapes=SMALL)


def _broken(kind):
    def matmul(a, b):
        out = torch.matmul(a, b)
        if a.dtype in (torch.bfloat16, torch.float16) and a.dim() == 3:
            return torch.full_like(out, float("nan")) if kind == "nan" else out * 1.5
        return out
    return matmul


@pytest.mark.parametrize("kind", ["nan", "wrong"])
def test_wrong_products_fail_closed_naming_the_share(kind):
    with pytest.raises(HalfPrecisionGemmError) as err:
        check_half_gemm(CPU, "learner", "75", shapes=SMALL, matmul=_broken(kind))
    msg = str(err.value)
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=75 for the learner" in msg
    assert "bfloat16 (2, 64, 96)@(2, 96, 48)" in msg
    assert "unset training.mps_active_thread_percentage.learner" in msg


def test_only_cuda_processes_with_a_share_are_checked(monkeypatch):
    import unilab.runtime.gemm_check as gc

    calls = []
    monkeypatch.setattr(gc, "check_half_gemm", lambda device, role, share: calls.append((device.type, role, share)))
    monkeypatch.delenv(gc.SHARE_VAR, raising=False)
    check_under_thread_share(torch.device("cuda", 0), "learner")
    monkeypatch.setenv(gc.SHARE_VAR, "75")
    check_under_thread_share(CPU, "collector")
    assert calls == []
    check_under_thread_share(torch.device("cuda", 0), "collector")
    assert calls == [("cuda", "collector", "75")]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_products_pass_without_a_share():
    check_half_gemm(torch.device("cuda", 0), "learner", "unset")

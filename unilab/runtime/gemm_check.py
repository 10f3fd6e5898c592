"""Half-precision matrix-product self-check for a process that runs under an MPS thread share.

Found on an H200 (driver 580.159.04, torch 2.11 with CUDA 13.0, 2026-11-29): with
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE at 70, 75 or 80 % (92, 98, 104 SMs), bf16 and fp16 cuBLAS
products of the learner's shapes came back NaN or wrong, without any error; fp32 was exact, and
25, 50, 60, 90 and 100 % were exact too. The learner (the role that runs bf16) started with a
share checks once, after its CUDA context exists, and fails closed instead of training on corrupt
arithmetic. The collector computes in fp32 and is not checked.
"""

from __future__ import annotations

import os

SHARE_VAR = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
# The shapes that failed on the H200: an ensemble layer (2, 8192, 768) @ (2, 768, 384) and one member.
SHAPES = (((2, 8192, 768), (2, 768, 384)), ((8192, 768), (768, 384)))
MAX_RELATIVE_ERROR = 0.02  # bf16 keeps 8 mantissa bits: correct products land near 0.004


class HalfPrecisionGemmError(RuntimeError):
    pass


def half_gemm_errors(device, shapes=SHAPES, matmul=None) -> dict[str, float]:
    """Relative error (Frobenius norm) of bf16 and fp16 products against a float64 reference,
    per dtype and shape; NaN where the product is not finite."""
    import torch

    matmul = matmul or torch.matmul
    gen = torch.Generator(device=device).manual_seed(0)
    errors: dict[str, float] = {}
    for a_shape, b_shape in shapes:
        a = torch.randn(a_shape, device=device, generator=gen)
        b = torch.randn(b_shape, device=device, generator=gen) / a_shape[-1] ** 0.5
        ref = matmul(a.double(), b.double())
        for dtype in (torch.bfloat16, torch.float16):
            out = matmul(a.to(dtype), b.to(dtype)).double()
            err = ((out - ref).norm() / ref.norm()).item() if torch.isfinite(out).all() else float("nan")
            errors[f"{str(dtype).removeprefix('torch.')} {tuple(a_shape)}@{tuple(b_shape)}"] = err
    return errors


def check_half_gemm(device, role: str, share: str, **kwargs) -> None:
    """Raise HalfPrecisionGemmError naming the share and the first wrong product."""
    import torch

    for case, err in half_gemm_errors(device, **kwargs).items():
        if not err <= MAX_RELATIVE_ERROR:  # also catches NaN
            sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else None
            raise HalfPrecisionGemmError(
                f"{SHARE_VAR}={share} for the {role}: half-precision matrix products are wrong on {device}"
                f"{f' ({sms} SMs visible)' if sms else ''}: {case} relative error {err:.3g}. "
                f"Seen on an H200 at 70-80 %; choose another share (e.g. 60 or 90) or unset "
                f"training.mps_active_thread_percentage.{role}"
            )


def check_under_thread_share(device, role: str) -> None:
    """The check, when this process runs on CUDA with an MPS thread share; else nothing.
    Called by the learner."""
    share = os.environ.get(SHARE_VAR)
    if share and device.type == "cuda":
        check_half_gemm(device, role, share)

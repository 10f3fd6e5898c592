"""Half-precision matrix-product self-check for a process that runs under an MPS thread share.

Under some values of CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, bf16 and fp16 cuBLAS products of the
learner's shapes came back NaN or wrong without any error, while fp32 stayed exact (measured shares,
shapes and the software they were seen with: docs/history/performance.md, "A fault found with the
thread-share knob" and Session 5). The learner (the role that runs bf16) started with a share checks
once, after its CUDA context exists, and fails closed instead of training on corrupt arithmetic. The
collector computes in fp32 and is not checked.

Which products break depends on the share and the shapes: a learner passed the fixed shapes below
and then produced non-finite losses from its first update on, because a product of its own weights
was the broken one. So the learner, once built, also checks the products of its own weights
(`weight_products`).
"""

from __future__ import annotations

import os

SHARE_VAR = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
# Shapes seen to fail (docs/history/performance.md): an ensemble layer and one of its members.
SHAPES = (((2, 8192, 768), (2, 768, 384)), ((8192, 768), (768, 384)))
MAX_RELATIVE_ERROR = 0.02  # bf16 keeps 8 mantissa bits: correct products land well below this


class HalfPrecisionGemmError(RuntimeError):
    pass


def weight_products(modules, batches) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The matrix products a training step makes with every weight matrix of `modules` (2-D, or one per
    ensemble member stacked as (members, p, q)), for each batch size: input times weight in both
    orientations (forward, and the input gradient) and the weight gradient. Up to memory layout."""
    shapes = set()
    for module in modules:
        for w in module.parameters():
            if w.dim() not in (2, 3) or min(w.shape[-2:]) == 1:  # vectors, per-member biases and scales
                continue
            *members, p, q = w.shape
            m = tuple(members)
            for n in sorted(set(batches)):
                shapes.add((m + (n, p), m + (p, q)))
                shapes.add((m + (n, q), m + (q, p)))
                shapes.add((m + (p, n), m + (n, q)))
    return sorted(shapes)


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
                f"Seen on an H200 at 70-80 % (and, for some learner shapes, 30 %); choose another share "
                f"(e.g. 50, 60 or 90) or unset training.mps.mps_active_thread_percentage.{role}"
            )


def check_under_thread_share(device, role: str, shapes=SHAPES) -> None:
    """The check, when this process runs on CUDA with an MPS thread share; else nothing.
    Called by the learner: at start-up, and with its own weights' products once it is built."""
    share = os.environ.get(SHARE_VAR)
    if share and device.type == "cuda":
        check_half_gemm(device, role, share, shapes=shapes)

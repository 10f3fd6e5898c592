"""Data parallelism for the learners: one rank per GPU, gradients averaged across ranks before every step.

The runtime initialises the default process group (NCCL on CUDA, gloo on the CPU) in each rank's learner
process before the learner is built; a learner then
- starts every rank from rank 0's weights (`broadcast_`, at construction), and
- averages the gradients of each optimiser across ranks between `backward()` and `step()` (`GradAllReduce`),
so that identical gradients through identical optimisers keep the weights identical on every rank.

`GradAllReduce` is CUDA-graph capture safe: its flat buffers are allocated once, at construction, and each
call is a fixed sequence of kernels plus one `all_reduce` per dtype (NCCL collectives can be captured; the
communicator must exist before capture, which the construction-time broadcast and the eager warm-up
cycles guarantee). gloo collectives cannot be captured, but on the CPU nothing is.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch import Tensor, nn


def dp_active(group: dist.ProcessGroup | None = None) -> bool:
    """Whether torch.distributed is initialised with more than one rank (in `group`, default: the world)."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1


def _flat_buckets(tensors: Iterable[Tensor]) -> list[tuple[list[Tensor], Tensor, list[Tensor]]]:
    """(tensors, flat buffer, views of the buffer shaped like the tensors), one bucket per (device, dtype)."""
    groups: dict[tuple[torch.device, torch.dtype], list[Tensor]] = {}
    for t in tensors:
        groups.setdefault((t.device, t.dtype), []).append(t)
    buckets = []
    for (device, dtype), ts in groups.items():
        flat = torch.zeros(sum(t.numel() for t in ts), dtype=dtype, device=device)
        views = [v.view(t.shape) for v, t in zip(flat.split([t.numel() for t in ts]), ts)]
        buckets.append((ts, flat, views))
    return buckets


@torch.no_grad()
def broadcast_(*items: nn.Module | Tensor, src: int = 0, group: dist.ProcessGroup | None = None) -> None:
    """Overwrite, in place, the given tensors and the parameters and buffers of the given modules with
    rank `src`'s values: one broadcast per dtype. A no-op without data parallelism."""
    if not dp_active(group):
        return
    tensors: list[Tensor] = []
    for item in items:
        tensors += [*item.parameters(), *item.buffers()] if isinstance(item, nn.Module) else [item]
    for ts, flat, views in _flat_buckets(tensors):
        torch._foreach_copy_(views, [t.detach() for t in ts])
        dist.broadcast(flat, src=src, group=group)
        torch._foreach_copy_([t.detach() for t in ts], views)


class GradAllReduce:
    """Averages the `.grad` of `params` across the ranks of `group`: copy every gradient into one flat
    buffer per dtype (allocated here, once), `all_reduce(SUM)`, divide by the world size, copy back.

    Call it between `backward()` and `optimizer.step()`. A parameter without a gradient (None) contributes
    zeros and keeps None; since every rank runs the same code, the same parameters lack one on every rank.
    """

    def __init__(self, params: Iterable[Tensor], group: dist.ProcessGroup | None = None):
        if not dp_active(group):
            raise RuntimeError("GradAllReduce needs an initialised process group of more than one rank")
        self.group = group
        self.world_size = dist.get_world_size(group)
        self.params = [p for p in params if p.requires_grad]
        self._buckets = _flat_buckets(self.params)

    @torch.no_grad()
    def __call__(self) -> None:
        for params, flat, views in self._buckets:
            pairs = [(view, p.grad) for view, p in zip(views, params) if p.grad is not None]
            if len(pairs) < len(params):
                flat.zero_()
            if pairs:
                torch._foreach_copy_([v for v, _ in pairs], [g for _, g in pairs])
            dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.group)
            flat.div_(self.world_size)
            if pairs:
                torch._foreach_copy_([g for _, g in pairs], [v for v, _ in pairs])

"""BatchNorm whose batch statistics span every rank of a data-parallel group, on CPUs and GPUs.

torch's SyncBatchNorm runs on GPUs only; this one all-reduces each channel's sum and sum of
squares with a differentiable all-reduce, so it also works with gloo on CPUs
(the laptop and CI case) and makes R ranks with batch B/R compute what one rank with batch B
computes. Leaves out: eval-mode behaviour (the ordinary running statistics are used).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn


class _AllReduce(torch.autograd.Function):
    """Sum over the group, differentiable: every rank's output depends on every rank's input,
    so the gradient of an input is the sum over ranks of the gradients of the output."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        out = x.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class GroupBatchNorm2d(nn.BatchNorm2d):
    def __init__(self, *args: Any, group: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return super().forward(x)
        # Per-channel sums over this rank's (B, H, W), then over the group: one all-reduce of
        # (2C + 1) numbers per layer.
        n_local = torch.tensor(
            [x.shape[0] * x.shape[2] * x.shape[3]], dtype=x.dtype, device=x.device
        )
        stats = torch.cat([x.sum(dim=(0, 2, 3)), (x * x).sum(dim=(0, 2, 3)), n_local])
        if self.group is not None:  # alone (no group): the same formula on the local batch
            stats = _AllReduce.apply(stats, self.group)
        c = x.shape[1]
        n = stats[-1]
        mean = stats[:c] / n
        var = (stats[c : 2 * c] / n - mean * mean).clamp_min(0)
        if self.track_running_stats:
            # BatchNorm2d registers these three buffers whenever it tracks running statistics.
            assert self.num_batches_tracked is not None
            assert self.running_mean is not None and self.running_var is not None
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                m = self.momentum if self.momentum is not None else 0.1
                unbiased = var * (n / (n - 1).clamp_min(1))
                self.running_mean.mul_(1 - m).add_(mean.detach(), alpha=m)
                self.running_var.mul_(1 - m).add_(unbiased.detach(), alpha=m)
        y = (x - mean[None, :, None, None]) / torch.sqrt(var[None, :, None, None] + self.eps)
        return y * self.weight[None, :, None, None] + self.bias[None, :, None, None]


def convert(module: nn.Module, group: Any) -> nn.Module:
    """Replace every BatchNorm2d in `module` by a GroupBatchNorm2d over `group` (same state).
    The new layer holds the old one's weight and bias Parameter objects, not copies: the
    optimizer, built over the module before, goes on updating them."""
    for name, child in module.named_children():
        if isinstance(child, nn.BatchNorm2d) and not isinstance(child, GroupBatchNorm2d):
            new = GroupBatchNorm2d(
                child.num_features,
                eps=child.eps,
                momentum=child.momentum,
                affine=child.affine,
                group=group,
            )
            new.load_state_dict(child.state_dict())
            new.to(child.weight.device)
            if child.affine:
                new.weight, new.bias = child.weight, child.bias
            setattr(module, name, new)
        else:
            convert(child, group)
    return module


def average_buffers(module: nn.Module, group: Any) -> None:
    """Average BatchNorm running statistics over the group (collective: every rank calls it).

    Without SyncBatchNorm each rank's running statistics follow its own shard; before a
    checkpoint or sampling they are averaged so that every rank holds the same model.
    """
    size = dist.get_world_size(group)
    for buf_name, buf in module.named_buffers():
        if buf_name.endswith(("running_mean", "running_var")):
            dist.all_reduce(buf, group=group)
            buf.div_(size)

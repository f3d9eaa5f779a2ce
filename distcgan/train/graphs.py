"""The fused step captured once as a CUDA graph and replayed (--cuda-graphs).

A fused step is a few hundred small kernels; launched one by one from Python, a GPU waits on
the launches. Captured, one replay launches them all. What capture requires, and how it is met:
- inputs at fixed addresses: each step's fused batch is copied into the captured tensors;
- no host work inside: the step has no .item(), Adam keeps its per-class step counts on the
  device (fused.FusedAdam), G's moving average reads them there, and autocast's weight cache
  is off (cast anew inside the graph);
- D frozen for G's update: requires_grad is a Python flag, so the captured G update is the
  frozen one, as eager;
- warm-up steps on a side stream before capture (cuDNN picks its kernels): they run on a saved
  copy of every tensor the step changes, which is then put back, so no step is taken twice.
The graph holds the fused tensors' addresses: a rollback writes a class's slices in place and
the graph stays valid; a class leaving makes a new group and a new graph. G and D must share
one GPU (a graph is captured on one device's stream).
Leaves out: whether to use it (FusedPairs.update) and the step itself (FusedPairs.eager_update).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from distcgan.train.step import Batch

WARMUP_STEPS = 3


class GraphedStep:
    """Call with a fused step's batches: the step's STAT_KEYS, (F, S), as
    FusedPairs.eager_update gives; its graph is that very update, captured.

    Warm-up, capture and replay run with the step's GPU as the current device, and capture uses
    the warm-up's stream: torch.cuda.graph's own stream, and the random generator it registers
    for dropout, are the current device's, which is not cuda:0 for a rank on cuda:1. The graph
    keeps no reference to the group (fp), so a group that is re-fused is freed at once, with the
    graph's memory pool."""

    def __init__(self, fp: Any, batches: list[Batch]) -> None:  # fp: a fused.FusedPairs
        # Augmentation draws live on the GPU here (Feed.batches copies them there; a graph
        # cannot copy from the host): each replay's draws are copied in before it.
        self.inputs = [
            Batch(
                b.real.clone(),
                None,
                b.z.clone(),
                None,
                None if b.aug is None else b.aug.to(b.real.device).clone(),
            )
            for b in batches
        ]
        self.device = self.inputs[0].real.device

        def step(side: torch.cuda.Stream) -> torch.Tensor:
            return fp.eager_update(self.inputs, graph_safe=True)

        with torch.cuda.device(self.device):
            side = _warm_up(self.device, [fp], step)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, stream=side):
                self.stats = step(side)

    def __call__(self, batches: list[Batch]) -> torch.Tensor:
        with torch.cuda.device(self.device):
            for mine, b in zip(self.inputs, batches):
                mine.real.copy_(b.real)
                mine.z.copy_(b.z)
                if mine.aug is not None and b.aug is not None:
                    mine.aug.copy_(b.aug)
            self.graph.replay()
            return self.stats.clone()


class GraphedStreams:
    """K unfused pairs (each a FusedPairs of one class) captured in one CUDA graph, each pair's
    step on its own stream forked from the capture stream and joined back, so the graph's K
    branches may run at once with no grouped kernels: the alternative to a fused group that
    `distcgan bench --streams` times (issue #26). Call with each pair's batches: the pairs'
    STAT_KEYS, (K, S). Warmed up as GraphedStep is (_warm_up), on the very streams it is
    captured on (a stream's lazy state, cuBLAS's workspace among it, is made outside capture).
    torch hands out streams from a pool of 32 a device: from K = 32 on, some branches share a
    stream and run one after the other. Unaugmented, unconditional pairs (what bench times)."""

    def __init__(self, fps: list[Any], batches: list[list[Batch]]) -> None:
        assert all(b.aug is None and b.fake_labels is None for bs in batches for b in bs)
        self.inputs = [
            [Batch(b.real.clone(), None, b.z.clone(), None, None) for b in bs] for bs in batches
        ]
        self.device = self.inputs[0][0].real.device
        pairs = list(zip(fps, self.inputs))

        with torch.cuda.device(self.device):
            streams = [torch.cuda.Stream(self.device) for _ in fps]

            def steps(side: torch.cuda.Stream) -> torch.Tensor:
                stats = []
                for (fp, inputs), stream in zip(pairs, streams):
                    stream.wait_stream(side)  # fork from the capture stream
                    with torch.cuda.stream(stream):
                        stats.append(fp.eager_update(inputs, graph_safe=True))
                for stream in streams:  # join: the capture ends after every branch
                    side.wait_stream(stream)
                return torch.stack([x.reshape(-1) for x in stats])

            side = _warm_up(self.device, fps, steps)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, stream=side):
                self.stats = steps(side)

    def __call__(self, batches: list[list[Batch]]) -> torch.Tensor:
        with torch.cuda.device(self.device):
            for mine, theirs in zip(self.inputs, batches):
                for m, b in zip(mine, theirs):
                    m.real.copy_(b.real)
                    m.z.copy_(b.z)
            self.graph.replay()
            return self.stats.clone()


def _warm_up(
    device: torch.device, fps: list[Any], step: Callable[[torch.cuda.Stream], Any]
) -> torch.cuda.Stream:
    """WARMUP_STEPS of `step(side)` on a new side stream (cuDNN picks its kernels), then every
    tensor the groups `fps` change, and the GPU's random state, put back as they were, so no step
    is taken twice; the side stream, for the capture. Called with `device` current."""
    saved, rng = [_state(fp) for fp in fps], torch.cuda.get_rng_state(device)
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(WARMUP_STEPS):
            step(side)
    torch.cuda.current_stream(device).wait_stream(side)
    for fp, state in zip(fps, saved):
        _put_back(fp, state)
    torch.cuda.set_rng_state(rng, device)
    return side


def _tensors(fp: Any) -> list[torch.Tensor]:
    """Every tensor a step changes: weights, buffers, G's average, Adam's state."""
    nets = [fp.G, fp.D] + ([fp.G_ema] if fp.G_ema is not None else [])
    out = [t for net in nets for t in (*net.parameters(), *net.buffers())]
    for opt in (fp.opt_g, fp.opt_d):
        out += [*opt.exp_avg, *opt.exp_avg_sq, opt.steps]
    return out


def _state(fp: Any) -> list[torch.Tensor]:
    with torch.no_grad():
        return [t.detach().clone() for t in _tensors(fp)]


def _put_back(fp: Any, saved: list[torch.Tensor]) -> None:
    with torch.no_grad():
        for t, s in zip(_tensors(fp), saved):
            t.copy_(s)

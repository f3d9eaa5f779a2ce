"""F classes' G/D pairs trained at once as one fused pair on one device (horizontal fusion).

The per-class pairs of a rank all have the same shapes, so F of them are one network: models.py
builds it (grouped convolutions, BatchNorm over F x C channels, batched matmuls), and every fused
tensor reshaped to (F, *its shape alone) holds class k's at [k]. Adam is element-wise, and here
it keeps one step count per class (`FusedAdam`), so each class's update is what it is alone,
even after one class alone was rolled back to its checkpoint.

A `FusedPairs` is the step object (step.PairStep) of such a group. It does not own the classes:
each member keeps its own `Pair` (its noise generator, step, training time, retries) and feed,
whose weights and Adam state are brought up to date by `store` before a checkpoint, a grid or
leaving the group, and written into the fused tensors by `load` (joining, or after a
rollback). So checkpoints stay per class and unfused, and `sample`, `evaluate` and `--resume`
(with any F, rank count or devices) see what an unfused run writes.
Under --schedule async the group steps as one pair does (schedule.async_step): a fused D_copy on
G's device and fused cached fakes (class k's at channels [k*C, (k+1)*C), as its real images),
each member's own cache brought in by `load` and written back by `store`, so a checkpoint holds
what an unfused run's does; a member that has no cache yet (step 0) makes its first from its own
pair, as it would alone.
Leaves out: the step's arithmetic (step.gan_step, schedule.async_step), its CUDA graph
(graphs.py) and the loop (loop.py).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from distcgan.config import TrainConfig
from distcgan.train.graphs import GraphedStep
from distcgan.train.init_from import freeze
from distcgan.train.models import Discriminator, Generator
from distcgan.train.schedule import async_step, first_cache
from distcgan.train.step import Batch, Member, Nets, StepOptions, augmenting, gan_step


def _slot(t: torch.Tensor, fuse: int, k: int) -> torch.Tensor:
    """Class k's part of a fused tensor, flattened (a view: the fused tensor is contiguous)."""
    return t.view(fuse, -1)[k]


class FusedAdam:
    """Adam over fused parameters with one step count per class.

    torch.optim.Adam's arithmetic (its single-tensor form, which a CPU runs), element by element,
    with the bias corrections taken per class from that class's own count.
    """

    def __init__(
        self, params: list[nn.Parameter], fuse: int, lr: float, betas: tuple[float, float]
    ) -> None:
        self.params, self.fuse, self.lr, self.betas, self.eps = params, fuse, lr, betas, 1e-8
        self.exp_avg = [torch.zeros_like(p) for p in params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in params]
        self.steps = torch.zeros(fuse, dtype=torch.float64, device=params[0].device)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        beta1, beta2 = self.betas
        self.steps += 1
        dtype = self.params[0].dtype
        neg_step_size = (-self.lr / (1 - beta1**self.steps)).to(dtype)[:, None]
        bias2_sqrt = (1 - beta2**self.steps).sqrt().to(dtype)[:, None]
        for p, m, v in zip(self.params, self.exp_avg, self.exp_avg_sq):
            if p.grad is None:
                continue
            g = p.grad
            m.lerp_(g, 1 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            denom = (v.view(self.fuse, -1).sqrt() / bias2_sqrt).add_(self.eps)
            # addcdiv_(m, denom, value=-step_size) computes p + (value * m) / denom
            p.view(self.fuse, -1).add_(neg_step_size * m.view(self.fuse, -1) / denom)

    def load(self, k: int, opt: torch.optim.Optimizer, params: list[nn.Parameter]) -> None:
        """Class k's Adam state from its own optimizer (over `params`, in the same order)."""
        step = 0.0
        for i, p in enumerate(params):
            state = opt.state.get(p, {})
            if "step" in state:
                step = float(state["step"])
                _slot(self.exp_avg[i], self.fuse, k).copy_(state["exp_avg"].reshape(-1))
                _slot(self.exp_avg_sq[i], self.fuse, k).copy_(state["exp_avg_sq"].reshape(-1))
            else:  # a fresh optimizer: no state yet
                _slot(self.exp_avg[i], self.fuse, k).zero_()
                _slot(self.exp_avg_sq[i], self.fuse, k).zero_()
        self.steps[k] = step

    def store(self, k: int, opt: torch.optim.Optimizer, params: list[nn.Parameter]) -> None:
        """Class k's Adam state into its own optimizer, as torch.optim.Adam holds it (none for
        a parameter --freeze-d keeps frozen, which Adam alone never steps)."""
        step = float(self.steps[k])
        if step == 0:
            return
        group = opt.param_groups[0]
        on_device = group.get("fused") or group.get("capturable")
        for i, p in enumerate(params):
            if not self.params[i].requires_grad:
                continue
            opt.state[p] = {
                "step": torch.tensor(step, device=p.device if on_device else "cpu"),
                "exp_avg": _slot(self.exp_avg[i], self.fuse, k).view_as(p).clone(),
                "exp_avg_sq": _slot(self.exp_avg_sq[i], self.fuse, k).view_as(p).clone(),
            }


class FusedPairs:
    """F classes' pairs as one fused G (on G's device) and one fused D (on D's device), with
    G's moving average and an Adam per network. Member k is `members[k]`, whose `pair` is an
    unfused Pair and whose `feed` gives its batches."""

    def __init__(
        self, cfg: TrainConfig, channels: int, members: list[Member], devices: tuple[str, str]
    ) -> None:
        f = len(members)
        self.cfg, self.fuse, self.members, self.devices = cfg, f, members, devices
        # Parameters stay contiguous (no channels_last): a class's slice is then a plain view.
        # Built without touching the CPU's random state (their initial values are overwritten
        # below), which D's dropout masks draw from: a resumed group continues the same masks.
        with torch.random.fork_rng(devices=[]):
            self.G = Generator(cfg.z_dim, channels, cfg.resolution, 0, fuse=f)
            self.D = Discriminator(
                channels, cfg.resolution, 0, cfg.d_dropout, fuse=f, bn_eps=cfg.d_bn_eps
            )
        self.G, self.D = self.G.to(devices[0]), self.D.to(devices[1])
        freeze(self.D, cfg.freeze_d)  # every class's first N blocks, before any CUDA graph
        self.G_ema = None
        if cfg.ema_decay > 0:
            self.G_ema = copy.deepcopy(self.G).eval().requires_grad_(False)
        betas = (cfg.beta1, cfg.beta2)
        self.opt_g = FusedAdam(list(self.G.parameters()), f, cfg.lr_g, betas)
        self.opt_d = FusedAdam(list(self.D.parameters()), f, cfg.lr_d, betas)
        # num_batches_tracked is one number for the fused BatchNorm: each member's own count is
        # its count when it joined plus the fused count since (`_counts_at_load`).
        self._counts_at_load: list[dict[str, int]] = [{} for _ in members]
        self.graphed = use_graphs(cfg, devices)
        self.graph: Any = None  # the step captured as a CUDA graph (graphs.py), once made
        # --schedule async: what schedule.async_step reads and writes on a pair, fused (the
        # members' cached fakes, a D copy on G's device); members with no cache yet.
        self.D_copy: nn.Module | None = None
        self.cache: list[torch.Tensor] | None = None
        self.cache_labels: list[torch.Tensor] | None = None  # per-class: G is asked no labels
        self._uncached: set[int] = set()
        if cfg.schedule == "async":
            self.D_copy = copy.deepcopy(self.D).to(devices[0]).requires_grad_(False)
        for k in range(f):
            self.load(k)

    # ---- the step -------------------------------------------------------------------------

    def batches(self) -> list[Batch]:
        """The members' batches, each drawn from its own feed at its own step, as one fused
        batch: class k's images at channels [k*C, (k+1)*C), its noise at columns
        [k*z_dim, (k+1)*z_dim)."""
        how = StepOptions.of(self.cfg)
        per_class = [
            m.feed.batches(m.pair.step, m.pair.noise, augmenting(m.pair, how)) for m in self.members
        ]
        fused = []
        for micro in zip(*per_class):
            real = torch.cat([b.real for b in micro], dim=1)
            z = torch.cat([b.z for b in micro], dim=1)
            # augmentation draws member after member: class k's at [k*B, (k+1)*B)
            aug = torch.cat([b.aug for b in micro], dim=1) if micro[0].aug is not None else None
            fused.append(Batch(real=real, real_labels=None, z=z, fake_labels=None, aug=aug))
        return fused

    def update(self, batches: list[Batch]) -> torch.Tensor:
        """The fused D and G updates and G's average on these batches, each member's step
        counted; the STAT_KEYS per member, (F, S). Eager, or where `use_graphs` says, replayed
        from a CUDA graph captured at the group's first step."""
        if self.graphed:
            if self.graph is None:
                self.graph = GraphedStep(self, batches)
            stats = self.graph(batches)
        else:
            stats = self.eager_update(batches)
        for m in self.members:
            m.pair.step += 1
        return stats

    def eager_update(self, batches: list[Batch], graph_safe: bool = False) -> torch.Tensor:
        """The update itself, without counting steps: what a CUDA graph captures."""
        how = StepOptions.of(self.cfg, graph_safe)
        if self.cfg.schedule == "async":
            for k in sorted(self._uncached):
                self._first_cache(k, batches, how)
            bd = self.cfg.batch_size_d // self.cfg.grad_accum  # per micro-batch; 0: all
            stats = async_step(self, self.nets, batches, how, bd)
        else:
            stats = gan_step(self, self.nets, batches, how)
        self.update_ema(self.cfg.ema_decay)
        return stats.view(self.fuse, -1)  # a group of one gives (S,)

    def step(self) -> torch.Tensor:
        return self.update(self.batches())

    def reloading(self) -> contextlib.AbstractContextManager[Any]:
        """A member's checkpoint restores the random state it saved; the group's stream (D's
        dropout masks for every member) goes on as it was."""
        gpus = sorted({torch.device(d).index or 0 for d in self.devices if d.startswith("cuda")})
        return torch.random.fork_rng(devices=gpus)

    def _first_cache(self, k: int, batches: list[Batch], how: StepOptions) -> None:
        """Member k's first cached fakes (async, step 0), made by its own pair from its own part
        of the fused batches as alone (schedule.first_cache: G's BatchNorm statistics move, and
        G_ema's follow them, as its step's update_ema makes them), then taken in again."""
        C, Z = batches[0].real.shape[1] // self.fuse, batches[0].z.shape[1] // self.fuse
        B = batches[0].z.shape[0]
        mine = [
            Batch(
                real=b.real[:, k * C : (k + 1) * C],
                real_labels=None,
                z=b.z[:, k * Z : (k + 1) * Z].contiguous(),
                fake_labels=None,
                aug=None if b.aug is None else b.aug[:, k * B : (k + 1) * B],
            )
            for b in batches
        ]
        pair = self.members[k].pair
        first_cache(pair, mine, how)
        if pair.G_ema is not None:  # its BatchNorm statistics are G's after every step
            with torch.no_grad():
                for b_ema, b in zip(pair.G_ema.buffers(), pair.G.buffers()):
                    b_ema.copy_(b)
        self.load(k)

    # ---- the members ----------------------------------------------------------------------

    def _nets(self, k: int) -> Iterator[tuple[str, nn.Module, nn.Module]]:
        pair = self.members[k].pair
        yield "G", self.G, pair.G
        yield "D", self.D, pair.D
        if self.G_ema is not None and pair.G_ema is not None:
            yield "G_ema", self.G_ema, pair.G_ema

    @property
    def nets(self) -> Nets:
        """What the step calls: the fused networks themselves (a rank alone: no DDP)."""
        return Nets(self.G, self.D)

    @torch.no_grad()
    def load(self, k: int) -> None:
        """Member k's weights, BatchNorm statistics and Adam state into the fused tensors."""
        pair = self.members[k].pair
        for role, fused, net in self._nets(k):
            alone = net.state_dict()
            for name, t in fused.state_dict().items():
                if t.ndim == 0:  # num_batches_tracked
                    self._counts_at_load[k][f"{role}.{name}"] = int(t)
                else:
                    _slot(t, self.fuse, k).copy_(alone[name].reshape(-1))
        self.opt_g.load(k, pair.opt_g, list(pair.G.parameters()))
        self.opt_d.load(k, pair.opt_d, list(pair.D.parameters()))
        if self.D_copy is not None:
            self._load_async(k)

    def _load_async(self, k: int) -> None:
        """Member k's cached fakes into the fused cache (or k is marked uncached), and D_copy
        refreshed from D: between steps D's copy is D, for every member."""
        assert self.D_copy is not None
        for c, d in zip(self.D_copy.state_dict().values(), self.D.state_dict().values()):
            c.copy_(d)
        cache = self.members[k].pair.cache
        if cache is None:
            self._uncached.add(k)
            return
        self._uncached.discard(k)
        if self.cache is None:
            self.cache = [
                x.new_zeros(x.shape[0], self.fuse * x.shape[1], *x.shape[2:]) for x in cache
            ]
        C = cache[0].shape[1]
        for fused, x in zip(self.cache, cache):
            fused[:, k * C : (k + 1) * C].copy_(x)

    @torch.no_grad()
    def store(self, k: int) -> None:
        """Member k's slices into its own pair: after this, pair_state(member) is its checkpoint."""
        pair = self.members[k].pair
        for role, fused, net in self._nets(k):
            alone = net.state_dict()
            for name, t in fused.state_dict().items():
                if t.ndim == 0:
                    key = f"{role}.{name}"
                    alone[name] += int(t) - self._counts_at_load[k][key]
                    self._counts_at_load[k][key] = int(t)
                else:
                    alone[name].copy_(_slot(t, self.fuse, k).view_as(alone[name]))
        self.opt_g.store(k, pair.opt_g, list(pair.G.parameters()))
        self.opt_d.store(k, pair.opt_d, list(pair.D.parameters()))
        if pair.D_copy is not None:  # async: D's copy is D between steps
            pair.D_copy.load_state_dict(pair.D.state_dict())
            if self.cache is not None and k not in self._uncached:
                C = self.cache[0].shape[1] // self.fuse
                pair.cache = [x[:, k * C : (k + 1) * C].clone() for x in self.cache]

    @torch.no_grad()
    def update_ema(self, decay: float) -> None:
        """After a step: G_ema <- G_ema + (1 - d) (G - G_ema) per class, d warmed up on each
        member's step before it as alone.update_ema does (G's Adam count less one, on the
        device: no host work, so a CUDA graph can hold it); BatchNorm statistics are G's own."""
        if self.G_ema is None:
            return
        steps = self.opt_g.steps - 1
        d = torch.clamp((1 + steps) / (10 + steps), max=decay)
        weight = (1.0 - d).to(next(self.G.parameters()).dtype)[:, None]
        for p_ema, p in zip(self.G_ema.parameters(), self.G.parameters()):
            p_ema.view(self.fuse, -1).lerp_(p.view(self.fuse, -1), weight)
        for b_ema, b in zip(self.G_ema.buffers(), self.G.buffers()):
            b_ema.copy_(b)


def use_graphs(cfg: TrainConfig, devices: tuple[str, str]) -> bool:
    """Whether a fused group on (G's, D's) device replays its step from a CUDA graph: with
    --cuda-graphs auto where it can (G and D on one GPU, --schedule sync: on an H100 the graph
    was 1.1x to 4.4x the eager fused step, and the fastest of the steps measured:
    docs/performance.md), with on always (job.py and config.py have refused what cannot be
    graphed), with off never."""
    if cfg.cuda_graphs == "auto":
        return devices[0] == devices[1] and devices[0].startswith("cuda") and cfg.schedule == "sync"
    return cfg.cuda_graphs == "on"


# ---- how many classes to fuse ----------------------------------------------------------------


def fuse_size(
    cfg: TrainConfig,
    n_tasks: int,
    group_size: int,
    devices: tuple[str, str],
    channels: int,
    class_images: int,
) -> int:
    """Classes a rank trains at once. Fusion is for a rank's per-class pairs when it trains them
    alone; with --fuse K at most K, with auto 1 on CPUs (the fused step is slower there) and on
    GPUs as many as `auto_fuse` finds room for."""
    if cfg.mode != "per-class" or group_size > 1 or n_tasks <= 1:
        return 1
    if cfg.fuse != "auto":
        return min(int(cfg.fuse), n_tasks)
    if not devices[1].startswith("cuda"):
        return 1
    g_bytes, d_bytes = class_bytes(cfg, class_images, channels)
    if devices[0] == devices[1]:
        return auto_fuse(n_tasks, [(_free_bytes(devices[0]), g_bytes + d_bytes)])
    return auto_fuse(
        n_tasks, [(_free_bytes(devices[0]), g_bytes), (_free_bytes(devices[1]), d_bytes)]
    )


def auto_fuse(n_tasks: int, budgets: list[tuple[int, int]]) -> int:
    """The most classes that fit every device: each (free bytes, bytes one class needs there)
    gets half its free memory, the rest being headroom for the allocator's fragmentation,
    cuDNN's workspaces and the estimate's error; at least 1, at most the rank's tasks."""
    fit = min(free // 2 // max(need, 1) for free, need in budgets)
    return max(1, min(n_tasks, fit))


def _free_bytes(device: str) -> int:
    return int(torch.cuda.mem_get_info(torch.device(device))[0])


def class_bytes(cfg: TrainConfig, class_images: int, channels: int) -> tuple[int, int]:
    """Bytes one class adds to a fused G's device and a fused D's, float32 throughout:
    - weights, gradients and Adam's two moments (and G's moving average), and the class's own
      pair beside the fused tensors (weights, Adam's moments, G's average; no gradients);
    - every layer's output for one step, twice (kept for backward, and its gradient), counted
      by running the networks on the meta device (no memory, no compute): G at the batch, D at
      twice the batch (real and fake in one);
    - D's device also holds the class's real images;
    - with --schedule async, G's device also D's copy, fused and the class's own, and the real
      images G's half puts beside its fakes, and D's device the cached fakes, fused and the
      class's own (D's outputs are still counted at twice the batch: G's step through the copy
      needs no more)."""
    B, R = cfg.batch_size, cfg.resolution
    G = Generator(cfg.z_dim, channels, R).to("meta")
    D = Discriminator(channels, R, 0, cfg.d_dropout).to("meta")
    copies_g = 9 if cfg.ema_decay > 0 else 7  # fused 5 (or 4), the class's own 4 (or 3)
    g_bytes = 4 * (copies_g * _numel(G) + 2 * _outputs(G, torch.empty(B, cfg.z_dim, device="meta")))
    x = torch.empty(2 * B, channels, R, R, device="meta")
    d_bytes = 4 * (7 * _numel(D) + 2 * _outputs(D, x) + class_images * channels * R * R)
    if cfg.schedule == "async":
        g_bytes += 2 * 4 * _numel(D) + 4 * B * channels * R * R
        d_bytes += 2 * 4 * B * channels * R * R
    return g_bytes, d_bytes


def _numel(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


def _outputs(net: nn.Module, x: torch.Tensor) -> int:
    """Elements of every leaf module's output for input x."""
    sizes: list[int] = []
    hooks = [
        m.register_forward_hook(lambda m, i, out: sizes.append(out.numel()))
        for m in net.modules()
        if not list(m.children())
    ]
    with torch.no_grad():
        net(x)
    for h in hooks:
        h.remove()
    return sum(sizes)

"""A task in training: what a rank's tasks share (`TrainJob`), one task's state (`TaskState`:
its pair, feed, files and log interval), how a task starts (from the data and its last
checkpoint), and what it reports (events on stdout, its summary row).

Leaves out: the loop and its decisions (loop.py), the step (alone.py, fused.py, step.py).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from distcgan.config import TrainConfig
from distcgan.data import DatasetInfo, load_class
from distcgan.faults import Fault
from distcgan.images import to_float
from distcgan.mpi.context import RankContext, TrainGroup
from distcgan.mpi.group import wrap
from distcgan.mpi.signals import StopRequest
from distcgan.plan import Task, class_seed
from distcgan.run.rundir import RunDir, Status, TaskRow
from distcgan.train.files import N_FIXED, TaskFiles
from distcgan.train.groupbn import convert
from distcgan.train.init_from import StartWeights, freeze, start_pair
from distcgan.train.pair import Pair, PairSpec, load_pair
from distcgan.train.perf import sync
from distcgan.train.step import STAT_KEYS, Feed, Nets
from distcgan.train.timelimit import TimeLimit

# What training time leaves out, timed apart (TaskState.spent): checkpoint and grid writes, and
# --score-every's scores.
SIDE_WORK = ("checkpoint", "grid", "score")


class Scorer(Protocol):
    """What training needs of --score-every's scorer (eval/sampling/during.py builds one and
    passes its builder to job.train_run: train/ imports nothing of eval/, which sits above it)."""

    def score(self, pair: Pair, task: Task) -> dict[str, Any]:
        """The pair's score_* values now (called on the group's first rank only)."""
        ...


@dataclass(frozen=True)
class TrainJob:
    """What every task of this rank shares in one launch of `train`."""

    cfg: TrainConfig
    ctx: RankContext  # with its group connected (group.connect_group)
    run: RunDir
    data: DatasetInfo
    fault: Fault | None = None  # --inject-fault (tests only)
    stop: StopRequest | None = None  # set by a scheduler's stop signal
    advance: Callable[[int], object] = lambda n: None  # the progress bar
    scorer: Scorer | None = None  # --score-every's network and real statistics
    # What a second of the group's training costs: the sum over its ranks of (CPU threads, 0)
    # on the CPU or (0, GPUs of G and D) (group_cost; RankContext.cost_units alone).
    cost: tuple[float, float] = (1.0, 0.0)
    start: StartWeights | None = None  # --init-from's weights, the same on every rank

    @property
    def group(self) -> TrainGroup:
        """The ranks that train this rank's task(s) with it."""
        return self.ctx.group

    @property
    def stop_asked(self) -> bool:
        """Whether a stop signal reached this rank (the group decides: TrainGroup.agree_stop)."""
        return self.stop is not None and self.stop.requested

    def spec(self, task: Task) -> PairSpec:
        return PairSpec(self.cfg, task, self.data.channels, self.data.num_classes)

    @property
    def devices(self) -> tuple[str, str]:
        return self.ctx.device_g, self.ctx.device_d

    def warn(self, msg: str) -> None:
        log_event(self.ctx, "warning", message=msg)


def group_cost(ctx: RankContext) -> tuple[float, float]:
    """Collective in the rank's group: TrainJob.cost, the group's ranks' cost_units summed."""
    cores, gpus = ctx.group.mean([float(u) for u in ctx.cost_units])
    return round(cores * ctx.group.size, 6), round(gpus * ctx.group.size, 6)  # whole numbers


def log_event(ctx: RankContext, event: str, **fields: Any) -> None:
    """One JSON line on stdout per event, tagged with the rank, flushed at once.

    One write call per line: the launcher merges every rank's stdout, and a line written in
    pieces (as print() does) can be interleaved with another rank's.
    """
    sys.stdout.write(json.dumps({"rank": ctx.rank, "event": event, **fields}) + "\n")
    sys.stdout.flush()


def load_rows(
    cfg: TrainConfig, task: Task, group: TrainGroup, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's real images of the task (floats in [-1, 1] on `device`) and their labels:
    every row, or with data_shard in a group, every group.size-th row of each class."""
    part = (group.rank, group.size) if cfg.data_shard and group.size > 1 else None
    images, labels = [], []
    for k in task.class_ids:
        x = to_float(load_class(cfg.data, k, part), device)
        images.append(x)
        labels.append(torch.full((x.shape[0],), k, dtype=torch.long, device=device))
    real = torch.cat(images)
    if cfg.channels_last:
        real = real.contiguous(memory_format=torch.channels_last)
    return real, torch.cat(labels)


def group_nets(job: TrainJob) -> Callable[[Pair], Nets]:
    """How a pair's modules are called in this rank's group: with a group, BatchNorm over the
    group (sync_bn) and DDP; alone, the pair's own (sync_bn too: the same arithmetic whatever
    the group's size)."""

    def nets(pair: Pair) -> Nets:
        if job.cfg.sync_bn:
            convert(pair.G, job.group.pg)
            convert(pair.D, job.group.pg)
            freeze(pair.D, job.cfg.freeze_d)  # its BatchNorm layers are new modules now
        dev_g, dev_d = job.devices
        return Nets(G=wrap(pair.G, job.group, dev_g), D=wrap(pair.D, job.group, dev_d))

    return nets


@dataclass
class TaskState:
    """One task in training (a step.Member): its pair (G, D, optimizers, RNGs, step), its data
    feed, its files, the loss sums and time of the current log interval, and its time limit."""

    spec: PairSpec
    files: TaskFiles
    pair: Pair
    feed: Feed
    images: int  # this rank's real images of the task
    load_s: float
    start: int  # the step this launch started from
    sums: torch.Tensor  # the step's STAT_KEYS summed over the interval
    grid: tuple[torch.Tensor, torch.Tensor | None]  # the grids' fixed noise and labels
    n_sum: int = 0
    interval_s: float = 0.0  # this task's share of the interval's training time so far
    limit: TimeLimit = field(default_factory=TimeLimit)  # --time-limit-s (none by default)
    # This launch's seconds and counts of what training leaves out (summary.json's rows)
    side_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SIDE_WORK, 0.0))
    side_n: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SIDE_WORK, 0))

    @property
    def ident(self) -> dict[str, Any]:
        return {"task": self.spec.task.name, "class_id": self.spec.task.class_id}

    def count_time(self, share_s: float, cost: tuple[float, float]) -> None:
        """`share_s` more seconds of training, the task's share of the time since the loop last
        looked; they cost `cost` (TrainJob.cost) each."""
        cores, gpus = cost
        self.pair.train_s += share_s
        self.pair.core_s += share_s * cores
        self.pair.gpu_s += share_s * gpus
        self.interval_s += share_s

    def spent(self, work: str, t0: float) -> None:
        """One `work` (SIDE_WORK) done since perf_counter() read `t0` (the device synchronised
        first: the loop's clock `now` waits for it before every decision)."""
        self.side_s[work] += time.perf_counter() - t0
        self.side_n[work] += 1

    def interval_means(self) -> list[float]:
        """This rank's mean STAT_KEYS over the log interval (a group then takes the mean over
        its ranks: TrainGroup.mean); the sums start again from zero."""
        means = (self.sums / self.n_sum).tolist()
        self.sums.zero_()
        return means

    @property
    def fault_key(self) -> int:
        """The class an injected fault names: the class id, or -1 for gan/cgan's one model."""
        return -1 if self.spec.task.class_id is None else self.spec.task.class_id


def start_task(job: TrainJob, task: Task) -> TaskState:
    """Load this rank's rows of the task onto D's device, then build G and D or restore them
    (weights, Adam, every RNG) from the task's last checkpoint."""
    cfg, group, (dev_g, dev_d) = job.cfg, job.group, job.devices
    spec = job.spec(task)
    tb_dir = job.run.tensorboard(task.name) if cfg.tensorboard else None
    files = TaskFiles(job.run.task(task.name), cfg, group, tb_dir)
    t0 = time.perf_counter()
    real, labels = load_rows(cfg, task, group, dev_d)
    sync(dev_d)
    load_s = time.perf_counter() - t0
    pair = load_task_pair(job, spec, files)
    files.truncate_metrics(pair.step)
    feed = Feed(
        real=real,
        labels=labels,
        task_classes=torch.tensor(task.class_ids),
        conditional=task.conditional,
        micro=cfg.micro_batch(group.size),
        accum=cfg.grad_accum,
        group_rank=group.rank,
        group_size=group.size,
        shard=cfg.data_shard,
        data_seed=class_seed(cfg.seed, task.key, "data"),
        z_dim=cfg.z_dim,
        device_g=dev_g,
    )
    sums = torch.zeros(len(STAT_KEYS), device=dev_d)
    grid = grid_inputs(job, task)
    t = TaskState(spec, files, pair, feed, int(real.shape[0]), load_s, pair.step, sums, grid)
    t.limit = TimeLimit.of(cfg)
    continue_interval(t)
    return t


def load_task_pair(job: TrainJob, spec: PairSpec, files: TaskFiles) -> Pair:
    """The task's pair as its last checkpoint holds it, or new (pair.load_pair); the one place
    a launch (start_task) and a rollback (loop.rollback) get a pair. A new one at step 0 starts
    from --init-from's weights (no random draws: its seeds' streams are a pair's from scratch),
    and every pair has D's first --freeze-d blocks frozen, before its step wraps or fuses it."""
    group_at = (job.group.rank, job.group.size)
    pair = load_pair(spec, files.dir.path, job.devices, job.warn, group_at, job.cost)
    if job.start is not None and pair.step == 0:
        start_pair(pair, job.start)
    freeze(pair.D, job.cfg.freeze_d)
    return pair


def continue_interval(t: TaskState) -> None:
    """The log interval as the pair's checkpoint left it (Pair.interval): its sums, steps and
    seconds so far, or a fresh interval when the checkpoint is at a log step (or none)."""
    saved, t.pair.interval = t.pair.interval, None
    t.sums.zero_()
    t.n_sum, t.interval_s = 0, 0.0
    if saved is not None and saved["sums"].shape == t.sums.shape:  # another STAT_KEYS: fresh
        t.sums.copy_(saved["sums"])
        t.n_sum, t.interval_s = int(saved["steps"]), float(saved["seconds"])


def interval_state(t: TaskState) -> dict[str, Any] | None:
    """What a checkpoint keeps of the log interval under way (Pair.interval); None at a log
    step, where the interval has just been written."""
    if t.n_sum == 0:
        return None
    return {"sums": t.sums.cpu(), "steps": t.n_sum, "seconds": t.interval_s}


def grid_inputs(job: TrainJob, task: Task) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The grids' fixed noise (from the task's seed) and, for a conditional G, their labels:
    one class per row of 8, cycling through the task's classes."""
    gen = torch.Generator().manual_seed(class_seed(job.cfg.seed, task.key, "fixed"))
    z = torch.randn(N_FIXED, job.cfg.z_dim, generator=gen).to(job.ctx.device_g)
    row_class = torch.tensor(task.class_ids)[(torch.arange(N_FIXED) // 8) % len(task.class_ids)]
    return z, (row_class.to(job.ctx.device_g) if task.conditional else None)


def log_start(job: TrainJob, t: TaskState) -> None:
    log_event(
        job.ctx,
        "class_start",
        **t.ident,
        images=t.images,
        start_step=t.pair.step,
        steps=job.cfg.steps,
        device_g=job.ctx.device_g,
        device_d=job.ctx.device_d,
        group=list(job.group.ranks),
        batch_per_rank=t.feed.per_rank,
        effective_batch=t.feed.per_rank * job.group.size,
    )
    job.advance(t.pair.step)


def metrics_line(step: int, means: list[float], s_per_step: float, rank: int) -> dict[str, Any]:
    """One line of metrics.jsonl; its rank and wall-clock time place it on the report's
    per-rank timeline."""
    return {
        "step": step,
        **dict(zip(STAT_KEYS, means)),
        "s_per_step": s_per_step,
        "rank": rank,
        "time_unix": round(time.time(), 3),
    }


def finish_task(job: TrainJob, t: TaskState, status: Status) -> TaskRow | None:
    """The task's summary row on the group's first rank (None on the others), and its
    result.json once it is done; each replica of a group first logs what it ends with."""
    if job.group.size > 1:
        log_replica(job, t)
    row = task_result(job, t, status)
    if status == "done" and job.group.lead:
        t.files.write_result(row.to_dict())
        log_event(
            job.ctx,
            "class_done",
            **t.ident,
            steps=t.pair.step,
            train_s=row.train_s,
            imgs_per_s=row.imgs_per_s,
        )
    return row if job.group.lead else None


def log_replica(job: TrainJob, t: TaskState) -> None:
    """What each replica of a group ends with: equal digests mean equal weights."""
    log_event(
        job.ctx,
        "replica",
        task=t.spec.task.name,
        group_rank=job.group.rank,
        step=t.pair.step,
        g_sha256=_digest(t.pair.G),
        d_sha256=_digest(t.pair.D),
    )


def task_result(job: TrainJob, t: TaskState, status: Status) -> TaskRow:
    """One task's line of summary.json; images/s over all its steps, every launch included."""
    cfg, ctx, group, task, pair = job.cfg, job.ctx, job.group, t.spec.task, t.pair
    per_rank = cfg.micro_batch(group.size) * cfg.grad_accum
    k = task.class_id
    return TaskRow(
        class_id=k,
        task=task.name,
        name=job.data.class_names[k] if k is not None else _classes(len(task.class_ids)),
        status=status,
        rank=ctx.rank,
        ranks=list(group.ranks),
        host=ctx.host,
        device_g=ctx.device_g,
        device_d=ctx.device_d,
        images=t.images,
        steps=pair.step,
        steps_this_launch=pair.step - t.start,
        effective_batch=per_rank * group.size,
        retries=pair.retries,
        time_up=t.limit.ended(pair),
        train_s=round(pair.train_s, 3),
        core_s=round(pair.core_s, 3),
        gpu_s=round(pair.gpu_s, 3),
        load_s=round(t.load_s, 3),
        checkpoint_s=round(t.side_s["checkpoint"], 3),
        checkpoints=t.side_n["checkpoint"],
        grid_s=round(t.side_s["grid"], 3),
        grids=t.side_n["grid"],
        score_s=round(t.side_s["score"], 3),
        imgs_per_s=round(pair.step * per_rank * group.size / max(pair.train_s, 1e-9), 1),
    )


def _classes(n: int) -> str:
    return "1 class" if n == 1 else f"{n} classes"


def _digest(net: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in sorted(net.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]

"""Training: each task's G/D pair (one per class in per-class mode), alone or data-parallel.

`train_task` is the loop for one task and reads top to bottom: a step, then "is this a log
step?", "is the loss finite?", "is a checkpoint due?", "was a stop asked for?". The parts that
decide for themselves sit beside it: the task's files know when a checkpoint or grid is due
(files.py), `rollback` undoes a non-finite loss, `stop_now` is the one stop rule. In a group of
ranks the decisions are taken together at log steps, and the group's first rank writes.
A task in training is a `TaskState` (its pair, optimizers, files, step); a fused group
(fusedloop.py) holds several, and rank.py runs a rank's tasks, alone or fused.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from distcgan.config import TrainConfig
from distcgan.data import DatasetInfo, load_class
from distcgan.errors import UserError
from distcgan.faults import Fault
from distcgan.images import to_float
from distcgan.mpi.context import RankContext, TrainGroup
from distcgan.mpi.group import wrap
from distcgan.mpi.signals import StopRequest
from distcgan.plan import Task, class_seed
from distcgan.run.rundir import RunDir
from distcgan.train.files import N_FIXED, TaskFiles
from distcgan.train.pair import Pair, PairSpec, load_pair, update_ema
from distcgan.train.perf import sync
from distcgan.train.step import STAT_KEYS, Feed, Nets, batch_indices, gan_step

__all__ = ["TrainJob", "train_task", "batch_indices", "DivergedError", "log_event"]


class DivergedError(UserError):
    """A task's loss stayed non-finite after every allowed retry."""


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

    @property
    def group(self) -> TrainGroup:
        """The ranks that train this rank's task(s) with it."""
        return self.ctx.group

    def spec(self, task: Task) -> PairSpec:
        return PairSpec(self.cfg, task, self.data.channels, self.data.num_classes)

    @property
    def devices(self) -> tuple[str, str]:
        return self.ctx.device_g, self.ctx.device_d


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


def _prepare(pair: Pair, job: TrainJob) -> Nets:
    """The modules a step calls: with a group, BatchNorm over the group (sync_bn) and DDP."""
    if job.cfg.sync_bn:  # also alone: the same arithmetic whatever the group's size
        from distcgan.train.groupbn import convert

        convert(pair.G, job.group.pg)
        convert(pair.D, job.group.pg)
    return Nets(
        G=wrap(pair.G, job.group, job.ctx.device_g), D=wrap(pair.D, job.group, job.ctx.device_d)
    )


@dataclass
class TaskState:
    """One task in training: its pair (G, D, optimizers, RNGs, step), the modules a step calls,
    its data feed, its files, and the loss sums of the current log interval."""

    spec: PairSpec
    files: TaskFiles
    pair: Pair
    nets: Nets
    feed: Feed
    images: int  # this rank's real images of the task
    load_s: float
    start: int  # the step this launch started from
    sums: torch.Tensor  # the step's STAT_KEYS summed over the interval
    n_sum: int = 0
    tick: float = field(default_factory=time.perf_counter)  # start of the interval's clock
    interval_s: float = 0.0  # trained fused: this task's share of the interval's time so far

    @property
    def ident(self) -> dict[str, Any]:
        return {"task": self.spec.task.name, "class_id": self.spec.task.class_id}

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
    pair = load_pair(spec, files.dir.path, job.devices, _warn(job))
    nets = _prepare(pair, job)
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
    return TaskState(spec, files, pair, nets, feed, int(real.shape[0]), load_s, pair.step, sums)


def _warn(job: TrainJob) -> Callable[[str], None]:
    return lambda msg: log_event(job.ctx, "warning", message=msg)


def grid_inputs(job: TrainJob, task: Task) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The grids' fixed noise (from the task's seed) and, for a conditional G, their labels:
    one class per row of 8, cycling through the task's classes."""
    gen = torch.Generator().manual_seed(class_seed(job.cfg.seed, task.key, "fixed"))
    z = torch.randn(N_FIXED, job.cfg.z_dim, generator=gen).to(job.ctx.device_g)
    row_class = torch.tensor(task.class_ids)[(torch.arange(N_FIXED) // 8) % len(task.class_ids)]
    return z, (row_class.to(job.ctx.device_g) if task.conditional else None)


def train_step(job: TrainJob, t: TaskState) -> None:
    """One D and one G update (an injected fault may fire first, or poison the loss)."""
    pair = t.pair
    poisoned = job.fault is not None and job.fault.at_step(t.fault_key, pair.step, pair.retries)
    batches = t.feed.batches(pair.step, pair.noise)
    amp, joint = job.cfg.amp == "bf16", job.cfg.d_batch == "joint"
    poison = torch.tensor(float("nan")) if poisoned else None
    t.sums += gan_step(pair, t.nets, batches, joint, amp, poison)
    if pair.G_ema is not None:
        update_ema(pair.G_ema, pair.G, job.cfg.ema_decay, pair.step)
    pair.step += 1
    t.n_sum += 1
    job.advance(1)


def lap(job: TrainJob, t: TaskState) -> float:
    """Seconds since the interval began, once the device is done; added to the training time."""
    sync(*job.devices)
    elapsed = time.perf_counter() - t.tick
    t.pair.train_s += elapsed
    return elapsed


def interval_means(job: TrainJob, t: TaskState) -> list[float]:
    """Collective in a group: the interval's mean losses and D outputs over the group."""
    means = job.group.mean((t.sums / t.n_sum).tolist())
    t.sums.zero_()
    return means


def finite(group: TrainGroup, means: list[float]) -> bool:
    """Collective in a group: whether every rank's losses are finite."""
    return group.all_true(all(math.isfinite(v) for v in means))


def stop_now(stop: StopRequest | None, group: TrainGroup, log_step: bool) -> bool:
    """The one stop rule: a stop signal is acted on as soon as the ranks that train the task
    can agree on it; at once by a rank alone, at the next log step by a group (collective
    there, so every rank of the group stops at the same step)."""
    asked = stop is not None and stop.requested
    if group.size == 1:
        return asked
    return log_step and group.any_true(asked)


def rollback(job: TrainJob, t: TaskState, diverged_at: int, means: list[float]) -> None:
    """After a non-finite loss: back to the task's last good checkpoint (or its start) with a
    new noise seed, never checkpointing the bad state; other tasks are not affected. Raises
    DivergedError once cfg.max_retries rollbacks have been spent."""
    cfg, task = job.cfg, t.spec.task
    if t.pair.retries >= cfg.max_retries:
        raise DivergedError(
            f"{task.label} diverged: loss not finite by step {diverged_at} "
            f"(loss_d={means[0]}, loss_g={means[1]}) after {t.pair.retries} rollback(s); "
            "rerun with --resume and a lower --lr-d/--lr-g, or raise --max-retries"
        )
    retries = t.pair.retries + 1
    t.pair = load_pair(t.spec, t.files.dir.path, job.devices, _warn(job))
    t.nets = _prepare(t.pair, job)
    t.pair.retries = retries
    t.pair.noise.manual_seed(class_seed(cfg.seed, task.key, "noise", retry=retries))
    log_event(
        job.ctx, "rollback", **t.ident, diverged_at=diverged_at, back_to=t.pair.step, retry=retries
    )
    t.files.truncate_metrics(t.pair.step)
    job.advance(t.pair.step - diverged_at)
    t.n_sum = 0
    t.tick = time.perf_counter()


def save_checkpoint(job: TrainJob, t: TaskState) -> None:
    """Collective in a group (see TaskFiles.save_checkpoint); an injected fault may fail it."""
    if job.fault is not None and job.group.lead:
        job.fault.before_checkpoint(t.fault_key, t.pair.step, t.files.checkpoint_path())
    t.files.save_checkpoint(t.pair, t.spec)


def train_task(job: TrainJob, task: Task) -> dict[str, Any] | None:
    """Train one task's G/D pair up to cfg.steps, resuming from its checkpoint if any.

    Returns the task's summary row on the group's first rank (None on the others); its
    "status" is "done", or "interrupted" after a stop signal (a checkpoint was written first).
    Raises DivergedError when the loss stays non-finite after cfg.max_retries rollbacks.
    """
    t = start_task(job, task)
    if t.pair.step >= job.cfg.steps:  # finished in an earlier launch: not retrained
        job.advance(job.cfg.steps)
        return task_result(job, t, "done")
    try:
        return _train(job, task, t)
    finally:
        t.files.close()  # one TensorBoard writer open per training class, never more


def _train(job: TrainJob, task: Task, t: TaskState) -> dict[str, Any] | None:
    log_start(job, t)
    grid_z, grid_labels = grid_inputs(job, task)
    sync(*job.devices)
    t.tick, status = time.perf_counter(), "done"
    while t.pair.step < job.cfg.steps:
        train_step(job, t)
        step = t.pair.step
        log_step = t.files.log_due(step)  # the only places that wait for the device
        if log_step:
            elapsed, n = lap(job, t), t.n_sum
            means = interval_means(job, t)
            if not finite(job.group, means):
                rollback(job, t, step, means)
                continue
            t.files.append_metrics(metrics_line(step, means, elapsed / n, job.ctx.rank))
            t.n_sum = 0
        stopping = stop_now(job.stop, job.group, log_step) and step < job.cfg.steps
        if stopping and not log_step:
            lap(job, t)
        if t.files.checkpoint_due(step) or stopping:
            save_checkpoint(job, t)
        if t.files.grid_due(step):
            t.files.save_grid(t.pair, grid_z, grid_labels)
        if stopping:
            signal = job.stop.signal_name if job.stop and job.stop.requested else "peer"
            log_event(job.ctx, "class_interrupted", **t.ident, step=step, signal=signal)
            status = "interrupted"
            break
        if log_step:
            t.tick = time.perf_counter()  # checkpoint and grid time is not training time
    if job.group.size > 1:
        log_replica(job, t)
    return finish_task(job, t, status)


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


def finish_task(job: TrainJob, t: TaskState, status: str) -> dict[str, Any] | None:
    """The task's summary row on the group's first rank (None on the others), and its
    result.json once it is done."""
    pair, group = t.pair, job.group
    result = task_result(job, t, status)
    if status == "done" and group.lead:
        t.files.write_result(result)
        log_event(
            job.ctx,
            "class_done",
            **t.ident,
            steps=pair.step,
            train_s=result["train_s"],
            imgs_per_s=result["imgs_per_s"],
        )
    return result if group.lead else None


def task_result(job: TrainJob, t: TaskState, status: str) -> dict[str, Any]:
    """One task's line of summary.json; images/s over all its steps, every launch included."""
    cfg, ctx, group, task, pair = job.cfg, job.ctx, job.group, t.spec.task, t.pair
    per_rank = cfg.micro_batch(group.size) * cfg.grad_accum
    k = task.class_id
    return {
        "class_id": k,
        "task": task.name,
        "name": job.data.class_names[k] if k is not None else _classes(len(task.class_ids)),
        "status": status,
        "rank": ctx.rank,
        "ranks": list(group.ranks),
        "host": ctx.host,
        "device_g": ctx.device_g,
        "device_d": ctx.device_d,
        "images": t.images,
        "steps": pair.step,
        "steps_this_launch": pair.step - t.start,
        "effective_batch": per_rank * group.size,
        "retries": pair.retries,
        "train_s": round(pair.train_s, 3),
        "load_s": round(t.load_s, 3),
        "imgs_per_s": round(pair.step * per_rank * group.size / max(pair.train_s, 1e-9), 1),
    }


def _classes(n: int) -> str:
    return "1 class" if n == 1 else f"{n} classes"


def _digest(net: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in sorted(net.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]

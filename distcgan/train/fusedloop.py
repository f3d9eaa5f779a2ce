"""The loop for a fused group: F of a rank's classes trained at once as one fused pair.

It makes the decisions loop.py makes for one task, for each member at its own step: "is this a
log step?", "is the loss finite?", "is a checkpoint due?", "was a stop asked for?". Each member
is a loop.TaskState with its own files, feed, noise and step; the fused pair (fused.py) holds
the weights and is written back into a member's own pair before anything reads them. A member
whose loss is not finite is rolled back alone (its slices reloaded from its checkpoint, the
others go on); a member that finishes, or is given up, leaves and the group is fused anew.
A stop signal checkpoints every member. A rank alone trains a fused group: no collective here.
Leaves out: which classes are fused (rank.py) and the step itself (step.py).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from distcgan.config import TrainConfig
from distcgan.train.fused import FusedPairs
from distcgan.train.graphs import GraphedStep
from distcgan.train.loop import (
    DivergedError,
    TaskState,
    TrainJob,
    finish_task,
    finite,
    grid_inputs,
    interval_means,
    log_event,
    log_start,
    metrics_line,
    rollback,
    save_checkpoint,
    start_task,
    stop_now,
    task_result,
)
from distcgan.train.perf import sync
from distcgan.train.step import Batch, gan_step


def train_fused(job: TrainJob, tasks: list[Any]) -> list[dict[str, Any]]:
    """Train these tasks (per-class, this rank alone) as one fused group up to cfg.steps,
    each resuming from its own checkpoint; one summary row per task, as train_task gives.
    Tasks finished in an earlier launch are not retrained."""
    states = [start_task(job, task) for task in tasks]
    rows, members = [], []
    for t in states:
        if t.pair.step >= job.cfg.steps:
            job.advance(job.cfg.steps)
            rows.append(task_result(job, t, "done"))
        else:
            members.append(t)
    try:
        return rows + _train(job, members)
    finally:
        for t in states:
            t.files.close()


def fused_batches(members: list[TaskState]) -> list[Batch]:
    """The members' batches, each drawn from its own feed at its own step, as one fused batch:
    class k's images at channels [k*C, (k+1)*C), its noise at columns [k*z_dim, (k+1)*z_dim)."""
    per_class = [t.feed.batches(t.pair.step, t.pair.noise) for t in members]
    fused = []
    for micro in zip(*per_class):
        real = torch.cat([b.real for b in micro], dim=1)
        z = torch.cat([b.z for b in micro], dim=1)
        fused.append(Batch(real=real, real_labels=None, z=z, fake_labels=None))
    return fused


def fused_step(job: TrainJob, fp: FusedPairs, members: list[TaskState]) -> None:
    """One D and one G update of every member (an injected fault may fire in one member first,
    or poison its loss alone)."""
    poison = None
    if job.fault is not None:
        hit = [job.fault.at_step(t.fault_key, t.pair.step, t.pair.retries) for t in members]
        if any(hit):
            poison = torch.tensor([float("nan") if h else 1.0 for h in hit])
    stats = fused_update(job.cfg, fp, fused_batches(members), poison)
    for t, row in zip(members, stats.view(len(members), -1)):
        t.sums += row
        t.pair.step += 1
        t.n_sum += 1
    job.advance(len(members))


def fused_update(
    cfg: TrainConfig, fp: FusedPairs, batches: list[Batch], poison: torch.Tensor | None = None
) -> torch.Tensor:
    """The fused pair's D and G updates and G's average on these batches; the STAT_KEYS per
    member, (F, 6). Eager, or with cfg.cuda_graphs replayed from a CUDA graph captured at the
    group's first step (a poisoned step runs eager: the graph has no poison input)."""
    amp, joint = cfg.amp == "bf16", cfg.d_batch == "joint"
    if cfg.cuda_graphs and poison is None:
        if fp.graph is None:
            fp.graph = GraphedStep(fp, batches, joint, amp, cfg.ema_decay)
        return fp.graph(batches)
    stats = gan_step(fp, fp.nets, batches, joint, amp, poison)
    fp.update_ema(cfg.ema_decay)
    return stats


def _train(job: TrainJob, members: list[TaskState]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if not members:
        return rows
    for t in members:
        log_start(job, t)
    grids = {t.spec.task.name: grid_inputs(job, t.spec.task) for t in members}
    fp = _fuse(job, members)
    sync(*job.devices)
    tick = time.perf_counter()
    while members:
        fused_step(job, fp, members)
        stopping = stop_now(job.stop, job.group, log_step=False)
        steps = [t.pair.step for t in members]
        events = stopping or any(
            t.files.log_due(s) or t.files.grid_due(s) or s >= job.cfg.steps
            for t, s in zip(members, steps)
        )
        if not events:
            continue
        # The group's time since the last event, shared equally: each member's training time.
        sync(*job.devices)
        share = (time.perf_counter() - tick) / len(members)
        leaving = []
        for k, t in enumerate(members):
            t.pair.train_s += share
            t.interval_s += share
            left = _member_events(job, fp, k, t, stopping, grids[t.spec.task.name], rows)
            if left:
                leaving.append(k)
        if stopping:
            break
        if leaving:
            for k in range(len(members)):
                fp.store(k)
            members = [t for k, t in enumerate(members) if k not in leaving]
            if members:
                fp = _fuse(job, members)
        tick = time.perf_counter()  # checkpoint and grid time is not training time
    return rows


def _member_events(
    job: TrainJob,
    fp: FusedPairs,
    k: int,
    t: TaskState,
    stopping: bool,
    grid: tuple[torch.Tensor, torch.Tensor | None],
    rows: list[dict[str, Any]],
) -> bool:
    """A member's decisions after a fused step, as loop.py's take them for a task alone;
    returns whether it leaves the group (done, or given up)."""
    step, cfg = t.pair.step, job.cfg
    if t.files.log_due(step):
        n = t.n_sum
        means = interval_means(job, t)
        if not finite(job.group, means):
            return _roll_back(job, fp, k, t, step, means, rows)
        line = metrics_line(step, means, t.interval_s / n, job.ctx.rank)
        t.files.append_metrics(line)
        t.n_sum, t.interval_s = 0, 0.0
    stop_here = stopping and step < cfg.steps
    if t.files.checkpoint_due(step) or stop_here:
        fp.store(k)
        save_checkpoint(job, t)
    if t.files.grid_due(step):
        fp.store(k)
        t.files.save_grid(t.pair, *grid)
    if stop_here:
        signal = job.stop.signal_name if job.stop and job.stop.requested else "peer"
        log_event(job.ctx, "class_interrupted", **t.ident, step=step, signal=signal)
        rows.append(finish_task(job, t, "interrupted"))
        return True
    if step >= cfg.steps:
        rows.append(finish_task(job, t, "done"))
        return True
    return False


def _roll_back(
    job: TrainJob,
    fp: FusedPairs,
    k: int,
    t: TaskState,
    step: int,
    means: list[float],
    rows: list[dict[str, Any]],
) -> bool:
    """Member k back to its last good checkpoint (loop.rollback), its slices reloaded; the other
    members are untouched. Out of retries, it is given up and leaves the group."""
    # The member's checkpoint restores the random state it saved; the group's stream (D's
    # dropout masks for every member) goes on as it was.
    gpus = sorted({torch.device(d).index or 0 for d in job.devices if d.startswith("cuda")})
    try:
        with torch.random.fork_rng(devices=gpus):
            rollback(job, t, step, means)
    except DivergedError as exc:
        task = t.spec.task
        log_event(job.ctx, "class_failed", task=task.name, class_id=task.class_id, message=str(exc))
        failed = {"status": "diverged", "rank": job.ctx.rank, "host": job.ctx.host}
        rows.append({"class_id": task.class_id, "task": task.name, **failed, "error": str(exc)})
        return True
    fp.members[k] = t.pair
    fp.load(k)
    t.interval_s = 0.0
    return False


def _fuse(job: TrainJob, members: list[TaskState]) -> FusedPairs:
    fp = FusedPairs(job.cfg, job.data.channels, [t.pair for t in members], job.devices)
    log_event(
        job.ctx,
        "fused",
        classes=[t.spec.task.class_id for t in members],
        steps=[t.pair.step for t in members],
    )
    return fp

"""A rank's training: its tasks one after another, or a few at a time as fused groups.

Per-class ranks never talk to each other while they train. A rank alone with several classes
trains them in groups of up to `fuse_size` classes (fused.py), balanced and in order
(plan.fused_groups); every group, of one task or of F, goes through the one loop (loop.py).
Leaves out: the launch around it (job.py).
"""

from __future__ import annotations

from typing import Any

import torch

from distcgan.data import DatasetInfo
from distcgan.errors import ClassFailure
from distcgan.mpi.context import RankContext
from distcgan.plan import Task, fused_groups
from distcgan.run.rundir import TaskRow
from distcgan.train.fused import fuse_size
from distcgan.train.loop import train_group
from distcgan.train.task import TrainJob

__all__ = ["train_rank", "task_groups", "not_started"]


def task_groups(cfg: Any, ctx: RankContext, data: DatasetInfo) -> list[tuple[Task, ...]]:
    """The rank's tasks in the groups it trains at once (each of one task without fusion)."""
    tasks = ctx.tasks
    images = max((data.counts[k] for t in tasks for k in t.class_ids), default=0)
    devices = (ctx.device_g, ctx.device_d)
    k = fuse_size(cfg, len(tasks), ctx.group.size, devices, data.channels, images)
    return [tuple(tasks[i] for i in g) for g in fused_groups(len(tasks), k)]


def train_rank(job: TrainJob) -> list[TaskRow]:
    """Train this rank's tasks, group after group.

    A task that diverges for good is reported (status "diverged") and the rank goes on with
    its other tasks; any other error ends the job, naming the class (or a fused group's
    classes). After a stop signal, tasks not yet started are reported as "not_started".
    """
    torch.set_num_threads(job.ctx.threads)
    if job.ctx.device_g.startswith("cuda"):
        # G's GPU is the current device for the whole rank: its streams, graphs and random
        # state, and no context made on cuda:0 by a rank that trains on cuda:1.
        torch.cuda.set_device(job.ctx.device_g)
    results: list[TaskRow] = []
    for group in task_groups(job.cfg, job.ctx, job.data):
        if job.group.agree_stop(job.stop_asked, log_step=False):  # a rank alone: at once
            results.extend(not_started(job, t) for t in group)
            continue
        try:
            results.extend(train_group(job, group))
        except Exception as exc:
            if len(group) > 1:  # fused: per-class tasks, each of its one class
                raise ClassFailure(tuple(k for t in group for k in t.class_ids), exc) from exc
            task = group[0]
            name = task.class_id if task.class_id is not None else task.name
            raise ClassFailure(name, exc) from exc
    return results


def not_started(job: TrainJob, task: Task) -> TaskRow:
    """The summary row of a task that a stop (or a shared phase that did not finish) kept from
    starting."""
    return TaskRow(class_id=task.class_id, task=task.name, status="not_started", rank=job.ctx.rank)

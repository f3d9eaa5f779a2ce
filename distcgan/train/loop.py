"""The training loop: a rank's group of tasks trained together, step after step, to cfg.steps.

One loop for every arrangement: a task alone, a task whose data-parallel group spans ranks, and
F of a rank's classes fused into one pair are all members of a step object (step.PairStep:
AlonePair in alone.py, FusedPairs in fused.py), and a lone task is a group of one. The loop
(`_train`) reads top to bottom: a step of every member, then "is this a log step or was a stop
asked for?", and per member, in `_decide`: "is the loss finite?", "is a checkpoint due?", "is a grid
due?", "does it stop, or is it done?". The parts that decide for themselves sit beside it: the
task's files know when a checkpoint or grid is due (files.py), `rollback` undoes a non-finite
loss, `stop_now` is the one stop rule. In a group of ranks the decisions are taken together at
log steps, and the group's first rank writes.
Leaves out: a task's state and rows (task.py), the step (step.py), which tasks a rank trains
together (rank.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import torch

from distcgan.errors import UserError
from distcgan.faults import Fault
from distcgan.mpi.context import TrainGroup
from distcgan.mpi.signals import StopRequest
from distcgan.plan import Task, class_seed
from distcgan.run.rundir import TaskRow
from distcgan.train.alone import AlonePair
from distcgan.train.augment import adapt
from distcgan.train.fused import FusedPairs
from distcgan.train.pair import load_pair
from distcgan.train.perf import sync
from distcgan.train.step import STAT_KEYS, PairStep
from distcgan.train.task import (
    TaskState,
    TrainJob,
    continue_interval,
    finish_task,
    group_nets,
    interval_state,
    log_event,
    log_start,
    metrics_line,
    start_task,
    task_result,
)

__all__ = ["train_group", "DivergedError", "stop_now"]


class DivergedError(UserError):
    """A task's loss stayed non-finite after every allowed retry."""


def train_group(job: TrainJob, tasks: Sequence[Task]) -> list[TaskRow]:
    """Train these tasks together up to cfg.steps, each resuming from its own checkpoint: one
    task (alone, or with its data-parallel group), or several of this rank's classes as one
    fused pair. Tasks finished in an earlier launch are not retrained.

    Returns one summary row per task on the group's first rank (none on the others): "done";
    "interrupted" after a stop signal (a checkpoint was written first); "diverged" when its loss
    stayed non-finite after cfg.max_retries rollbacks (the others go on).
    """
    states = [start_task(job, task) for task in tasks]
    try:
        done = [job.cfg.pair_done(t.pair.step, t.pair.train_s) for t in states]
        rows = [_finished(job, t) for t, d in zip(states, done) if d]
        members = [t for t, d in zip(states, done) if not d]
        if members:
            rows += _train(job, members, fused=len(tasks) > 1)
        return [r for r in rows if r is not None]
    finally:
        for t in states:
            t.files.close()  # one TensorBoard writer open per training task, never more


def _finished(job: TrainJob, t: TaskState) -> TaskRow | None:
    job.advance(job.cfg.steps)
    return task_result(job, t, "done") if job.group.lead else None


def _train(job: TrainJob, members: list[TaskState], fused: bool) -> list[TaskRow | None]:
    rows: list[TaskRow | None] = []
    for t in members:
        log_start(job, t)
        look_again(job, t)
    pairs = pair_step(job, members, fused)
    sync(*job.devices)
    tick = time.perf_counter()
    while members:
        stats = pairs.step(fault_poison(job.fault, members))
        for t, row in zip(members, stats):
            t.sums += row
            t.n_sum += 1
        job.advance(len(members))
        # The device waits only here: log steps, and the steps at which a time limit is looked at
        # (a group stops on log steps only, where every rank writes its interval).
        log_step = any(t.files.log_due(t.pair.step) for t in members)
        looking = any(t.pair.step == t.look_at for t in members)
        stopping = stop_now(job.stop, job.group, log_step)
        if not (log_step or looking or stopping):
            continue
        # The time since the last decision, shared equally: each member's training time.
        share = lap(job, tick) / len(members)
        cores, gpus = job.cost
        staying = []
        for k, t in enumerate(members):
            t.pair.train_s += share
            t.pair.core_s += share * cores
            t.pair.gpu_s += share * gpus
            t.interval_s += share
            leaves, row = _decide(job, pairs, k, t, stopping)
            if leaves:
                rows.append(row)
            else:
                staying.append(t)
        if len(staying) < len(members):
            for k in range(len(members)):
                pairs.store(k)
            members = staying
            if members:
                pairs = pair_step(job, members, fused)
        if job.group.size > 1:  # wait for the first rank's scores, checkpoint and grid, so
            job.group.all_true(True)  # that the others do not count them as training time
        tick = time.perf_counter()  # checkpoint, grid and score time is not training time
    return rows


def _decide(
    job: TrainJob, pairs: PairStep, k: int, t: TaskState, stopping: bool
) -> tuple[bool, TaskRow | None]:
    """Member k's decisions after a step, in order; returns whether it leaves the group (done,
    stopped, or given up) and its row."""
    step, cfg = t.pair.step, job.cfg
    # --time-limit-s: looked at on log steps (a group's ranks agree there), on the steps foreseen
    # to end it (look_ahead: the same on every rank of a group) and on a stop step (a group stops
    # on log steps only), so that no checkpoint past the limit is left unfinished. A pair whose
    # time is up ends on a log step: its last interval is checked and written.
    looked = t.files.log_due(step) or step == t.look_at or stopping
    time_up = bool(cfg.time_limit_s) and looked and step < cfg.steps and time_spent(job, t)
    log_step = t.files.log_due(step) or time_up
    if log_step:
        n = t.n_sum
        means = interval_means(job, t)
        if not finite(job.group, means):
            return _roll_back(job, pairs, k, t, means)
        line = metrics_line(step, means, t.interval_s / n, job.ctx.rank)
        if job.cfg.augment != "none":
            line["augment_p"] = t.pair.augment_p  # the p of this interval's steps
            adapt_p(job, t, means, n)
        if job.scorer is not None and step % cfg.score_every == 0 and job.group.lead:
            pairs.store(k)
            line.update(job.scorer.score(t.pair, t.spec.task))
        t.files.append_metrics(line)
        t.n_sum, t.interval_s = 0, 0.0
    if cfg.time_limit_s and looked and not time_up:
        look_ahead(job, t)
    stop_here = stopping and step < cfg.steps and not time_up
    # A rank alone stops between log steps, where its losses are not checked: weights whose
    # loss went non-finite since the last check are not checkpointed, so that --resume goes
    # back to the last good checkpoint (and diverges and rolls back as a straight run would).
    bad = stop_here and not log_step and not bool(torch.isfinite(t.sums).all())
    if t.files.checkpoint_due(step) or (stop_here and not bad) or time_up:
        pairs.store(k)
        save_checkpoint(job, t)
    if t.files.grid_due(step) or time_up:
        pairs.store(k)
        t.files.save_grid(t.pair, *t.grid)
    if stop_here:
        signal = job.stop.signal_name if job.stop and job.stop.requested else "peer"
        log_event(
            job.ctx, "class_interrupted", **t.ident, step=step, signal=signal, checkpoint=not bad
        )
        return True, finish_task(job, t, "interrupted")
    if time_up:
        log_event(job.ctx, "time_up", **t.ident, step=step, train_s=round(t.pair.train_s, 3))
    if step >= cfg.steps or time_up:
        return True, finish_task(job, t, "done")
    return False, None


def _roll_back(
    job: TrainJob, pairs: PairStep, k: int, t: TaskState, means: list[float]
) -> tuple[bool, TaskRow | None]:
    """Member k back to its last good checkpoint (`rollback`), taken into the step again; the
    other members are untouched. Out of retries, it is given up and leaves."""
    try:
        with pairs.reloading():
            rollback(job, t, t.pair.step, means)
    except DivergedError as exc:
        task = t.spec.task
        log_event(job.ctx, "class_failed", task=task.name, class_id=task.class_id, message=str(exc))
        row = TaskRow(
            class_id=task.class_id,
            task=task.name,
            status="diverged",
            rank=job.ctx.rank,
            ranks=list(job.group.ranks),
            host=job.ctx.host,
            retries=t.pair.retries,
            error=str(exc),
        )
        return True, row if job.group.lead else None
    pairs.load(k)
    look_again(job, t)
    return False, None


def pair_step(job: TrainJob, members: list[TaskState], fused: bool) -> PairStep:
    """The step object for these members: F classes fused as one pair, or one task alone (its
    modules wrapped for its group)."""
    if not fused:
        return AlonePair(job.cfg, members[0], wrap=group_nets(job))
    fp = FusedPairs(job.cfg, job.data.channels, list(members), job.devices)
    log_event(
        job.ctx,
        "fused",
        classes=[t.spec.task.class_id for t in members],
        steps=[t.pair.step for t in members],
        cuda_graph=fp.graphed,
    )
    return fp


def adapt_p(job: TrainJob, t: TaskState, means: list[float], steps: int) -> None:
    """ADA (--augment-p auto): the member's p after an interval of `steps` steps, from D's mean
    sign on real images over it (in a group, the group's mean: every rank gets the same p)."""
    cfg = job.cfg
    if cfg.augment_p != "auto":
        return
    images = steps * t.feed.per_rank * job.group.size
    real_sign = means[STAT_KEYS.index("d_real_sign")]
    t.pair.augment_p = adapt(
        t.pair.augment_p, real_sign, images, cfg.augment_target, cfg.augment_kimg
    )


def time_spent(job: TrainJob, t: TaskState) -> bool:
    """Collective in a group, where the time is looked at: whether the pair's --time-limit-s
    is spent. The group's ranks first agree on its training seconds (their mean), so that they
    stop at the same step and every rank's checkpoint and row say the same; the decision itself
    is taken by the ranks together (a mean may round differently on two ranks)."""
    p = t.pair
    p.train_s, p.core_s, p.gpu_s = job.group.mean([p.train_s, p.core_s, p.gpu_s])
    return job.group.any_true(job.cfg.time_up(t.pair.train_s))


def look_again(job: TrainJob, t: TaskState) -> None:
    """With --time-limit-s, from the pair's step now (a start, a rollback): the time is next
    looked at after one step, whose pace foretells the rest."""
    if job.cfg.time_limit_s:
        t.look_at, t.look_from = t.pair.step + 1, (t.pair.step, t.pair.train_s)


def look_ahead(job: TrainJob, t: TaskState) -> None:
    """After a look at a time not yet up: the step at which it will be, at the pace since the
    last look (collective in a group: the ranks take the nearest of their steps). Looks
    are then at most a step late, rather than up to a log interval (a bias of the stop on log
    steps alone); a look that comes early looks again."""
    step, spent = t.pair.step, t.pair.train_s
    (step0, spent0), left = t.look_from, job.cfg.time_limit_s - spent
    pace = (spent - spent0) / max(step - step0, 1)
    ahead = max(1, math.ceil(left / pace)) if pace > 0 else 1
    t.look_at = step + job.group.least(ahead)  # collective: the same step on every rank
    t.look_from = (step, spent)


def fault_poison(fault: Fault | None, members: list[TaskState]) -> torch.Tensor | None:
    """An injected fault at this step (tests only): "raise" and "kill" fire here; "nan" poisons
    its member's loss: NaN for it, 1 for the others (None when no member is hit)."""
    if fault is None:
        return None
    hit = [fault.at_step(t.fault_key, t.pair.step, t.pair.retries) for t in members]
    return torch.tensor([float("nan") if h else 1.0 for h in hit]) if any(hit) else None


def lap(job: TrainJob, tick: float) -> float:
    """Seconds since `tick`, once the devices are done."""
    sync(*job.devices)
    return time.perf_counter() - tick


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
            f"rerun with --resume --max-retries {cfg.max_retries + 2} (each rollback draws new "
            "noise), or start a new --run with a lower --lr-d/--lr-g"
        )
    retries = t.pair.retries + 1
    group = (job.group.rank, job.group.size)
    t.pair = load_pair(t.spec, t.files.dir.path, job.devices, job.warn, group, job.cost)
    t.pair.retries = retries
    t.pair.noise.manual_seed(class_seed(cfg.seed, task.key, "noise", retry=retries))
    log_event(
        job.ctx, "rollback", **t.ident, diverged_at=diverged_at, back_to=t.pair.step, retry=retries
    )
    t.files.truncate_metrics(t.pair.step)
    job.advance(t.pair.step - diverged_at)
    continue_interval(t)


def save_checkpoint(job: TrainJob, t: TaskState) -> None:
    """Collective in a group (see TaskFiles.save_checkpoint); an injected fault may fail it."""
    if job.fault is not None and job.group.lead:
        job.fault.before_checkpoint(t.fault_key, t.pair.step, t.files.checkpoint_path())
    t.files.save_checkpoint(t.pair, t.spec, interval_state(t))

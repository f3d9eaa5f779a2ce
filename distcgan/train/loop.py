"""The training loop: a rank's group of tasks trained together, step after step, to cfg.steps.

One loop for every arrangement: a task alone, a task whose data-parallel group spans ranks, and
F of a rank's classes fused into one pair are all members of a step object (step.PairStep:
AlonePair in alone.py, FusedPairs in fused.py), and a lone task is a group of one. The loop
(`_train`) reads top to bottom: a step of every member, then "is this a log step, or a step at
which the time is looked at, or was a stop asked for?", and per member, in `_decide`: "is its
time up?", "is the loss finite?", "is a checkpoint due?", "is a grid due?", "does it leave?".
The parts that decide for themselves sit beside it: the task's time limit (timelimit.py), its
files, which know when a checkpoint or grid is due (files.py), `rollback`, which undoes a
non-finite loss, and the group's stop rule (TrainGroup.agree_stop). In a group of ranks the
decisions are taken together at log steps, by the group's collectives, each called by name
(`job.group.…`, or a callee whose docstring says "collective"), and the group's first rank
writes.
Leaves out: a task's state and rows (task.py), the step (alone.py, fused.py, step.py), which
tasks a rank trains together (rank.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from distcgan.errors import UserError
from distcgan.faults import FaultyStep
from distcgan.plan import Task, class_seed
from distcgan.run.rundir import TaskRow
from distcgan.train.alone import AlonePair
from distcgan.train.augment import adapt
from distcgan.train.files import End
from distcgan.train.fused import FusedPairs
from distcgan.train.perf import sync
from distcgan.train.step import STAT_KEYS, PairStep
from distcgan.train.task import (
    TaskState,
    TrainJob,
    continue_interval,
    finish_task,
    group_nets,
    interval_state,
    load_task_pair,
    log_event,
    log_start,
    metrics_line,
    start_task,
    task_result,
)

__all__ = ["train_group", "DivergedError"]


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
        done = [t.limit.finished(t.pair) for t in states]
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
        t.limit.restart(t.pair)
    pairs = pair_step(job, members, fused)  # in a group, DDP's wrappers: a collective
    tick = now(job)
    while members:
        stats = pairs.step()  # every member's D and G updates, not waited for
        for t, row in zip(members, stats):
            t.sums += row
            t.n_sum += 1
        job.advance(len(members))
        # The device waits only here: log steps, and the steps at which a time limit is looked
        # at (a group stops on log steps only, where every rank writes its interval).
        log_step = any(t.files.log_due(t.pair.step) for t in members)
        looking = any(t.limit.due(t.pair.step) for t in members)
        stopping = job.group.agree_stop(job.stop_asked, log_step)  # collective on log steps
        if not (log_step or looking or stopping):
            continue
        share = (now(job) - tick) / len(members)  # the time since the last decision, shared
        decided = [_decide(job, pairs, k, t, share, stopping) for k, t in enumerate(members)]
        if any(leaves for leaves, _ in decided):
            rows += [row for leaves, row in decided if leaves]
            for k in range(len(members)):
                pairs.store(k)
            members = [t for t, (leaves, _) in zip(members, decided) if not leaves]
            pairs = pair_step(job, members, fused) if members else pairs
        job.group.wait_for_lead()  # its scores, checkpoint and grid are no training time
        tick = now(job)
    return rows


def _decide(
    job: TrainJob, pairs: PairStep, k: int, t: TaskState, share: float, stopping: bool
) -> tuple[bool, TaskRow | None]:
    """Member k's decisions after a step, in order; returns whether it leaves the group (done,
    stopped, or given up) and its row."""
    t.count_time(share, job.cost)
    step, log_step = t.pair.step, t.files.log_due(t.pair.step)
    time_up = t.limit.up(job.group, t.pair, looked=log_step or stopping or t.limit.due(step))
    if log_step or time_up:  # a pair whose time is up ends on a log step
        means = job.group.mean(t.interval_means())  # collective: the group's mean losses
        if not job.group.all_finite(means):  # collective: every rank rolls back, or none
            return _roll_back(job, pairs, k, t, means)
        _log(job, pairs, k, t, means)
    end: End = "time_up" if time_up else "stop" if stopping and step < job.cfg.steps else None
    saved = t.files.checkpoint_due(step, end, t.sums)
    if saved:
        t0 = time.perf_counter()
        pairs.store(k)
        save_checkpoint(job, t)  # collective in a group
        t.spent("checkpoint", t0)
    if t.files.grid_due(step, end):
        t0 = time.perf_counter()
        pairs.store(k)
        t.files.save_grid(t.pair, *t.grid)
        t.spent("grid", t0)
    if end is None and step < job.cfg.steps:
        return False, None
    return True, _leave(job, t, end, saved)


def _log(job: TrainJob, pairs: PairStep, k: int, t: TaskState, means: list[float]) -> None:
    """Member k's metrics line for the interval that ends here (with --augment, the interval's
    p, then ADA's next; with --score-every, its scores on the group's first rank)."""
    step, n = t.pair.step, t.n_sum
    line = metrics_line(step, means, t.interval_s / n, job.ctx.rank)
    if job.cfg.augment != "none":
        line["augment_p"] = t.pair.augment_p  # the p of this interval's steps
        adapt_p(job, t, means, n)
    if job.scorer is not None and step % job.cfg.score_every == 0 and job.group.lead:
        t0 = time.perf_counter()
        pairs.store(k)
        line.update(job.scorer.score(t.pair, t.spec.task))
        t.spent("score", t0)
    t.files.append_metrics(line)
    t.n_sum, t.interval_s = 0, 0.0


def _leave(job: TrainJob, t: TaskState, end: End, saved: bool) -> TaskRow | None:
    """The row of a member that leaves the group: stopped (`saved`: with a checkpoint), out of
    time, or done."""
    step = t.pair.step
    if end == "stop":
        signal = job.stop.signal_name if job.stop is not None and job.stop_asked else "peer"
        event = {"step": step, "signal": signal, "checkpoint": saved}
        log_event(job.ctx, "class_interrupted", **t.ident, **event)
        return finish_task(job, t, "interrupted")
    if end == "time_up":
        log_event(job.ctx, "time_up", **t.ident, step=step, train_s=round(t.pair.train_s, 3))
    return finish_task(job, t, "done")


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
    pairs.load(k)  # in a group, new DDP wrappers: a collective (DDP sends the first rank's weights)
    t.limit.restart(t.pair)
    return False, None


def pair_step(job: TrainJob, members: list[TaskState], fused: bool) -> PairStep:
    """The step object for these members: F classes fused as one pair, or one task alone (its
    modules wrapped for its group); under --inject-fault (tests), wrapped with the fault."""
    pairs: PairStep
    if not fused:
        pairs = AlonePair(job.cfg, members[0], wrap=group_nets(job))
    else:
        pairs = fp = FusedPairs(job.cfg, job.data.channels, list(members), job.devices)
        log_event(
            job.ctx,
            "fused",
            classes=[t.spec.task.class_id for t in members],
            steps=[t.pair.step for t in members],
            cuda_graph=fp.graphed,
        )
    return pairs if job.fault is None else FaultyStep(pairs, job.fault)


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


def now(job: TrainJob) -> float:
    """The clock, once the devices are done with what was queued (honest timing)."""
    sync(*job.devices)
    return time.perf_counter()


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
    t.pair = load_task_pair(job, t.spec, t.files)  # its checkpoint, or --init-from's start
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

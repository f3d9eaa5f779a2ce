"""Training: each task's G/D pair (one per class in per-class mode), alone or data-parallel.

`train_task` is the whole loop for one task, readable top to bottom: load the rank's rows,
build (or restore) G and D, then the steps (a D update and a G update each), with log /
checkpoint / sample every so often and two ways out: a scheduler's stop signal (checkpoint,
then stop) and a non-finite loss (roll back to the last good checkpoint and retry with a new
noise seed, up to `max_retries` times). In a group of ranks the decisions (stop, roll back) are
taken together at log steps, and the group's first rank writes. `train_rank` runs a rank's
tasks one after another; per-class ranks never talk to each other.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from distcgan.config import TrainConfig
from distcgan.data import DatasetInfo, load_class
from distcgan.errors import ClassFailure, UserError
from distcgan.faults import Fault
from distcgan.images import grid_scale, save_grid, to_float, to_uint8
from distcgan.mpi.context import RankContext
from distcgan.mpi.group import TrainGroup, wrap
from distcgan.mpi.signals import StopRequest
from distcgan.plan import Task, class_seed
from distcgan.run import checkpoint
from distcgan.run.atomic import storage_errors
from distcgan.run.rundir import write_json
from distcgan.train.pair import Pair, arch_of, load_pair, pair_state
from distcgan.train.step import Feed, Nets, batch_indices, gan_step

__all__ = ["train_task", "train_rank", "batch_indices", "DivergedError", "log_event"]

N_FIXED = 64  # fixed-noise images in each sample grid (8 x 8)


class DivergedError(UserError):
    """A task's loss stayed non-finite after every allowed retry."""


def task_label(task: Task) -> str:
    """How messages name a task: "class 3", or "task all" (the one model of gan/cgan mode)."""
    return f"class {task.class_ids[0]}" if task.name.startswith("class_") else f"task {task.name}"


def log_event(ctx: RankContext, event: str, **fields: Any) -> None:
    """One JSON line on stdout per event, tagged with the rank, flushed at once.

    One write call per line: the launcher merges every rank's stdout, and a line written in
    pieces (as print() does) can be interleaved with another rank's.
    """
    sys.stdout.write(json.dumps({"rank": ctx.rank, "event": event, **fields}) + "\n")
    sys.stdout.flush()


def _sync(*devices: str) -> None:
    """Wait for queued GPU work so that the clock measures it (a no-op on the CPU)."""
    for dev in set(devices):
        if dev.startswith("cuda"):
            torch.cuda.synchronize(dev)


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


def _prepare(pair: Pair, cfg: TrainConfig, group: TrainGroup, ctx: RankContext) -> Nets:
    """The modules a step calls: with a group, BatchNorm over the group (sync_bn) and DDP."""
    if cfg.sync_bn:  # also alone: the same arithmetic whatever the group's size
        from distcgan.train.groupbn import convert

        convert(pair.G, group.pg)
        convert(pair.D, group.pg)
    return Nets(G=wrap(pair.G, group, ctx.device_g), D=wrap(pair.D, group, ctx.device_d))


def _average_buffers(pair: Pair, group: TrainGroup) -> None:
    """Collective over a group: the same BatchNorm statistics on every rank before a write."""
    if group.size > 1:
        from distcgan.train.groupbn import average_buffers

        for net in (pair.G, pair.D, pair.G_ema):
            if net is not None:
                average_buffers(net, group.pg)


def train_task(
    cfg: TrainConfig,
    ctx: RankContext,
    group: TrainGroup,
    run: Path,
    data: DatasetInfo,
    task: Task,
    fault: Fault | None = None,
    stop: StopRequest | None = None,
    advance: Callable[[int], object] = lambda n: None,
) -> dict[str, Any] | None:
    """Train one task's G/D pair up to cfg.steps, resuming from its checkpoint if any.

    Returns the task's summary row on the group's first rank (None on the others); its
    "status" is "done", or "interrupted" after a stop signal (a checkpoint was written first).
    Raises DivergedError when the loss stays non-finite after cfg.max_retries rollbacks.
    """
    dev_g, dev_d = ctx.device_g, ctx.device_d
    tdir = run / task.name
    if group.lead:
        with storage_errors(tdir):
            tdir.mkdir(exist_ok=True)
    metrics_path = tdir / "metrics.jsonl"
    arch = arch_of(cfg, data.channels, task, data.num_classes)
    ident = {"task": task.name, "class_id": task.class_ids[0] if len(task.class_ids) == 1 else None}

    def log(msg: str) -> None:
        log_event(ctx, "warning", message=msg)

    # ---- load this rank's rows of the task, onto D's device, as floats in [-1, 1] -----------
    t0 = time.perf_counter()
    real, labels = load_rows(cfg, task, group, dev_d)
    _sync(dev_d)
    load_s = time.perf_counter() - t0

    # ---- build G and D, or restore them (weights, Adam, every RNG) from the last checkpoint ---
    pair = load_pair(cfg, tdir, data.channels, task, data.num_classes, (dev_g, dev_d), log)
    nets = _prepare(pair, cfg, group, ctx)
    start = pair.step
    if group.lead:
        _truncate_metrics(metrics_path, pair.step)
    fault_key = task.class_ids[0] if task.name.startswith("class_") else -1  # gan/cgan: -1
    if pair.step >= cfg.steps:  # finished in an earlier launch: not retrained
        advance(cfg.steps)
        return _result(cfg, ctx, group, data, task, real, pair, 0, load_s, "done")
    micro = cfg.micro_batch(group.size)
    feed = Feed(
        real=real,
        labels=labels,
        task_classes=torch.tensor(task.class_ids),
        conditional=task.conditional,
        micro=micro,
        accum=cfg.grad_accum,
        group_rank=group.rank,
        group_size=group.size,
        shard=cfg.data_shard,
        data_seed=class_seed(cfg.seed, task.key, "data"),
        z_dim=cfg.z_dim,
        device_g=dev_g,
    )
    log_event(
        ctx,
        "class_start",
        **ident,
        images=int(real.shape[0]),
        start_step=pair.step,
        steps=cfg.steps,
        device_g=dev_g,
        device_d=dev_d,
        group=list(group.ranks),
        batch_per_rank=feed.per_rank,
        effective_batch=feed.per_rank * group.size,
    )
    advance(pair.step)
    fixed_gen = torch.Generator().manual_seed(class_seed(cfg.seed, task.key, "fixed"))
    z_fixed = torch.randn(N_FIXED, cfg.z_dim, generator=fixed_gen).to(dev_g)
    # Grid rows of a conditional G: one class per row of 8, cycling through the task's classes.
    row_class = torch.tensor(task.class_ids)[(torch.arange(N_FIXED) // 8) % len(task.class_ids)]
    grid_labels = row_class.to(dev_g) if task.conditional else None

    def save_checkpoint() -> None:
        _average_buffers(pair, group)  # collective: every rank of the group calls it
        if group.lead:
            failing = (
                fault is not None and fault.kind == "enospc" and fault.hits(fault_key, pair.step)
            )
            checkpoint.save(tdir, pair_state(pair, task, arch), _fail=fault if failing else None)

    def save_samples() -> None:
        if not group.lead:
            return
        G = pair.G_ema if pair.G_ema is not None else pair.G
        G.eval()  # BatchNorm from running statistics: a grid does not depend on its batch
        with torch.no_grad():
            imgs = to_uint8(G(z_fixed, grid_labels))
        pair.G.train()
        side = int(math.sqrt(N_FIXED))
        grid = imgs.reshape(side, side, *imgs.shape[1:])
        save_grid(tdir / f"samples_step{pair.step:07d}.png", grid, grid_scale(cfg.resolution))

    # ---- the training steps -------------------------------------------------------------------
    joint = cfg.d_batch == "joint"
    amp = cfg.amp == "bf16"
    sums = torch.zeros(4, device=dev_d)  # loss_d, loss_g, D(x), D(G(z)) summed over an interval
    n_sum, status = 0, "done"
    _sync(dev_g, dev_d)
    tick = time.perf_counter()
    while pair.step < cfg.steps:
        # A stop signal is acted on at once by a lone rank, at the next log step by a group
        # (whose ranks must agree on the step at which they stop).
        if group.size == 1 and stop is not None and stop.requested:
            _sync(dev_g, dev_d)
            pair.train_s += time.perf_counter() - tick
            save_checkpoint()
            log_event(ctx, "class_interrupted", **ident, step=pair.step, signal=stop.signal_name)
            status = "interrupted"
            break
        step = pair.step
        if (
            fault is not None
            and fault.kind in ("raise", "kill")
            and fault.hits(fault_key, step, pair.retries)
        ):
            fault.fire()
        poison = (
            fault is not None
            and fault.kind.startswith("nan")
            and fault.hits(fault_key, step, pair.retries)
        )
        sums += gan_step(
            pair, nets, feed.batches(step, pair.noise), joint, amp, poison, cfg.ema_decay
        )
        pair.step += 1
        n_sum += 1
        advance(1)
        done = pair.step
        if not (done % cfg.log_every == 0 or done % cfg.checkpoint_every == 0 or done == cfg.steps):
            continue

        # ---- log / checkpoint / sample (the only places that wait for the device) ------------
        _sync(dev_g, dev_d)
        now = time.perf_counter()
        pair.train_s += now - tick
        means = group.mean((sums / n_sum).tolist())  # collective in a group
        sums.zero_()
        if not group.all_true(all(math.isfinite(v) for v in means)):  # collective in a group
            # Diverged: never checkpoint this state. Roll back to the last good checkpoint (or
            # the start) and retry with a new noise seed; other tasks are not affected.
            if pair.retries >= cfg.max_retries:
                raise DivergedError(
                    f"{task_label(task)} diverged: loss not finite by step {done} "
                    f"(loss_d={means[0]}, loss_g={means[1]}) after {pair.retries} rollback(s); "
                    "rerun with --resume and a lower --lr-d/--lr-g, or raise --max-retries"
                )
            retries = pair.retries + 1
            pair = load_pair(cfg, tdir, data.channels, task, data.num_classes, (dev_g, dev_d), log)
            nets = _prepare(pair, cfg, group, ctx)
            pair.retries = retries
            pair.noise.manual_seed(class_seed(cfg.seed, task.key, "noise", retry=retries))
            log_event(ctx, "rollback", **ident, diverged_at=done, back_to=pair.step, retry=retries)
            if group.lead:
                _truncate_metrics(metrics_path, pair.step)
            advance(pair.step - done)
            n_sum = 0
            tick = time.perf_counter()
            continue
        if group.lead:
            _append_metrics(
                metrics_path,
                {
                    "step": done,
                    "loss_d": means[0],
                    "loss_g": means[1],
                    "d_real": means[2],
                    "d_fake": means[3],
                    "s_per_step": (now - tick) / n_sum,
                },
            )
        n_sum = 0
        stopping = group.size > 1 and group.any_true(stop is not None and stop.requested)
        if done % cfg.checkpoint_every == 0 or done == cfg.steps or stopping:
            save_checkpoint()
        if (cfg.sample_every and done % cfg.sample_every == 0) or done == cfg.steps:
            save_samples()
        if stopping and done < cfg.steps:
            log_event(
                ctx,
                "class_interrupted",
                **ident,
                step=done,
                signal=stop.signal_name if stop is not None and stop.requested else "peer",
            )
            status = "interrupted"
            break
        tick = time.perf_counter()  # checkpoint and grid time is not training time

    if group.size > 1:  # what each replica ends with: equal digests mean equal weights
        log_event(
            ctx,
            "replica",
            task=task.name,
            group_rank=group.rank,
            step=pair.step,
            g_sha256=_digest(pair.G),
            d_sha256=_digest(pair.D),
        )
    result = _result(cfg, ctx, group, data, task, real, pair, pair.step - start, load_s, status)
    if status == "done" and group.lead:
        write_json(tdir / "result.json", result)
        log_event(
            ctx,
            "class_done",
            **ident,
            steps=pair.step,
            train_s=result["train_s"],
            imgs_per_s=result["imgs_per_s"],
        )
    return result if group.lead else None


def _result(
    cfg: TrainConfig,
    ctx: RankContext,
    group: TrainGroup,
    data: DatasetInfo,
    task: Task,
    real: torch.Tensor,
    pair: Pair,
    steps_this_launch: int,
    load_s: float,
    status: str,
) -> dict[str, Any]:
    """One task's line of summary.json; images/s over all its steps, every launch included."""
    per_rank = cfg.micro_batch(group.size) * cfg.grad_accum
    one = len(task.class_ids) == 1
    return {
        "class_id": task.class_ids[0] if one else None,
        "task": task.name,
        "name": data.class_names[task.class_ids[0]] if one else f"{len(task.class_ids)} classes",
        "status": status,
        "rank": ctx.rank,
        "ranks": list(group.ranks),
        "host": ctx.host,
        "device_g": ctx.device_g,
        "device_d": ctx.device_d,
        "images": int(real.shape[0]),
        "steps": pair.step,
        "steps_this_launch": steps_this_launch,
        "effective_batch": per_rank * group.size,
        "retries": pair.retries,
        "train_s": round(pair.train_s, 3),
        "load_s": round(load_s, 3),
        "imgs_per_s": round(pair.step * per_rank * group.size / max(pair.train_s, 1e-9), 1),
    }


def _digest(net: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in sorted(net.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _append_metrics(path: Path, line: dict[str, Any]) -> None:
    with storage_errors(path), open(path, "a") as fh:
        fh.write(json.dumps(line) + "\n")


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop metric lines past `step` (written after the checkpoint a run continues from)."""
    if not path.exists():
        return
    lines = path.read_text().splitlines(keepends=True)
    keep = []
    for line in lines:
        try:
            if json.loads(line)["step"] <= step:
                keep.append(line)
        except (json.JSONDecodeError, KeyError):
            break  # a line cut short by a crash: drop it and everything after
    if len(keep) != len(lines):
        with storage_errors(path):
            path.write_text("".join(keep))


def train_rank(
    cfg: TrainConfig,
    ctx: RankContext,
    group: TrainGroup,
    run: Path,
    data: DatasetInfo,
    fault: Fault | None,
    stop: StopRequest | None,
    advance: Callable[[int], object],
) -> list[dict[str, Any]]:
    """Train this rank's tasks one after another.

    A task that diverges for good is reported (status "diverged") and the rank goes on with
    its other tasks; any other error ends the job. After a stop signal, tasks not yet started
    are reported as "not_started" (a rank alone: groups have one task, decided together).
    """
    torch.set_num_threads(ctx.threads)
    results = []
    for task in ctx.tasks:
        one = task.class_ids[0] if len(task.class_ids) == 1 else None
        if group.size == 1 and stop is not None and stop.requested:
            results.append(
                {"class_id": one, "task": task.name, "status": "not_started", "rank": ctx.rank}
            )
            continue
        try:
            result = train_task(cfg, ctx, group, run, data, task, fault, stop, advance)
            if result is not None:
                results.append(result)
        except DivergedError as exc:
            log_event(ctx, "class_failed", task=task.name, class_id=one, message=str(exc))
            if group.lead:
                results.append(
                    {
                        "class_id": one,
                        "task": task.name,
                        "status": "diverged",
                        "rank": ctx.rank,
                        "host": ctx.host,
                        "error": str(exc),
                    }
                )
        except Exception as exc:
            raise ClassFailure(one if one is not None else task.name, exc) from exc
    return results

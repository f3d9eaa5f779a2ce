"""One launch of `distcgan train` (also each variant of `distcgan compare`): check the data,
map ranks to classes and devices, open the run directory, train, and write summary.json.

Collective: every rank calls train_run with the same resolved config. Leaves out: the command
line (cli.py) and the training of one rank's tasks (loop.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from distcgan.config import RESOLUTIONS, TrainConfig
from distcgan.data import class_digest, read_info
from distcgan.env import collect_env
from distcgan.errors import AgreedError, UserError, say
from distcgan.mpi.comm import Comm
from distcgan.mpi.context import agree, build_context, format_table
from distcgan.mpi.group import connect_group
from distcgan.mpi.signals import install_stop_handlers, restore_handlers
from distcgan.options import TrainOptions
from distcgan.progress import bar as progress_bar
from distcgan.run.outcome import outcome
from distcgan.run.resume import FINGERPRINT, check_same_data, check_steps_kept, fingerprint
from distcgan.run.rundir import RunDir, TaskRow, job_speed, open_run
from distcgan.train.gpumon import GpuMonitor
from distcgan.train.init_from import (
    StartWeights,
    check_freeze_depth,
    check_same_start,
    read_checked_start,
    read_shared_start,
    shared_config,
    start_record,
)
from distcgan.train.memory import check_rank
from distcgan.train.models import Discriminator
from distcgan.train.perf import tune_malloc
from distcgan.train.rank import not_started, task_groups, train_rank
from distcgan.train.regroup import Targets, check_regroup
from distcgan.train.schedule import copy_bytes
from distcgan.train.task import Scorer, TrainJob, group_cost

if TYPE_CHECKING:
    from distcgan.data import DatasetInfo
    from distcgan.faults import Fault


class ScorerFactory(Protocol):
    """What builds --score-every's scorer (eval/sampling/during.py's build_scorer): collective,
    every rank calls it once, before training; None without --score-every."""

    def __call__(
        self, comm: Comm, cfg: TrainConfig, data: DatasetInfo, device: str
    ) -> Scorer | None: ...


def read_training_data(
    comm: Comm, cfg: TrainConfig, resume: bool = False
) -> tuple[Any, tuple[int, ...]]:
    """Collective (every rank calls it): the data file's info and the checked class ids to train.

    Rank 0 reads; every rank gets the same answer or raises the same AgreedError."""
    if not cfg.data:
        raise AgreedError(
            "no data file: pass --data FILE.h5 (for the digits: python -m data_prep digits "
            "--out data/digits16.h5)"
        )
    data = agree(comm, lambda: read_info(cfg.data), root=0)
    return data, agree(comm, lambda: check_data(cfg, data, resume))


def check_data(cfg: TrainConfig, data: Any, resume: bool = False) -> tuple[int, ...]:
    """The class ids to train, after checking them and the resolution against the data file
    (on `resume` the resolution is the run's: only its data file fits)."""
    if data.resolution not in RESOLUTIONS:
        raise UserError(
            f"data file {cfg.data} holds {data.resolution} px images, which the model does not "
            f"support: {data.remake_hint(cfg.resolution)}"
        )
    if cfg.resolution != data.resolution and resume:  # --resume cannot change --resolution
        raise UserError(
            f"data file {cfg.data} holds {data.resolution} px images but this run trains at "
            f"{cfg.resolution} px: resume without --data, with the data file the run started with"
        )
    if cfg.resolution != data.resolution:
        raise UserError(
            f"data file {cfg.data} holds {data.resolution} px images but the config asks for "
            f"{cfg.resolution} px: pass --resolution {data.resolution} or prepare the data at "
            f"{cfg.resolution} px"
        )
    class_ids = cfg.classes or tuple(range(data.num_classes))
    for k in class_ids:
        if k >= data.num_classes:
            raise UserError(
                f"class id {k} is out of range: {cfg.data} has classes 0..{data.num_classes - 1}"
            )
        if data.counts[k] == 0:
            raise UserError(
                f"class {k} ({data.class_names[k]}) of {cfg.data} has no images: leave it out "
                "with --classes or re-create the data file"
            )
    return tuple(class_ids)


def _class_digests(comm: Comm, cfg: TrainConfig, class_ids: tuple[int, ...]) -> dict[int, str]:
    """Collective: the data fingerprint's digest of every class to train (run/resume.py), each
    class hashed by one rank (every size-th class), all of them on rank 0 ({} elsewhere)."""
    path = str(cfg.data)
    mine = agree(
        comm, lambda: {k: class_digest(path, k) for k in class_ids[comm.rank :: comm.size]}
    )
    parts = comm.gather(mine, root=0)
    return {k: d for part in parts or [] for k, d in part.items()}


def _start_run(  # noqa: PLR0913 - what the run directory records, each checked on --resume
    held: contextlib.ExitStack,
    opts: TrainOptions,
    cfg: TrainConfig,
    data: Any,
    digests: dict[int, str],
    rows: tuple[list[dict[str, Any]] | None, list[dict[str, Any]] | None],
    start: StartWeights | None,
) -> list[str]:
    """Rank 0: lock and create (or reopen) the run directory, holding its lock until `held`
    closes; on --resume check what it must not change (its checkpoints are read only under the
    lock: another job may be writing them), and return what --allow-regroup let this launch
    change of a started task (`rows`: every rank's plan row, and of the shared phase where
    there is one); write the config and the
    dataset's description with its fingerprint (`digests`) and --init-from's start (`start`:
    on --resume, checked to hold the weights the run started from)."""
    run, resume = Path(opts.run), opts.launch.resume
    rd = held.enter_context(open_run(run, resume=resume, overwrite=opts.launch.overwrite))
    regrouped = _check_regroup(opts, cfg, rows)
    if resume:
        old = rd.read_dataset()
        if old["class_names"] != list(data.class_names) or old["counts"] != list(data.counts):
            raise UserError(
                f"data file {cfg.data} does not hold the classes and counts this run started "
                f"with ({run}): resume with the original --data"
            )
        check_steps_kept(rd, cfg.steps, rd.read_config().steps)
        check_same_data(rd, str(cfg.data), digests)
        if start is not None:
            check_same_start(rd.path, old.get("start"), start)
    rd.write_config(cfg)
    began = {"start": start_record(start)} if start is not None else {}
    rd.write_dataset({**data.to_dict(), FINGERPRINT: fingerprint(digests), **began})
    return regrouped


def train_run(
    comm: Comm,
    cfg: TrainConfig,
    opts: TrainOptions,
    fault: Fault | None = None,
    t_start: float | None = None,
    *,
    make_scorer: ScorerFactory | None,
) -> int:
    """Collective: one launch of `distcgan train` with a resolved config (the same on every
    rank) into the run directory `opts.run`; returns the exit code (0 done, 3 some classes
    diverged, 75 stopped by a signal). `distcgan train` calls it once and `distcgan compare`
    once per variant, both through eval/sampling/during.py's train_with_scorer (which passes
    `make_scorer`: train/ imports nothing of eval/, which sits above it)."""
    t_start = time.perf_counter() if t_start is None else t_start
    data, class_ids, ctx, rows = _plan(comm, cfg, opts.launch.resume)
    # --shared-steps: the shared phase's plan, every rank one data-parallel group.
    shared = _plan_shared(comm, cfg, data, class_ids) if cfg.shared_steps else None
    # --init-from: the start, read and checked once on rank 0; every rank gets its tensors.
    start = None
    if cfg.init_from:
        start = agree(comm, lambda: read_checked_start(cfg, data.channels), root=0)
    if opts.launch.dry_run:
        if comm.rank == 0:
            assert rows is not None  # gathered on rank 0
            print_plan(cfg, rows, len(class_ids), comm.size, shared)
        return 0
    digests = _class_digests(comm, cfg, class_ids)  # the data's fingerprint, on rank 0
    # The groups of ranks that train a pair together (torch.distributed when any has > 1).
    ctx = connect_group(comm, ctx)
    if shared is not None:
        shared = dataclasses.replace(shared, ctx=connect_group(comm, shared.ctx))
    # --score-every: the scorer, before training
    scorer = make_scorer(comm, cfg, data, ctx.device_g) if make_scorer is not None else None
    shared_rows = shared.rows if shared is not None else None
    with contextlib.ExitStack() as held:  # rank 0 holds the run's lock until the job ends
        # --resume: a started task keeps its group size and threads unless --allow-regroup.
        regrouped = agree(
            comm,
            lambda: _start_run(held, opts, cfg, data, digests, (rows, shared_rows), start),
            root=0,
        )
        rd = RunDir(Path(opts.run))
        plan = (rows, shared_rows)
        launch_no = _record_launch(comm, rd, opts, plan, len(class_ids), cfg, regrouped)
        startup_s = time.perf_counter() - t_start
        cost = group_cost(ctx)  # collective in each group
        job = TrainJob(cfg, ctx, rd, data, fault, scorer=scorer, cost=cost, start=start)
        # Train this rank's classes (after the shared phase, where there is one): no
        # communication between groups until every rank is done.
        done = _train_phases(comm, job, shared, opts.launch.progress and comm.rank == 0)
        return _end(comm, rd, launch_no, done, (t_start, startup_s))


def _end(
    comm: Comm,
    rd: RunDir,
    launch_no: int,
    done: tuple[list[TaskRow], dict[str, Any]],
    times: tuple[float, float],
) -> int:
    """Collective: gather what every rank did (`done`: its rows and GPU report); rank 0 writes
    summary.json and says how the launch ended; the exit code, on every rank. `times`: when the
    launch began (perf_counter) and its start-up seconds."""
    gathered = comm.gather(done, root=0)
    ending = None
    if comm.rank == 0:
        assert gathered is not None  # gathered on rank 0
        classes = sorted((r for part, _ in gathered for r in part), key=lambda r: r.task)
        gpus = [g for _, g in gathered if "samples" in g or "gpu_monitor_error" in g]
        wall_s = time.perf_counter() - times[0]
        ending = _finish(rd, launch_no, classes, comm.size, (wall_s, times[1]), gpus)
    code, message = comm.bcast(ending, root=0)
    if comm.rank == 0 and message:
        say(f"distcgan: {message}")
    return code


def _plan(
    comm: Comm, cfg: TrainConfig, resume: bool
) -> tuple[Any, tuple[int, ...], Any, list[dict[str, Any]] | None]:
    """Collective: check the data file (rank 0 reads; every rank agrees), map ranks to classes,
    devices and threads; the data's info, the classes to train, this rank's context, and every
    rank's plan row (on rank 0, None elsewhere)."""
    data, class_ids = read_training_data(comm, cfg, resume)
    ctx = build_context(comm, class_ids, cfg.devices, cfg.threads, cfg.mode)
    agree(comm, lambda: cfg.micro_batch(ctx.group.size))  # the batch splits over the group
    if cfg.cuda_graphs == "on":
        agree(comm, lambda: _check_graphs(ctx.device_g, ctx.device_d))
    groups = task_groups(cfg, ctx, data)
    agree(comm, lambda: check_rank(cfg, ctx, data, groups))  # memory, before it is spent
    fused = "".join(f"[{','.join(str(t.class_id) for t in g)}]" for g in groups if len(g) > 1)
    rows = comm.gather({**ctx.row(), "fused": fused or "-"}, root=0)
    return data, class_ids, ctx, rows


@dataclass(frozen=True)
class SharedPhase:
    """A two-phase run's shared phase (--shared-steps) on this rank: its config (a gan run's,
    init_from.shared_config), its context (every rank in one group), and every rank's plan row
    of it (on rank 0, marked "phase": "shared"; None elsewhere)."""

    cfg: TrainConfig
    ctx: Any
    rows: list[dict[str, Any]] | None


def _plan_shared(
    comm: Comm, cfg: TrainConfig, data: Any, class_ids: tuple[int, ...]
) -> SharedPhase:
    """Collective: the shared phase's plan, checked as _plan checks a gan run's (the batch over
    the group, the memory), and --freeze-d against D's depth."""
    first = shared_config(cfg)
    ctx = build_context(comm, class_ids, first.devices, first.threads, first.mode)
    agree(comm, lambda: first.micro_batch(ctx.group.size))  # the batch splits over every rank
    agree(comm, lambda: check_rank(first, ctx, data, [ctx.tasks]))
    agree(comm, lambda: check_freeze_depth(cfg, data.channels), root=0)
    rows = comm.gather({**ctx.row(), "fused": "-", "phase": "shared"}, root=0)
    return SharedPhase(first, ctx, rows)


def _check_regroup(
    opts: TrainOptions,
    cfg: TrainConfig,
    plan: tuple[list[dict[str, Any]] | None, list[dict[str, Any]] | None],
) -> list[str]:
    """Rank 0: on --resume, what this launch changes of a started task's group size or
    threads (train/regroup.py; `plan`: every rank's rows, and the shared phase's or None):
    refused unless --allow-regroup, said in one line if allowed."""
    run = Path(opts.run)
    if not (opts.launch.resume and run.is_dir()):
        return []
    rows, shared_rows = plan
    assert rows is not None  # rank 0 gathered every rank's row (_plan)
    targets = Targets(cfg.steps, cfg.shared_steps)
    now = rows + (shared_rows or [])
    regrouped = check_regroup(RunDir(run), now, targets, opts.launch.allow_regroup)
    if regrouped:
        say(
            f"distcgan: warning: --allow-regroup: {'; '.join(regrouped)}: its weights will "
            "differ from an uninterrupted run's (recorded in this launch's launches/NNN.json)"
        )
    return regrouped


def _record_launch(  # noqa: PLR0913 - the launch's facts, each written to its record
    comm: Comm,
    rd: RunDir,
    opts: TrainOptions,
    plan: tuple[list[dict[str, Any]] | None, list[dict[str, Any]] | None],
    n_classes: int,
    cfg: TrainConfig,
    regrouped: list[str],
) -> int:
    """Collective (glibc's malloc thresholds are raised on every rank): rank 0 writes env.json,
    this launch's line of launches.jsonl and its record (launches/NNN.json: the config and
    environment, kept when a resume replaces the two; `regrouped`, what --allow-regroup let it
    change; `plan`: every rank's row, and the shared phase's, kept as "shared_detail"); its
    number (0 on the other ranks)."""
    malloc = tune_malloc()  # before env.json, which records what glibc accepted
    if comm.rank != 0:
        return 0
    rows, shared_rows = plan
    assert rows is not None  # rank 0 gathered every rank's row (_plan)
    env = {**collect_env([r["host"] for r in rows], rows), "malloc": malloc}
    if shared_rows is not None:  # the shared phase's layout, which a resume must keep too
        env["shared_detail"] = shared_rows
    if regrouped:  # the record keeps env: what --allow-regroup let this launch change
        env["regrouped"] = regrouped
    rd.write_env(env)
    launch = {
        "time_utc": env["time_utc"],
        "ranks": comm.size,
        "resume": opts.launch.resume,
        "git_commit": env["git_commit"],
        "amp": cfg.amp,  # a resume may change it; compare's rows say which a run trained in
        **({"regrouped": regrouped} if regrouped else {}),
    }
    launch_no = rd.append_launch(launch)
    rd.write_launch_record(launch_no, cfg, env)
    print(
        f"run directory: {opts.run}  ({n_classes} classes on {comm.size} ranks, "
        f"{cfg.steps} steps per class"
        + (f", or {cfg.time_limit_s:g} training seconds if sooner" if cfg.time_limit_s else "")
        + ")",
        flush=True,
    )
    return launch_no


def _train_phases(
    comm: Comm, job: TrainJob, shared: SharedPhase | None, progress: bool
) -> tuple[list[TaskRow], dict[str, Any]]:
    """Collective (with a shared phase): this rank's tasks trained, with the stop signals caught
    throughout; its summary rows and GPU report. With a shared phase, every rank first trains
    its one data-parallel pair (RUN/all/); once it is done, rank 0 reads its final weights and
    every rank's classes start from them, as --init-from's would. A shared phase stopped by a
    signal or given up leaves the classes not started (the run's outcome says which)."""
    stop, previous_handlers = install_stop_handlers()
    job = dataclasses.replace(job, stop=stop)
    try:
        if shared is None:
            return _train_rank(job, progress)
        first = dataclasses.replace(
            job, cfg=shared.cfg, ctx=shared.ctx, cost=group_cost(shared.ctx), start=None
        )
        rows, gpu = _train_rank(first, progress)
        done = comm.bcast(bool(rows) and rows[0].status == "done", root=0)  # rank 0 leads it
        if not done:
            tasks = job.ctx.tasks if job.group.lead else ()
            return rows + [not_started(job, t) for t in tasks], gpu
        step = comm.bcast(rows[0].steps if rows else None, root=0)
        cfg, channels = job.cfg, job.data.channels
        start = agree(comm, lambda: read_shared_start(job.run.path, cfg, channels, step), root=0)
        more, gpu = _train_rank(dataclasses.replace(job, start=start), progress)
        return rows + more, gpu
    finally:
        restore_handlers(previous_handlers)


def _train_rank(job: TrainJob, progress: bool) -> tuple[list[TaskRow], dict[str, Any]]:
    """This rank's tasks trained, with a progress bar (rank 0) and the GPUs watched; its summary
    rows and GPU report."""
    ctx = job.ctx
    bar = _progress_bar(progress, len(ctx.tasks) * job.cfg.steps)
    monitor = GpuMonitor({"g": ctx.device_g, "d": ctx.device_d})
    try:
        with monitor:
            results = train_rank(dataclasses.replace(job, advance=bar.update))
    finally:
        bar.close()
    gpu = {"rank": ctx.rank, "device_g": ctx.device_g, "device_d": ctx.device_d}
    return results, {**gpu, **monitor.report()}


def _check_graphs(device_g: str, device_d: str) -> None:
    if not (device_g == device_d and device_g.startswith("cuda")):
        raise UserError(
            f"--cuda-graphs on needs G and D on one GPU, and a rank has G on {device_g} and D on "
            f"{device_d}: use --devices cuda:N (or cuda), or --cuda-graphs auto (graphs where "
            "they can be)"
        )


def print_plan(
    cfg: TrainConfig,
    rows: list[dict[str, Any]],
    n_classes: int,
    ranks: int,
    shared: SharedPhase | None = None,
) -> None:
    """What --dry-run prints: the resolved config and the rank -> tasks/devices table (and the
    shared phase before it, where there is one)."""
    print("resolved config:")
    for key, value in cfg.to_dict().items():
        print(f"  {key} = {value}")
    n_tasks = len({t for r in rows for t in r["tasks"]})
    print(f"\n{cfg.mode}: {n_tasks} G/D pair(s) for {n_classes} classes on {ranks} ranks:")
    columns = ["rank", "host", "local_rank", "tasks", "classes", "group", "device_g", "device_d"]
    print(format_table(rows, [*columns, "threads", "fused"]))
    print("fused: the classes each rank trains at once as one fused pair (--fuse; - for none)")
    if cfg.schedule == "async":
        print(schedule_line(cfg, n_classes if cfg.mode == "cgan" else 0))
    if shared is not None:
        print(shared_line(shared, n_classes, ranks))


def shared_line(shared: SharedPhase, n_classes: int, ranks: int) -> str:
    """--dry-run's account of --shared-steps: the shared phase, before the table's pairs."""
    cfg = shared.cfg
    batch = cfg.micro_batch(shared.ctx.group.size) * cfg.grad_accum * shared.ctx.group.size
    limit = f" (or {cfg.time_limit_s:g} training seconds if sooner)" if cfg.time_limit_s else ""
    return (
        f"shared phase first: one DC-GAN on all {n_classes} classes for {cfg.steps} steps{limit}"
        f" at a batch of {batch}, data-parallel over the job's {ranks} rank(s), in RUN/all/; then "
        "every pair above starts from its final weights (fresh Adam) and trains with no "
        "communication"
    )


def schedule_line(cfg: TrainConfig, label_classes: int) -> str:
    """--dry-run's account of --schedule async: who waits for whom, and the one copy a step."""
    D = Discriminator(1, cfg.resolution, label_classes, cfg.d_dropout)
    bd = cfg.batch_size_d or cfg.batch_size
    return (
        f"schedule async: at each step D steps on {bd} real images and {bd} fakes G made the "
        f"step before, while G steps on {cfg.batch_size} through a copy of D as it was before "
        f"D's update, on G's device; the copy is refreshed once a step ({copy_bytes(D):,} bytes "
        "per pair at one channel)"
    )


def _finish(
    rd: RunDir,
    launch: int,
    classes: list[TaskRow],
    ranks: int,
    seconds: tuple[float, float],
    gpus: list[dict[str, Any]],
) -> tuple[int, str]:
    """Rank 0: write summary.json, print the per-class table, and return (exit code, message);
    `seconds` is (the launch's wall time, its start-up time)."""
    wall_s, startup_s = seconds
    summary: dict[str, Any] = {
        "launch": launch,  # which line of launches.jsonl this describes (distcgan status)
        "ranks": ranks,
        "complete": all(c.status == "done" for c in classes),
        "classes": classes,
        "wall_s": round(wall_s, 3),
        "startup_s": round(startup_s, 3),
        # The slowest task's seconds; the job's, with what they divide, are under "job".
        "max_train_s": max((c.train_s or 0.0 for c in classes if c.trained), default=0.0),
        "job": job_speed(classes),
    }
    if gpus:  # means over ranks of each rank's mean utilisation of G's and D's GPU
        summary["gpu"] = {"per_rank": gpus}
        for role in ("g", "d"):
            values = [g[f"util_{role}"] for g in gpus if f"util_{role}" in g]
            if values:
                summary["gpu"][f"util_{role}_mean"] = round(sum(values) / len(values), 1)
    rd.write_summary(summary)
    columns = [
        "task",
        "name",
        "status",
        "ranks",
        "host",
        "device_g",
        "steps",
        "effective_batch",
        "train_s",
        "imgs_per_s",
    ]
    print(format_table([c.to_dict() for c in classes], columns))
    print(
        f"wall {summary['wall_s']:.1f} s; training {summary['job']['train_s']:.1f} s on the "
        f"slowest rank, {summary['job']['imgs_per_s']:,.0f} images/s over all ranks; "
        f"checkpoints, metrics and grids in {rd.path}/<task>/; "
        f"summary in {rd.summary_file}",
        flush=True,
    )
    return outcome(rd.path, classes)


def _progress_bar(show: bool, total: int) -> Any:
    return progress_bar(total, "rank 0 steps", "step", show)

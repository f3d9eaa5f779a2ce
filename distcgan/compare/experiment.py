"""`distcgan compare`: the paper's comparison. Per-class DC-GANs (the method), one DC-GAN and one
DC-CGAN on all the classes, trained under one budget and scored alike; and where --variants names
it, per-class DC-GANs fine-tuned from one DC-GAN trained on all the classes first
(shared-per-class: shared.py says what it adds).

    mpiexec -n 2 python -m mpi4py -m distcgan compare --preset digits --data data/digits16.h5 \\
        --out runs/compare

The budget (--budget, `plan.plan_budgets`): every variant trains at the same batch B, the
effective batch of each G/D pair whatever the number of ranks (each variant runs with
--global-batch-size B), and under `images` (the default) draws the same number of real images:
per-class trains each of the K classes for S steps, gan and cgan train their one pair for K * S
steps. Under `steps` every pair trains S steps (per-class: K times the compute); under `time`
every variant trains --budget-s seconds on these ranks (train's --time-limit-s per pair, at most
its images steps), and its row says the steps each pair reached. Each row records what the
variant cost: training seconds of the slowest rank, and core-seconds (CPU) or GPU-seconds.
Every rank takes part in every variant: per-class spreads the classes over the ranks, gan and
cgan train data-parallel on all of them.

Each variant is a normal run directory, trained by `train`'s code (`train.job.train_run`),
sampled by `sample`'s (`eval.sampling.sample.sample_run`) and scored by `evaluate`'s
(`eval.evaluate.evaluate`), so each can be inspected, resumed, sampled or scored again on its own.
The directory's layout, and every file name in it, is run/comparedir.py's `CompareDir`.

Every collective below is called by every rank in the same order; where a step is skipped, the
decision is taken on rank 0 and broadcast first (`agree`), so every rank skips it together.
Leaves out: training, sampling and scoring themselves; rendering the table and the figure
(report.py).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from distcgan.compare import shared
from distcgan.compare.report import training_words, write_outputs
from distcgan.compare.seeds import class_mean, label_tv, summarise, with_class_mean
from distcgan.config import (
    MODES,
    PRESETS,
    RESUMABLE_FIELDS,
    TrainConfig,
    check_resume_changes,
    is_mode,
    preset,
)
from distcgan.data import DatasetInfo
from distcgan.errors import UserError
from distcgan.eval.classifier.train import train_classifier
from distcgan.eval.evaluate import evaluate
from distcgan.eval.metrics.networks import (
    WEIGHT_FILES,
    default_weights,
    load_network,
    network_tag,
    sha256_file,
)
from distcgan.eval.metrics.result import EvalResult
from distcgan.eval.sampling.during import train_with_scorer
from distcgan.eval.sampling.sample import sample_run
from distcgan.mpi.comm import Comm
from distcgan.mpi.context import agree, build_context, format_table
from distcgan.options import (
    ClassifierOptions,
    CompareOptions,
    EvalOptions,
    LaunchOptions,
    SampleOptions,
    TrainOptions,
    stored_fields,
)
from distcgan.plan import SHARED_VARIANT, Budget, assign_tasks, make_tasks, plan_budgets
from distcgan.run import rundir
from distcgan.run.atomic import storage_errors
from distcgan.run.comparedir import CompareDir, VariantDir
from distcgan.run.rundir import LOCK, TaskRow, images_seen, read_json, slowest_rank_s, write_json
from distcgan.train.job import read_training_data

VARIANTS = MODES  # every training mode is a variant of the comparison (--variants' default)
ALL_VARIANTS = (*VARIANTS, SHARED_VARIANT)  # and per-class from a shared start (shared.py)
MODELS = {
    "per-class": "one DC-GAN per class (the paper's method)",
    "gan": "one DC-GAN on all the classes",
    "cgan": "one DC-CGAN on all the classes, conditioned on the label",
    SHARED_VARIANT: shared.MODEL,
    "real": "the real images themselves (the ceiling)",
}
RULES = {
    "images": (
        "the same batch B (the effective batch of every G/D pair, on any number of ranks) and "
        "the same real images seen: per-class trains each of the K classes for S steps, gan and "
        "cgan train their one pair for K x S steps (the sum of the per-class steps), so every "
        "variant draws K x S x B real images and sees an image S x B x K / N times on average "
        "(N images)"
    ),
    "steps": (
        "the same steps per model: every G/D pair trains S steps at batch B, so per-class trains "
        "K pairs (K x S steps, K times the compute and the real images of gan's and cgan's one)"
    ),
    "time": (
        "the same training seconds on the same ranks: every variant trains {seconds:g} s of "
        "steps (checkpoints, grids and scores not counted), a rank's pairs sharing them, each "
        "pair at most its steps under the images rule; the steps each reached are in the table"
    ),
}


def rule_words(opts: CompareOptions) -> str:
    """The budget rule in words, with shared-per-class's where it is compared."""
    rule = RULES[opts.budget].format(seconds=opts.budget_s)
    return rule + (f"; {shared.rule_text(opts)}" if opts.fraction else "")


BASE_CONFIG = CompareDir(Path()).base_config.name  # for `compare --resume`'s first check


@dataclass(frozen=True)
class Variant:
    name: str  # per-class, gan or cgan: the run's mode and its folder under DIR
    cfg: TrainConfig
    budget: Budget


def variant_configs(
    base: TrainConfig, counts: Sequence[int], opts: CompareOptions, ranks: int
) -> list[Variant]:
    """Each variant's config: the base config in the variant's mode, its steps (and under the
    time rule its seconds per pair) from the budget, and its pairs' batch fixed to B = the
    base's global batch, else its batch size; shared-per-class's a per-class run with its
    shared phase (shared.run_config).

    Scores during training (--score-every N --score-n n) are made comparable across variants: a
    pair that trains m times a per-class pair's steps (gan and cgan: m = K under the images and
    time rules, 1 under the steps rule) is scored every m N of its steps, at the same images
    seen, and gan's and cgan's one pair draws n images a class (K n), as each per-class pair
    draws n of its one class: the same points on the curve and the same FID bias.
    shared-per-class's pairs are scored as per-class's (its shared phase: shared.py)."""
    if base.time_limit_s:
        raise UserError(
            "compare sets each pair's --time-limit-s from --budget time --budget-s: drop "
            "--time-limit-s"
        )
    shared.check_base(base)
    batch = base.global_batch_size or base.batch_size
    budgets = plan_budgets(
        opts.budget, counts, base.steps, batch, opts.budget_s, ranks, opts.fraction
    )
    out = []
    for name in opts.variants:
        b = budgets[name]
        per_class = name in ("per-class", SHARED_VARIANT)
        mode = "per-class" if per_class else name
        assert is_mode(mode), name  # check_options let only ALL_VARIANTS through
        scale = (b.steps // budgets["per-class"].steps, 1 if per_class else len(counts))
        if not base.score_every or per_class:  # no scores, or a per-class pair's: as they are
            scale = (1, 1)
        cfg = dataclasses.replace(
            base,
            mode=mode,
            steps=b.steps,
            global_batch_size=batch,
            time_limit_s=b.pair_s,
            score_every=base.score_every * scale[0],
            score_n=base.score_n * scale[1],
        )
        if name == SHARED_VARIANT:
            cfg = shared.run_config(cfg, b, opts)
        check_groups(name, cfg, len(counts) if per_class else 1, ranks)
        out.append(Variant(name, cfg, b))
    return out


def check_groups(name: str, cfg: TrainConfig, tasks: int, ranks: int) -> None:
    """Every group of ranks the variant trains on (a two-phase run's shared phase: all of them)
    must split its batch evenly, in whole micro-batches."""
    batch = cfg.global_batch_size
    sizes = {len(p.group) for p in assign_tasks(tasks, ranks)} | (
        {ranks} if cfg.shared_steps else set()
    )
    for size in sorted(sizes):
        if batch % size or (batch // size) % cfg.grad_accum:
            raise UserError(
                f"the {name} variant trains on groups of {size} ranks, which cannot share a "
                f"batch of {batch} images (in {cfg.grad_accum} micro-batches): pass a "
                f"--batch-size that is a multiple of {size * cfg.grad_accum}, or use "
                "another number of ranks"
            )


def check_options(opts: CompareOptions, data: DatasetInfo, class_ids: Sequence[int]) -> None:
    """Rank 0: the options that do not concern training, checked before anything is trained."""
    bad = [v for v in opts.variants if v not in ALL_VARIANTS]
    if bad or not opts.variants or len(set(opts.variants)) != len(opts.variants):
        raise UserError(
            f"--variants {' '.join(opts.variants)}: name each of {', '.join(ALL_VARIANTS)} at "
            "most once"
        )
    shared.check_options(opts)
    for name in ("splits", "eval_batch_size", "classifier_epochs", "seeds"):
        if getattr(opts, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(opts, name)}")
    check_budget(opts)
    if opts.n < max(len(class_ids), opts.splits):
        raise UserError(
            f"--n {opts.n} is too few: it must be at least the {len(class_ids)} classes and the "
            f"{opts.splits} splits"
        )
    if opts.launch.resume and opts.launch.overwrite:
        raise UserError("--resume and --overwrite contradict each other: pass one of them")
    if opts.network:
        # Load it once now (on the CPU) so that a wrong file fails before hours of training.
        net = load_network(opts.network, opts.weights, "cpu", data.channels, data.resolution)
        names = net.metadata.get("class_names")
        if names is not None and tuple(names) != data.class_names:
            raise UserError(
                f"classifier {opts.network} was trained on classes {names[:4]}... but "
                f"{data.path} has {list(data.class_names)[:4]}...: train one on this data file"
            )
    elif opts.weights:
        raise UserError("--weights goes with --network inception-v3 or inception-v3-tf")


def check_budget(opts: CompareOptions) -> None:
    """--budget time and --budget-s go together (and --time-limit-s, train's, is set by them)."""
    if opts.budget == "time" and not opts.budget_s > 0:
        raise UserError(
            "--budget time needs --budget-s SECONDS > 0: the training seconds each variant gets "
            "on these ranks"
        )
    if opts.budget != "time" and opts.budget_s:
        raise UserError(f"--budget-s goes with --budget time, not --budget {opts.budget}")


def check_time_spent(v: Variant, rows: Sequence[TaskRow]) -> None:
    """Rank 0, after a time-budget variant trained: a pair stops at most a step or so past its
    seconds (the time is looked at after its first step and where its pace foretells the end),
    so one that doubled them had a budget shorter than its first logged step (the first step,
    which it logs when the time is up): a one-line error."""
    for c in rows:
        phase = shared.is_shared(v.cfg, c)  # a shared phase has seconds of its own
        given = v.budget.shared_s if phase else v.budget.pair_s
        if c.time_up and (c.train_s or 0) > 2 * given:
            what = f"the {v.name} shared phase" if phase else f"each {v.name} pair"
            raise UserError(
                f"--budget-s gives {what} {given:.3g} s, shorter than one "
                f"logged step ({c.steps} step(s) took {c.train_s:.3g} s): start the comparison "
                "again (--overwrite) with a larger --budget-s"
            )


def open_dir(cdir: CompareDir, opts: CompareOptions, base: TrainConfig) -> list[int]:
    """Rank 0: create, reopen (--resume) or empty (--overwrite) DIR, take DIR/.lock for the whole
    comparison, write compare-config.json; returns the lock's descriptor (if locks work)."""
    out = cdir.path
    exists = out.exists() and (not out.is_dir() or any(out.iterdir()))
    marked = cdir.base_config.is_file()
    if exists and not opts.launch.resume:
        if not opts.launch.overwrite:
            raise UserError(
                f"{out} already exists: pass --resume to continue that comparison, --overwrite "
                "to start it again, or choose another --out"
            )
        if not marked:
            raise UserError(
                f"{out} exists but is not a comparison directory (no {BASE_CONFIG}): refusing to "
                "delete it with --overwrite; choose another --out"
            )
    with storage_errors(out):
        out.mkdir(parents=True, exist_ok=True)
    fd = rundir.lock(out)  # a second comparison on DIR is refused while this one runs
    if exists and opts.launch.overwrite:
        for entry in out.iterdir():
            if entry.name != rundir.LOCK:
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    rundir.write_json(cdir.base_config, base.to_dict())
    rundir.write_json(cdir.options, {k: getattr(opts, k) for k in stored_fields(CompareOptions)})
    return [] if fd is None else [fd]


def stored_options(out: Path) -> dict[str, Any]:
    """Rank 0, on --resume: the scoring options the comparison in `out` was started with (the
    defaults of this launch's, as the stored config is of its training flags)."""
    cdir = CompareDir(out)
    if not cdir.options.is_file():
        return {}
    stored = read_json(cdir.options, "comparison")
    return {k: stored[k] for k in stored_fields(CompareOptions) if k in stored}


# ---- the scoring network ----------------------------------------------------------------------


def ensure_network(
    opts: CompareOptions, cdir: CompareDir, data: str, device: str, log: Callable[[str], None]
) -> tuple[str, str]:
    """Rank 0: (the network to score with, the SHA-256 of its file). Without --network, the
    digits-style classifier is trained on the data into DIR/classifier.pt first (kept on
    --resume)."""
    if opts.network in WEIGHT_FILES:
        path = Path(opts.weights) if opts.weights else default_weights(opts.network)
        return opts.network, sha256_file(path)
    if opts.network:
        return opts.network, sha256_file(opts.network)
    path = cdir.classifier
    if not path.is_file():
        log(f"== no --network: training the digits-style classifier on {data} into {path}")
        classifier = ClassifierOptions(
            data=data,
            out=str(path),
            epochs=opts.classifier_epochs,
            devices=device,
            progress=opts.progress,
        )
        meta = train_classifier(classifier, log=lambda m: None)
        log(
            f"   held-out accuracy {meta['held_out_accuracy']:.4f} on "
            f"{meta['held_out_images']} images ({meta['train_s']:.0f} s)"
        )
    return str(path), sha256_file(path)


def classifier_record(spec: str, data: DatasetInfo) -> dict[str, Any] | None:
    """What a distcgan classifier's own record says (held-out accuracy...), None otherwise."""
    if spec in WEIGHT_FILES:
        return None
    meta = load_network(spec, None, "cpu", data.channels, data.resolution).metadata
    keys = ("held_out_accuracy", "held_out_images", "train_images", "epochs", "data_sha256")
    return {"file": spec, **{k: meta[k] for k in keys if k in meta}} if meta else None


# ---- one variant: train (or continue), sample, score ------------------------------------------


def _sha256(path: Path) -> str | None:
    """The file's SHA-256, None when there is no file."""
    return sha256_file(path) if path.is_file() else None


def _finished(rd: VariantDir, v: Variant, class_ids: Sequence[int]) -> bool:
    """Whether the variant's run holds every pair trained to its steps (by its summary.json)."""
    if not rd.has_summary():
        return False
    rows = rd.summary_rows()
    tasks = shared.task_names(v.cfg, [t.name for t in make_tasks(v.cfg.mode, tuple(class_ids))])
    done = {c.task for c in rows if c.status == "done"}
    target = shared.targets(v.cfg)  # the steps of each task (the shared phase: its own)
    steps_ok = all((c.steps or 0) >= target.of(c.task) or c.time_up for c in rows)
    return bool(rd.read_summary()["complete"]) and done == tasks and steps_ok


def variant_status(
    rd: VariantDir, v: Variant, class_ids: Sequence[int], fingerprint: dict[str, Any]
) -> str:
    """Rank 0: "new" (train from scratch), "resume" (continue its training), "trained" (sample
    and score it) or "scored" (its row.json is still valid: nothing to do). A scored variant
    whose samples file is gone (deleted to save disk; compare.png draws from it) is "trained":
    sampled and scored again, to the same row."""
    vdir = rd.path
    if not vdir.exists():
        return "new"
    if not rd.is_run():
        if {p.name for p in vdir.iterdir()} <= {LOCK}:  # killed as the run was created
            shutil.rmtree(vdir)
            return "new"
        raise UserError(
            f"{vdir} exists but is not a run directory (no config.json): move it away, or start "
            "the comparison again with --overwrite"
        )
    stored = rd.read_config()
    if (stored.shared_steps, stored.shared_time_limit_s) != (
        v.cfg.shared_steps,
        v.cfg.shared_time_limit_s,
    ):
        raise UserError(
            f"the {v.name} variant in {vdir} was trained with a shared phase of "
            f"{stored.shared_steps} steps ({stored.shared_time_limit_s:g} s); the budget now "
            f"gives {v.cfg.shared_steps} ({v.cfg.shared_time_limit_s:g} s): on --resume keep "
            "--steps and --shared-fraction as they were, or start again with --overwrite"
        )
    check_resume_changes(stored, v.cfg)  # the same rule as train --resume
    if stored.steps > v.cfg.steps:
        raise UserError(
            f"the {v.name} variant in {vdir} was trained for {stored.steps} steps; the budget now "
            f"gives {v.cfg.steps}: on --resume --steps may grow, not shrink"
        )
    if stored.steps < v.cfg.steps or not _finished(rd, v, class_ids):
        return "resume"
    if rd.row.is_file() and rd.samples.is_file():
        old = read_json(rd.row, "comparison row")
        if old.get("fingerprint") == {
            **fingerprint,
            "summary_sha256": _sha256(rd.summary_file),
        }:
            return "scored"
    return "trained"


def device_seconds(rows: Sequence[TaskRow], env: dict[str, Any]) -> dict[str, Any]:
    """What the training cost the machine: over every pair, its training seconds times the
    threads of the ranks that trained it, or on GPUs times the GPUs of its G and D, launch by
    launch (each row's core_s and gpu_s): "core" or "gpu" seconds ("device_unit"); a run that
    trained on both says its core-seconds too ("core_s"). Rows from before 5fabb84 lack them:
    every second is counted as if every launch were the last (its ranks, and the threads of
    env.json)."""
    gpu = core = 0.0
    if all(c.core_s is not None and c.gpu_s is not None for c in rows):
        gpu, core = sum(c.gpu_s or 0.0 for c in rows), sum(c.core_s or 0.0 for c in rows)
    else:
        threads = {int(r["rank"]): int(r.get("threads") or 1) for r in env.get("ranks_detail", [])}
        for c in rows:
            n_gpus = len({d for d in (c.device_g, c.device_d) if d and d.startswith("cuda")})
            for r in c.ranks or [c.rank]:
                s = c.train_s or 0.0
                gpu, core = gpu + s * n_gpus, core + (0.0 if n_gpus else s * threads.get(r, 1))
    if gpu > 0:
        return {"device_s": round(gpu, 1), "device_unit": "gpu"} | (
            {"core_s": round(core, 1)} if core > 0 else {}
        )
    return {"device_s": round(core, 1), "device_unit": "core"}


def make_row(
    v: Variant,
    rd: VariantDir,
    scored: tuple[EvalResult | None, Path],
    counts: dict[int, int],
    fingerprint: dict[str, Any],
) -> dict[str, Any]:
    """Rank 0: the variant's line of the table, from its summary.json and its evaluation
    (`scored`: the result and its file); the images seen come from what training logged (steps
    x effective batch of every pair); shared-per-class's cost counts its shared phase, its
    steps reached are its pairs' (the shared phase's apart: shared.row_fields)."""
    result, evaluation = scored
    assert result is not None  # rank 0, which `score` gives the result
    rows = rd.summary_rows()  # a complete run: every row was trained
    seen = sum(images_seen(c) for c in rows)
    batches = sorted({int(c.effective_batch or 0) for c in rows})
    b = v.budget
    reached = [int(c.steps or 0) for c in rows if not shared.is_shared(v.cfg, c)]
    row: dict[str, Any] = {
        "variant": v.name,
        "model": MODELS[v.name],
        "pairs": b.pairs,
        "steps": b.steps,
        "steps_reached": round(sum(reached) / len(reached), 1),
        "steps_reached_range": [min(reached), max(reached)],
        "time_up": sum(1 for c in rows if c.time_up),
        "pair_s": round(b.pair_s, 3),
        "batch": batches[0] if len(batches) == 1 else batches,
        "images_seen": seen,
        "epochs_per_image": round(seen / sum(counts.values()), 4),
        "amp": rd.precisions(),  # "off", "bf16", or "off, then bf16" (RunDir.precisions)
        "train_s": round(slowest_rank_s(rows), 1),
        **device_seconds(rows, rd.read_env()),
        **scores(result, counts),
        "run": str(rd.path),
        "samples": str(rd.samples),
        "grid": str(rd.grid),
        "evaluation": str(evaluation),
        **shared.row_fields(v.cfg, b, rows),
    }
    if v.name == "per-class":  # each class's images are seen steps x batch / its count times
        row["epochs_per_image_per_class"] = {
            str(k): round(b.steps * b.batch / n, 4) for k, n in counts.items()
        }
    fingerprint = {**fingerprint, "summary_sha256": _sha256(rd.summary_file)}
    write_json(rd.row, {"fingerprint": fingerprint, "row": row})
    return row


def scores(result: EvalResult, counts: dict[int, int]) -> dict[str, Any]:
    """A row's scores, from its evaluation; `counts`, the compared classes' real images, are
    what its label shares are measured against (label_tv)."""
    acc = result.class_accuracy
    return {
        "n": result.n,
        "is_mean": result.is_mean,
        "is_std": result.is_std,
        "fid": result.fid,
        "fid_class_mean": class_mean(result.per_class_fid),
        "class_accuracy": acc["overall"] if acc else None,
        "precision": result.precision,
        "recall": result.recall,
        "per_class_accuracy": acc["per_class"] if acc else None,
        "per_class_fid": result.per_class_fid,
        "per_class_precision": result.per_class_precision,
        "per_class_recall": result.per_class_recall,
        "label_shares": result.label_shares,  # of all samples, by the network's label
        "label_tv": label_tv(result.label_shares, counts),
        "labelled": result.labelled,
    }


def stored_row(path: Path, counts: dict[int, int]) -> dict[str, Any]:
    """A variant's stored row (its row.json), as `with_class_mean` completes it (`counts`:
    the compared classes' real images)."""
    row = with_class_mean(read_json(path, "row")["row"], counts)
    if "amp" not in row:  # a row from before 2026-11-28: its run's record says
        row["amp"] = VariantDir(path.parent).precisions()
    return row


@dataclass(frozen=True)
class Comparison:
    """What every step of one comparison shares, the same on every rank: the options, the base
    config, the data's classes, the variants and the directory; once the scoring network is
    known (`scoring`), it and what every row is computed from besides its training."""

    comm: Comm
    opts: CompareOptions
    base: TrainConfig
    data: DatasetInfo
    class_ids: tuple[int, ...]
    variants: list[Variant]
    cdir: CompareDir
    say: Callable[[str], None]
    network: str = ""
    common: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def counts(self) -> dict[int, int]:
        return {k: self.data.counts[k] for k in self.class_ids}

    @property
    def per_class(self) -> int:
        """Samples of every class, in every variant."""
        return -(-self.opts.n // len(self.class_ids))


# Fields each variant or seed sets itself (variant_configs, the seed loop), and the preset's name.
_NOT_TRAINING_OPTIONS = frozenset({"preset", "mode", "classes", "global_batch_size", "seed"})


def training_options(base: TrainConfig) -> dict[str, Any]:
    """The options every variant trained with besides its preset's: the base config's fields
    that change what a step computes (not placement or bookkeeping) and differ from the
    preset's value, e.g. {"d_bn_eps": 1e-05, "augment": "color,cutout"}. Placement and precision
    (--amp, --fuse, --cuda-graphs, RESUMABLE_FIELDS) are left out, as is what compare sets per
    variant (steps, batch): a run's config.json has those."""
    # A config file may name a preset of its own: its options are then those over the defaults.
    ref = (preset(base.preset) if base.preset in PRESETS else TrainConfig()).to_dict()
    now = base.to_dict()
    skip = RESUMABLE_FIELDS | _NOT_TRAINING_OPTIONS
    return {k: v for k, v in now.items() if k not in skip and v != ref[k]}


def training_record(base: TrainConfig) -> dict[str, Any]:
    """compare.json's `training`: the preset and the options over it (training_options)."""
    return {"preset": base.preset, "options": training_options(base)}


def document(
    c: Comparison, runs: dict[int, dict[str, dict[str, Any]]], real: dict[str, Any] | None,
    wall_s: float,
) -> dict[str, Any]:  # fmt: skip
    """Rank 0: compare.json's content, which report.py renders: every seed's rows ("runs"), and
    per variant the first seed's row with the intervals over the seeds ("variants")."""
    data, opts, class_ids = c.data, c.opts, c.class_ids
    budgets = {
        v.name: {
            "pairs": v.budget.pairs,
            "steps": v.budget.steps,
            "batch": v.budget.batch,
            "images_seen": v.budget.images_seen,
            "epochs_per_image": round(v.budget.epochs_per_image, 4),
            "pair_s": round(v.budget.pair_s, 3),
            **(
                {"shared_steps": v.budget.shared_steps, "shared_s": round(v.budget.shared_s, 3)}
                if v.budget.shared_steps
                else {}
            ),
        }
        for v in c.variants
    }
    return {
        "data": data.path,
        "classes": list(class_ids),
        "class_names": [data.class_names[k] for k in class_ids],
        "counts": [c.counts[k] for k in class_ids],  # real images of each compared class
        "images": sum(c.counts.values()),
        "ranks": c.comm.size,
        "budget": {
            "name": opts.budget,
            "rule": rule_words(opts),
            **(
                {"shared_fraction": opts.fraction, "freeze_d": opts.freeze_d}
                if opts.fraction
                else {}
            ),
            "seconds": opts.budget_s or None,
            "steps_per_class": c.base.steps,
            "batch": c.variants[0].budget.batch if c.variants else None,
            "variants": budgets,
        },
        "training": training_record(c.base),
        "scoring": {
            "network": c.network,
            "classifier": classifier_record(c.network, data),
            "n": c.per_class * len(class_ids),
            "per_class": c.per_class,
            "splits": opts.splits,
            "seed": opts.seed,
        },
        "seeds": list(runs),
        "figure_seed": next(iter(runs)),
        "variants": summarise(runs),
        "runs": {str(s): rows for s, rows in runs.items()},
        "real": real,
        "wall_s": round(wall_s, 1),
        "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


# ---- the command ------------------------------------------------------------------------------


def run_compare(
    comm: Comm, opts: CompareOptions, base: TrainConfig, log: Callable[[str], None] = print
) -> int:
    """Collective: the whole comparison; returns the exit code (0, or a variant's training
    code: 3 diverged, 75 stopped by a signal; rerun with --resume)."""
    t0 = time.perf_counter()
    c = _check(comm, opts, base, log if comm.rank == 0 else (lambda m: None))
    if opts.launch.dry_run:
        c.say(plan_text(c))
        return 0
    lock: list[int] = []  # rank 0 holds DIR/.lock until the comparison ends
    agree(comm, lambda: lock.extend(open_dir(c.cdir, opts, base)), root=0)
    c.say(plan_text(c))
    try:
        c = _scoring(c)
        runs: dict[int, dict[str, dict[str, Any]]] = {}
        for seed in range(base.seed, base.seed + opts.seeds):
            rows = _run_seed(c, seed)
            if isinstance(rows, int):  # training stopped: a signal (75) or a divergence (3)
                return rows
            runs[seed] = rows
        real = score_real(c) if opts.real else None
        doc = partial(document, c, runs, real, time.perf_counter() - t0)
        agree(comm, lambda: write_outputs(c.cdir, doc(), c.data, c.say), root=0)
    finally:
        for fd in lock:
            os.close(fd)
    return 0


def _check(
    comm: Comm, opts: CompareOptions, base: TrainConfig, say: Callable[[str], None]
) -> Comparison:
    """Collective: everything checked before anything is trained (rank 0 reads; every rank
    agrees), and the comparison it describes."""
    data, class_ids = read_training_data(comm, base)
    agree(comm, lambda: check_options(opts, data, class_ids), root=0)
    counts = [data.counts[k] for k in class_ids]
    variants = agree(comm, lambda: variant_configs(base, counts, opts, comm.size), root=0)
    agree(comm, lambda: shared.check_depth([v.cfg for v in variants], data.channels), root=0)
    cdir = CompareDir(Path(opts.out))
    return Comparison(comm, opts, base, data, tuple(class_ids), variants, cdir, say)


def _scoring(c: Comparison) -> Comparison:
    """Collective: the comparison with the network every variant is scored with (trained on
    the data first without --network) and what every row is computed from."""
    comm, opts, base = c.comm, c.opts, c.base
    ctx = build_context(comm, c.class_ids, base.devices, base.threads)
    torch.set_num_threads(ctx.threads)
    spec, net_sha = agree(
        comm, lambda: ensure_network(opts, c.cdir, base.data, ctx.device_d, c.say), root=0
    )
    if base.score_every and not base.score_network:  # scores during training: the same network
        variants = [
            dataclasses.replace(v, cfg=dataclasses.replace(v.cfg, score_network=spec))
            for v in c.variants
        ]
        c = dataclasses.replace(c, variants=variants)
    common = {  # what every row was computed from, besides its training
        "data": base.data,
        "counts": [c.counts[k] for k in c.class_ids],
        "per_class_samples": c.per_class,
        "splits": opts.splits,
        "seed": opts.seed,
        "network_sha256": net_sha,
    }
    return dataclasses.replace(c, network=spec, common=common)


def _run_seed(c: Comparison, seed: int) -> dict[str, dict[str, Any]] | int:
    """Collective: each variant trained (or continued) with run seed `seed`, sampled and
    scored: their rows, or the exit code of a variant whose training stopped."""
    first = c.base.seed
    agree(c.comm, partial(c.cdir.seed(seed, first).mkdir, exist_ok=True), root=0)
    rows = {}
    for v in c.variants:
        sv = dataclasses.replace(v, cfg=dataclasses.replace(v.cfg, seed=seed))
        row = run_variant(c, sv, c.cdir.variant(seed, first, v.name))
        if isinstance(row, int):
            c.say(
                f"distcgan: the {v.name} variant of seed {seed} stopped (exit {row}); continue "
                f"the comparison with: distcgan compare --out {c.cdir.path} --resume"
            )
            return row
        rows[v.name] = row
    return rows


def score(c: Comparison, samples: str, rd: VariantDir, classes: tuple[int, ...] | None = None
) -> tuple[EvalResult | None, Path]:  # fmt: skip
    """Collective: `samples` (a sample file, or the real data) scored with `evaluate` as every
    row is, into rd's evaluate-NETWORK.json: the result on rank 0 (None elsewhere), its file."""
    evaluation = rd.evaluation(network_tag(c.network))
    opts = EvalOptions(
        samples=samples,
        data=c.base.data,
        network=c.network,
        weights=c.opts.weights,
        classes=classes,
        splits=c.opts.splits,
        seed=c.opts.seed,
        json=str(evaluation),
        overwrite=True,  # the comparison's own file (a rescore replaces it)
        devices=c.base.devices,
        batch_size=c.opts.eval_batch_size,
        progress=c.opts.progress,
    )
    return evaluate(c.comm, opts, log=c.say), evaluation


def run_variant(c: Comparison, v: Variant, rd: VariantDir) -> dict[str, Any] | int:
    """Collective: one variant's row of the table, or the exit code of its stopped training."""
    comm, say = c.comm, c.say
    fingerprint = {
        "variant": v.name,
        "seed": v.cfg.seed,
        "steps": v.cfg.steps,
        "batch": v.budget.batch,
        # under the time rule, each pair's seconds (they depend on the ranks; absent under
        # the others, so that rows scored before the rule existed still match)
        **({"pair_s": v.budget.pair_s} if v.budget.pair_s else {}),
        # shared-per-class's shared phase and what it freezes (absent for the others)
        **shared.fingerprint(v.cfg),
        **c.common,
    }
    status = agree(comm, partial(variant_status, rd, v, c.class_ids, fingerprint), root=0)
    if status == "scored":
        say(f"== {v.name}, seed {v.cfg.seed}: trained and scored already ({rd.row})")
        return agree(comm, partial(stored_row, rd.row, c.counts), root=0)
    if status in ("new", "resume"):
        say(
            f"== {v.name} ({MODELS[v.name]}), seed {v.cfg.seed}: {shared.phase_words(v.cfg)}"
            f"{v.budget.pairs} pair(s) x {v.cfg.steps} steps at batch {v.budget.batch}"
            + (" (continuing)" if status == "resume" else "")
        )
        launch = LaunchOptions(
            resume=status == "resume",
            progress=c.opts.progress,
            allow_regroup=c.opts.launch.allow_regroup,  # a variant keeps its groups unless told
        )
        code = train_with_scorer(comm, v.cfg, TrainOptions(run=str(rd.path), launch=launch))
        if code != 0:
            return code
    if v.budget.pair_s:
        agree(comm, lambda: check_time_spent(v, rd.summary_rows()), root=0)
    say(f"== {v.name}: {c.per_class} samples per class, scored with {c.network}")
    sampling = SampleOptions(
        run=str(rd.path),
        per_class=c.per_class,
        out=str(rd.samples),
        grid=str(rd.grid),
        overwrite=True,  # the comparison's own files (a resumed variant samples again)
        seed=c.opts.seed,
        devices=v.cfg.devices.split(",")[0],  # a rank samples on its G's device
        progress=c.opts.progress,
    )
    sample_run(comm, sampling)
    scored = score(c, str(rd.samples), rd)
    return agree(comm, partial(make_row, v, rd, scored, c.counts, fingerprint), root=0)


def score_real(c: Comparison) -> dict[str, Any]:
    """Collective: the real images scored as if they were samples (DIR/real/), the ceiling of
    the table; skipped on --resume while its row.json still matches."""
    rd = c.cdir.real
    fingerprint = {"variant": "real", "classes": list(c.class_ids), **c.common}

    def stored() -> dict[str, Any] | None:
        if rd.row.is_file():
            old = read_json(rd.row, "comparison row")
            if old.get("fingerprint") == fingerprint:
                return with_class_mean(old["row"], c.counts)
        rd.path.mkdir(exist_ok=True)
        return None

    real = agree(c.comm, stored, root=0)
    if real is not None:
        return real
    c.say(
        f"== real: the {sum(c.common['counts'])} real images of these classes, scored like samples"
    )
    result, _ = score(c, c.base.data, rd, c.class_ids)

    def make() -> dict[str, Any]:
        assert result is not None  # rank 0, which `score` gives the result
        row = {"variant": "real", "model": MODELS["real"], **scores(result, c.counts)}
        write_json(rd.row, {"fingerprint": fingerprint, "row": row})
        return row

    return agree(c.comm, make, root=0)


def plan_text(c: Comparison) -> str:
    """The plan, printed before anything runs (and all that --dry-run prints)."""
    ranks, opts, counts = c.comm.size, c.opts, c.counts
    timed = opts.budget == "time"
    rows = [
        {
            "variant": v.name,
            **shared.plan_columns(v.budget, timed, [u.budget for u in c.variants]),
            "pairs": v.budget.pairs,
            ("max_steps_per_pair" if timed else "steps_per_pair"): v.cfg.steps,
            **({"seconds_per_pair": f"{v.budget.pair_s:.4g}"} if timed else {}),
            "batch": v.budget.batch,
            ("max_images_seen" if timed else "images_seen"): v.budget.images_seen,
            "epochs_per_image": f"{v.budget.epochs_per_image:.2f}",
            **(
                {"score_every": v.cfg.score_every, "score_n": v.cfg.score_n}
                if v.cfg.score_every
                else {}
            ),
            "ranks_per_pair": ",".join(
                str(s)
                for s in sorted(
                    {len(p.group) for p in assign_tasks(v.budget.pairs, ranks)}, reverse=True
                )
            ),
        }
        for v in c.variants
    ]
    columns = list(rows[0]) if rows else []
    return (
        f"compare: {len(counts)} classes ({sum(counts.values())} images) on {ranks} rank(s); "
        f"budget {opts.budget}: {rule_words(opts)}\n"
        + format_table(rows, columns)
        + f"\ntraining: {training_words(training_record(c.base))}"
        + f"\nscoring: {c.per_class} samples per class per variant, {opts.splits} splits, "
        f"seed {opts.seed}, network {opts.network or 'DIR/classifier.pt (trained on the data)'}"
        + ("" if opts.real else "; no real-data row")
        + (f"\n{opts.seeds} run seeds per variant" if opts.seeds > 1 else "")
    )

"""The shared-per-class variant of `distcgan compare`: per-class pairs fine-tuned from one DC-GAN
trained on all the classes first, as `train --mode per-class --shared-steps S` trains them (one
run directory; its task all/ is the shared phase, data-parallel over every rank, then each class
in class_XXX/ from its final weights, with no communication).

What compare needs of it besides what every variant has: its options checked (--shared-fraction,
--freeze-d), its run's config, the steps each of its tasks trains to, and its budget in words.
Its scores during training: the shared phase is scored as the run's config says (every
--score-every of its steps, --score-n samples over all the classes), each fine-tune as a
per-class pair is. Leaves out: its budget's numbers (plan.shared_budget) and its training
(train/job.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from distcgan.config import TrainConfig
from distcgan.errors import UserError
from distcgan.options import CompareOptions
from distcgan.plan import SHARED_VARIANT, Budget
from distcgan.train.init_from import check_freeze_depth
from distcgan.train.regroup import SHARED_TASK, Targets

MODEL = "per-class DC-GANs fine-tuned from one DC-GAN trained on all the classes first"
RULES = {
    "images": (
        "shared-per-class trains one DC-GAN on all the classes for K x s steps first, s = F x S "
        "rounded (F = {fraction:g}, the shared fraction), then each class S - s steps from it: "
        "K x S x B real images too"
    ),
    "steps": (
        "shared-per-class trains one DC-GAN on all the classes for s = F x S steps (rounded; F "
        "= {fraction:g}, the shared fraction), then each class S - s steps from it, so that "
        "every class's G has had S steps"
    ),
    "time": (
        "shared-per-class's shared phase (one DC-GAN on all the classes, on every rank) trains "
        "F x {seconds:g} s (F = {fraction:g}, the shared fraction; at most its images steps), "
        "its classes the rest, a rank's pairs sharing it as per-class's do"
    ),
}
# The training config fields compare sets for this variant alone, which a --config file may not.
_SET_HERE = ("shared_steps", "shared_time_limit_s", "freeze_d")


def check_options(opts: CompareOptions) -> None:
    """--shared-fraction and --freeze-d: each with the shared-per-class variant only, the
    fraction in (0, 1), N >= 0 (D's depth: `check_depth`). On --resume the values the
    comparison was started with are kept (options.compare_options) whatever --variants now
    says: a resume without the variant leaves them unused."""
    asked = SHARED_VARIANT in opts.variants or opts.launch.resume
    fraction = opts.shared_fraction
    for flag, given in (("--shared-fraction", fraction), ("--freeze-d", opts.freeze_d or None)):
        if given is not None and not asked:
            raise UserError(
                f"{flag} {given:g} goes with the {SHARED_VARIANT} variant: add it to --variants "
                f"(e.g. --variants per-class {SHARED_VARIANT}), or drop {flag}"
            )
    if fraction is not None and not 0 < fraction < 1:
        raise UserError(
            f"--shared-fraction {fraction:g} is not between 0 and 1: it is the share of the "
            "budget the shared phase takes (the fine-tunes take the rest), e.g. 0.5"
        )
    if opts.freeze_d < 0:
        raise UserError(f"--freeze-d must be >= 0 (0: nothing frozen), got {opts.freeze_d}")


def check_base(base: TrainConfig) -> None:
    """A base config (a --config file's) that sets what compare sets for this variant, or a
    start from another run (train --init-from's alone)."""
    default = TrainConfig()
    if base.init_from:
        raise UserError(
            "compare trains every variant from scratch, or shared-per-class from its own shared "
            "phase: drop init_from from the config file"
        )
    for name in _SET_HERE:
        if getattr(base, name) != getattr(default, name):
            raise UserError(
                f"compare sets {name} itself (--shared-fraction, --freeze-d and the budget, for "
                f"the {SHARED_VARIANT} variant alone): drop {name} from the config file"
            )


def run_config(cfg: TrainConfig, b: Budget, opts: CompareOptions) -> TrainConfig:
    """The variant's run: `cfg` (per-class's config under the budget) with its shared phase."""
    return dataclasses.replace(
        cfg,
        mode="per-class",
        shared_steps=b.shared_steps,
        shared_time_limit_s=b.shared_s,
        freeze_d=opts.freeze_d,
    )


def check_depth(cfgs: Sequence[TrainConfig], channels: int) -> None:
    """Rank 0, before anything trains: a --freeze-d beyond D's depth, in one line."""
    for cfg in cfgs:
        if cfg.freeze_d:
            check_freeze_depth(cfg, channels)


def targets(cfg: TrainConfig) -> Targets:
    """The steps each task of a variant's run trains to (the shared task its shared steps)."""
    return Targets(cfg.steps, cfg.shared_steps)


def task_names(cfg: TrainConfig, classes: Sequence[str]) -> set[str]:
    """The tasks of a variant's run: its classes' (or its one pair's), and the shared task."""
    return set(classes) | ({SHARED_TASK} if cfg.shared_steps else set())


def is_shared(cfg: TrainConfig, row: Any) -> bool:
    """Whether a summary row of `cfg`'s run is its shared phase's (a gan or cgan run's one
    pair has the same task name, all)."""
    return bool(cfg.shared_steps) and row.task == SHARED_TASK


def fingerprint(cfg: TrainConfig) -> dict[str, Any]:
    """What of the shared phase a variant's row.json must still match ({} without one)."""
    if not cfg.shared_steps:
        return {}
    return {
        "shared_steps": cfg.shared_steps,
        "shared_s": cfg.shared_time_limit_s,
        "freeze_d": cfg.freeze_d,
    }


def phase_words(cfg: TrainConfig) -> str:
    """ "a shared phase of 450 steps, then " ("" without one), before a variant's pairs."""
    if not cfg.shared_steps:
        return ""
    limit = f" (at most {cfg.shared_time_limit_s:.4g} s)" if cfg.shared_time_limit_s else ""
    return f"a shared phase of {cfg.shared_steps} steps{limit}, then "


def row_fields(cfg: TrainConfig, b: Budget, rows: Sequence[Any]) -> dict[str, Any]:
    """A shared-per-class row's shared phase ({} for the others): its steps (the time rule's
    cap), those it reached, its seconds under the time rule and the training seconds it took
    (its images and seconds count in the row's cost already: it is a row of the summary)."""
    if not b.shared_steps:
        return {}
    [phase] = [c for c in rows if is_shared(cfg, c)]
    return {
        "shared_steps": b.shared_steps,
        "shared_steps_reached": int(phase.steps or 0),
        "shared_s": round(b.shared_s, 3),
        "shared_train_s": round(phase.train_s or 0.0, 1),
    }


def plan_columns(b: Budget, timed: bool, every: Sequence[Budget]) -> dict[str, Any]:
    """The plan table's shared-phase columns, where a variant has a shared phase ("-" for the
    others; none at all without one)."""
    if not any(u.shared_steps for u in every):
        return {}
    steps = b.shared_steps or "-"
    if not timed:
        return {"shared_steps": steps}
    return {"max_shared_steps": steps, "shared_seconds": f"{b.shared_s:.4g}" if b.shared_s else "-"}


def rule_text(opts: CompareOptions) -> str:
    """The shared-per-class variant's budget in words ("" without it), after the rule's."""
    if not opts.fraction:
        return ""
    frozen = (
        f", D's first {opts.freeze_d} block(s) kept as the shared phase left them (--freeze-d)"
        if opts.freeze_d
        else ""
    )
    return RULES[opts.budget].format(fraction=opts.fraction, seconds=opts.budget_s) + frozen

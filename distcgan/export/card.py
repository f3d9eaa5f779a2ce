"""The model card (README.md) of an export: how to use it, the data and its classes, the training
budget, and the evaluation's overall and per-class scores when `distcgan evaluate` has run
(the newest evaluate-NETWORK.json of the run). Leaves out: writing it (writer.py).
"""

from __future__ import annotations

import json
from typing import Any

from distcgan.report.shared import class_rows, shared_phase
from distcgan.run.rundir import RunDir, job_speed


def model_card(rd: RunDir, config: dict[str, Any]) -> str:
    """The card's markdown, from the run directory and the export's config."""
    dataset = rd.read_dataset()
    evaluation = json.loads(rd.evaluations()[-1].read_text()) if rd.evaluations() else None
    parts = [
        f"# distcgan generator: {_kind(config)}",
        "",
        *_usage(config),
        "",
        "## Data",
        "",
        f"`{dataset.get('path')}` (source `{dataset.get('source')}`), {config['resolution']} px, "
        f"{config['channels']} channel(s); {len(config['class_ids'])} of its "
        f"{config['num_classes']} classes:",
        "",
        *_classes(config, dataset, evaluation),
        "",
        "## Training",
        "",
        *_training(rd, config),
        "",
        "## Evaluation",
        "",
        *_evaluation(evaluation),
    ]
    return "\n".join(parts) + "\n"


def _kind(config: dict[str, Any]) -> str:
    return {
        "per-class": f"{len(config['class_ids'])} per-class DC-GANs as one conditional G(z, y)",
        "cgan": "one DC-CGAN, G(z, y)",
        "gan": "one DC-GAN on all the classes, G(z) (no labels)",
    }[config["kind"]]


def _usage(config: dict[str, Any]) -> list[str]:
    y = ", y" if config["conditional"] else ""
    k = config["class_ids"][0]
    labels = f"\ny = torch.full((16,), {k})  # class ids: {_ids(config)}" if y else ""
    return [
        "With torch alone (no distcgan needed): `generator.pt2` maps z float32 (N, "
        f"{config['z_dim']}){' and y int64 (N,) class ids' if y else ''} to uint8 images (N, "
        f"{config['channels']}, {config['resolution']}, {config['resolution']}).",
        "",
        "```python",
        "import torch",
        'G = torch.export.load("generator.pt2").module()',
        f"z = torch.randn(16, {config['z_dim']}){labels}",
        f"images = G(z{y})",
        "```",
        "",
        "With distcgan: `distcgan.load_generator(DIR)` gives the same G as a module (on any "
        "device), and `distcgan generate --model DIR --class K --n 8 --out grid.png` draws a grid "
        "(its noise is `distcgan sample`'s: the same seed gives the same images).",
    ]


def _ids(config: dict[str, Any]) -> str:
    ids = config["class_ids"]
    return ", ".join(map(str, ids)) if len(ids) <= 12 else f"{ids[0]}..{ids[-1]} ({len(ids)})"


def _classes(
    config: dict[str, Any], dataset: dict[str, Any], evaluation: dict[str, Any] | None
) -> list[str]:
    """One row per class: its id, name, training images and, after an evaluation, its scores."""
    per = _per_class(evaluation)
    head = "| class | name | images |" + (" accuracy | FID | precision | recall |" if per else "")
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for k, name in zip(config["class_ids"], config["class_names"]):
        row = f"| {k} | {name} | {dataset['counts'][k]:,} |"
        if per:
            row += "".join(f" {_num(per[m].get(str(k)))} |" for m in per)
        lines.append(row)
    return lines


def _per_class(evaluation: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    if not evaluation:
        return {}
    acc = evaluation.get("class_accuracy") or {}
    return {
        "accuracy": acc.get("per_class") or {},
        "fid": evaluation.get("per_class_fid") or {},
        "precision": evaluation.get("per_class_precision") or {},
        "recall": evaluation.get("per_class_recall") or {},
    }


def _steps(rd: RunDir, cfg: dict[str, Any]) -> str:
    """The steps trained: the config's, or with --time-limit-s those its pairs reached."""
    if not cfg.get("time_limit_s") or not rd.has_summary():
        return f"{cfg['steps']:,} steps"
    rows = class_rows(cfg, rd.summary_rows())  # a shared phase's steps are not a pair's
    reached = sorted({int(r.steps) for r in rows if r.steps is not None})
    if not reached:
        return f"{cfg['steps']:,} steps"
    span = f"{reached[0]:,}" if len(reached) == 1 else f"{reached[0]:,} to {reached[-1]:,}"
    return f"{span} steps (its {cfg['time_limit_s']:g} s time limit)"


def _training(rd: RunDir, config: dict[str, Any]) -> list[str]:
    cfg = config["run"]["config"]
    lines = [
        f"Mode {config['kind']}, {_steps(rd, cfg)} per G/D pair at batch "
        f"{cfg['global_batch_size'] or cfg['batch_size']} per rank group, run seed "
        f"{config['seed']}, Adam (lr G {cfg['lr_g']}, D {cfg['lr_d']}, betas {cfg['beta1']}, "
        f"{cfg['beta2']}), D dropout {cfg['d_dropout']}, "
        f"D BatchNorm eps {cfg.get('d_bn_eps', 0.8)}; weights: {config['weights']}.",
        f"Run `{config['run']['path']}` at commit `{config['run']['commit']}`.",
        *_start(rd, cfg),
        *_shared(rd, cfg, len(config["class_ids"])),
    ]
    if rd.has_summary():
        summary = rd.read_summary()
        job = job_speed(rd.summary_rows())
        tasks = "the shared phase, then its classes," if cfg.get("shared_steps") else "its classes"
        lines.append(
            f"Trained on {summary['ranks']} rank(s) (the last launch's); the slowest rank's "
            f"training took {job['train_s']:.0f} s over every launch, {tasks} one after "
            f"another: {job['images']:,} images, {job['imgs_per_s']:,.0f} images/s over all ranks."
        )
    return lines


def _start(rd: RunDir, cfg: dict[str, Any]) -> list[str]:
    """Where the pairs started (--init-from) and what of D stayed frozen (--freeze-d)."""
    if not cfg.get("init_from"):
        return []
    start = rd.read_dataset().get("start") or {}
    return [
        f"Every pair started from the final weights of the gan run `{cfg['init_from']}` (step "
        f"{start.get('step', '?')}, weights SHA-256 `{str(start.get('sha256', '?'))[:16]}`) with "
        f"fresh Adam states (--init-from); {_frozen(cfg)}."
    ]


def _frozen(cfg: dict[str, Any]) -> str:
    """What of D stayed frozen while the classes fine-tuned (--freeze-d)."""
    n = cfg.get("freeze_d", 0)
    what = f"D's first {n} block(s) kept frozen" if n else "nothing frozen"
    return f"{what} (--freeze-d {n})"


def _shared(rd: RunDir, cfg: dict[str, Any], classes: int) -> list[str]:
    """A two-phase run's shared phase (--shared-steps), which every class fine-tuned from, and
    what of D stayed frozen (--freeze-d)."""
    shared = shared_phase(cfg, rd.summary_rows() if rd.has_summary() else [], classes)
    if shared is None:
        return []
    limit = cfg.get("shared_time_limit_s")
    limit = f" under its {limit:g} s time limit (--shared-time-limit-s)" if limit else ""
    cost = f" It took {shared.cost()}." if shared.cost() else ""
    return [
        f"Each class fine-tuned from {shared.describe()}{limit}, trained first in the run's "
        f"`all/`, with fresh Adam states (--shared-steps {cfg['shared_steps']}); "
        f"{_frozen(cfg)}.{cost}"
    ]


def _evaluation(evaluation: dict[str, Any] | None) -> list[str]:
    if evaluation is None:
        return [
            "Not evaluated yet: run `distcgan evaluate --run RUN --network NET`, then `distcgan "
            "export --run RUN --out DIR --overwrite` to write this card again with the scores."
        ]
    acc = evaluation.get("class_accuracy")
    return [
        f"{evaluation['n']:,} samples scored with `{evaluation['network']}`: Inception Score "
        f"{evaluation['is_mean']:.3f} ± {evaluation['is_std']:.3f} ({evaluation['splits']} "
        f"splits), FID {_num(evaluation.get('fid'))}, precision "
        f"{_num(evaluation.get('precision'))}, recall {_num(evaluation.get('recall'))}, class "
        f"accuracy {_num(acc['overall'] if acc else None)}.",
    ]


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"

"""The report's curves of a run's tasks: a panel per class of its losses and logit_gap, and with
--score-every the scores taken during training, one panel per score. A two-phase run's shared
phase (train --shared-steps S, RUN/all/) comes first on the run's axis of steps and each class's
fine-tune after it, at S + its step, the boundary dashed. Leaves out: the rest of the page
(page.py).
"""

from __future__ import annotations

import html
from typing import Any

from distcgan.report import draw
from distcgan.report.shared import TASK, on_run_axis


def heading(offset: int) -> str:
    heading = "Curves per class: loss_d and loss_g (left), logit_gap (right)"
    if offset:
        heading += (
            f"; x: steps of the run, the shared phase's {offset} (faded, up to the dashed "
            f"line) then {offset} + the class's step"
        )
    return f"<h2>{html.escape(heading)}</h2>"


def _losses(ax: Any, gap: Any, lines: list[dict], offset: int, faded: bool) -> None:
    """loss_d and loss_g on `ax`, logit_gap on `gap` (its own scale: near 0 while D is at
    chance, where the losses' scale, about 0.7, flattened it to a line); at `offset` + step,
    `faded` for the shared phase's before a fine-tune's."""
    steps = on_run_axis(lines, offset)
    alpha, label = (0.4, "_") if faded else (1.0, "")
    for color, key in (("C0", "loss_d"), ("C1", "loss_g")):
        ax.plot(
            steps, [x.get(key) for x in lines], label=label + key, lw=1, color=color, alpha=alpha
        )
    gap.plot(steps, [x.get("logit_gap") for x in lines], lw=1, color="C2", alpha=alpha)


def small_multiples(
    metrics: dict[str, list[dict]], before: list[dict] | None = None, offset: int = 0
) -> str:
    """A panel per class: its losses and logit_gap, after the shared phase's (`before`, at
    their own steps; the class's at `offset` + step) where the run had one."""
    if not metrics and before:  # the shared phase still training: its panel alone
        return small_multiples({TASK: before})
    if not metrics:
        return ""
    cols = 5
    nrows = -(-len(metrics) // cols)
    fig, axes = draw.pyplot().subplots(
        nrows, cols, figsize=(2.4 * cols, 1.8 * nrows), squeeze=False
    )
    for ax in axes.flat:
        ax.set_visible(False)
    for ax, (task, lines) in zip(axes.flat, metrics.items()):
        ax.set_visible(True)
        gap = ax.twinx()
        if before:
            _losses(ax, gap, before, 0, faded=True)
            ax.axvline(offset, color="0.5", ls="--", lw=0.8)
        _losses(ax, gap, lines, offset, faded=False)
        gap.tick_params(labelsize=6, colors="C2")
        ax.set_title(task, fontsize=8)
        ax.tick_params(labelsize=6)
    axes.flat[0].legend(fontsize=6, loc="upper left")
    # not tight_layout: measuring 40 axes' text takes seconds. Fixed gaps in inches (a title
    # above the first row, tick labels below the last) whatever the number of rows.
    height = 1.8 * nrows
    top, bottom = 1 - 0.3 / height, 0.3 / height
    fig.subplots_adjust(left=0.04, right=0.97, top=top, bottom=bottom, hspace=0.5, wspace=0.45)
    return draw.figure(fig, tight=False)


SCORES = (
    ("score_fid", "FID"),
    ("score_precision", "precision"),
    ("score_recall", "recall"),
    ("score_accuracy", "class accuracy"),
)


def score_curves(
    metrics: dict[str, list[dict]], before: list[dict] | None = None, offset: int = 0
) -> str:
    """With --score-every: the scores taken during training, one panel per score, a thin line
    per class and their mean over the classes (at the steps every class was scored) in black;
    in a two-phase run the shared phase's line (`before`) first, in red, and each class's at
    `offset` + its step, the boundary dashed."""
    scored = {t: [x for x in lines if "score_fid" in x] for t, lines in metrics.items()}
    scored = {t: lines for t, lines in scored.items() if lines}
    shared = [x for x in before or [] if "score_fid" in x]
    if not scored and not shared:
        return ""
    every = [x for v in [shared, *scored.values()] for x in v]
    keys = [(k, name) for k, name in SCORES if any(k in x for x in every)]
    fig, axes = draw.pyplot().subplots(1, len(keys), figsize=(3.4 * len(keys), 2.6), squeeze=False)
    for ax, (key, name) in zip(axes.flat, keys):
        if offset:  # red dots: a class's thin line may be red too
            values = [x.get(key) for x in shared]
            ax.plot(on_run_axis(shared, 0), values, color="C3", lw=2, marker="o", ms=3)
            ax.axvline(offset, color="0.5", ls="--", lw=0.8)
        _score_panel(ax, scored, key, offset)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel(
            f"step of the run ({offset} shared + the class's)" if offset else "step", fontsize=8
        )
        ax.tick_params(labelsize=7)
    first = every[0]
    return (
        f"<h2>Scores during training (--score-every): {_score_key(offset)}</h2>"
        f"<p>{len(every)} scores of {first.get('score_n')} samples each (a pair's against its "
        "classes' real images).</p>" + draw.figure(fig)
    )


def _score_key(offset: int) -> str:
    if not offset:
        return "one thin line per class, their mean in black"
    return (
        f"the shared phase ({TASK}/: its one G against every class's images) in red with dots "
        f"up to step {offset} (dashed), then one thin line per class at {offset} + its step (its G "
        "against its class's images), their mean in black"
    )


def _score_panel(ax: Any, scored: dict[str, list[dict]], key: str, offset: int) -> None:
    """A thin line per class of score `key` and their mean where every class was scored."""
    by_step: dict[int, list[float]] = {}
    for lines in scored.values():
        ax.plot(on_run_axis(lines, offset), [x.get(key) for x in lines], lw=0.6, alpha=0.5)
        for x in lines:
            if x.get(key) is not None:
                by_step.setdefault(offset + x["step"], []).append(x[key])
    common = sorted(s for s, v in by_step.items() if len(v) == len(scored))
    ax.plot(common, [sum(by_step[s]) / len(scored) for s in common], color="k", lw=1.6)

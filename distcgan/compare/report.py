"""What `distcgan compare` writes at the end (rank 0): compare.json, compare.md and compare.png,
rendered from the document that compare computed (experiment.py); a leaf: it imports nothing of
compare's.

compare.json holds everything (the budget per variant, the scores, per-class accuracy and FID,
paths); compare.md is the paper's table, one row per variant and one for the real images;
compare.png puts the variants' sample grids side by side, one row per class, the same classes
and columns in every panel. An unconditional G's samples have no class: in its panel, row k
shows the first of its samples that the scoring network assigns to class k (when the network's
outputs are the data's classes), so that the rows can be compared, and beside each row the share
of all its draws the network assigns to that class, so that full rows do not hide a G that draws
one class almost always; the panel's title says so.
All three files are written atomically. Leaves out: computing any row or score (experiment.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from distcgan.compare.seeds import METRICS, ordering, separated
from distcgan.data import DatasetInfo, load_class
from distcgan.eval.metrics.networks import WEIGHT_FILES, load_network
from distcgan.images import grid_canvas, grid_scale
from distcgan.run.atomic import atomic_path, atomic_write_bytes
from distcgan.run.comparedir import CompareDir
from distcgan.run.rundir import write_json

NAMES = {
    "per-class": "per-class DC-GAN",
    "gan": "DC-GAN",
    "cgan": "DC-CGAN",
    "shared-per-class": "per-class DC-GAN from a shared start",
    "real": "real data",
}

# compare.png layout, in pixels: margin, gap between panels, title band, width per character of
# the class-name column (names are cut at LABEL_CHARS characters).
MARGIN, GAP, TITLE_H, CHAR_W, LABEL_CHARS = 8, 12, 30, 6, 16
COLUMNS = 10  # samples per class row in every panel (fewer when there are fewer per class)
SHARE_W = 4 * CHAR_W + 8  # beside an unlabelled panel: each row's share of its draws ("98%")
LINE_H = TITLE_H // 2  # a line of a panel's title and score, above it


def write_outputs(
    cdir: CompareDir, doc: dict[str, Any], data: DatasetInfo, log: Callable[[str], None]
) -> None:
    """Rank 0: write `doc` (what `compare` computed) as compare.json, its table as compare.md
    and its sample grids as compare.png into the comparison directory, and print the table."""
    write_json(cdir.json, doc)
    table = markdown(doc)
    atomic_write_bytes(cdir.table, table.encode())
    save_figure(cdir.figure, doc, doc["scoring"]["network"], data)
    log(table)
    log(f"wrote {cdir.table}, {cdir.json} and {cdir.figure}")


def _num(x: float | None, fmt: str, none: str = "-") -> str:
    return none if x is None else format(x, fmt)


def _cell(r: dict[str, Any], metric: str, fmt: str, none: str = "-") -> str:
    """A metric's cell: over several seeds its mean and 95% interval; with one seed the value
    (the Inception Score with its spread over splits)."""
    st = r.get("stats", {}).get(metric)
    if st and st["lo"] is not None:
        return f"{st['mean']:{fmt}} [{st['lo']:{fmt}}, {st['hi']:{fmt}}]"
    if st is None and len(r.get("seeds", ())) > 1:  # not every seed has the metric: one
        return none  # seed's value would read as their mean
    if metric == "is_mean":
        return f"{r['is_mean']:{fmt}} ± {r['is_std']:{fmt}}"
    return _num(r.get(metric), fmt, none)


def _mean(r: dict[str, Any], key: str) -> str:
    """A cost's cell: its mean over the seeds (no interval), "-" where older rows lack it."""
    st = r.get("stats", {}).get(key)
    value = st["mean"] if st else r.get(key)
    return "-" if value is None else f"{value:,.0f}"


def steps_cell(r: dict[str, Any]) -> str:
    """The steps of each pair: the budget's, or under a time budget those reached (their mean,
    and range over the pairs; "of" the cap); a shared phase's first ("450 shared + 450 a class
    (10 pairs)")."""
    shared = r.get("shared_steps")
    pairs = (
        f" {'a class' if shared else 'per class'} ({r['pairs']} pairs)" if r["pairs"] > 1 else ""
    )
    first = ""
    if shared:
        reached = r.get("shared_steps_reached", shared)
        first = f"{reached:,} of {shared:,}" if r.get("shared_s") else f"{shared:,}"
        first += " shared + "
    if not r.get("pair_s"):
        return f"{first}{r['steps']:,}{pairs}"
    lo, hi = r["steps_reached_range"]
    spread = f" ({lo:,}-{hi:,})" if lo != hi else ""
    return f"{first}{r['steps_reached']:,.0f}{spread} of {r['steps']:,}{pairs}"


# The score cells of a row: metric, format, and what a row without it shows.
NO_CLASS = "n/a (no labels)"
CELLS = (("is_mean", ".3f", "-"), ("fid", ".2f", "-"), ("fid_class_mean", ".2f", NO_CLASS),
         ("precision", ".3f", "-"), ("recall", ".3f", "-"))  # fmt: skip


def markdown(doc: dict[str, Any]) -> str:
    """compare.md: the table (one row per variant, and the real images first), the ordering of
    the variants by each metric when there are several seeds, then how to read it."""
    seeds = doc.get("seeds", [0])
    many = len(seeds) > 1
    is_head = "IS mean [95% interval]" if many else "IS mean ± std"
    unit = next((r.get("device_unit") for r in doc["variants"].values()), None) or "core"
    head = (
        f"| variant | {is_head} | FID | FID a class (mean) | precision | recall | class accuracy | "
        f"label TV | steps | images seen | train s | {unit} s | batch | "
        "epochs per image |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    lines = [head]
    if doc["real"]:
        r = doc["real"]
        cells = " | ".join(_cell(r, m, f, none) for m, f, none in CELLS)
        lines.append(
            f"| {NAMES['real']} | {cells} | {_num(r['class_accuracy'], '.3f')} | "
            f"{_num(r.get('label_tv'), '.3f')} | - | - | - | - | - | - |"
        )
    for name, r in doc["variants"].items():
        cells = " | ".join(_cell(r, m, f, none) for m, f, none in CELLS)
        acc = _cell(r, "class_accuracy", ".3f", NO_CLASS)
        acc += f" | {_cell(r, 'label_tv', '.3f')}"  # "-" for rows scored before 2026-11-28
        # Seconds: the mean over the seeds, no interval (they measure the machine's load, not
        # the method; on shared cores one seed's training took 2x another's).
        train, device = (_mean(r, key) for key in ("train_s", "device_s"))
        lines.append(
            f"| {NAMES[name]} | {cells} | {acc} | {steps_cell(r)} | {_mean(r, 'images_seen')} | "
            f"{train} | {device} | {r['batch']} | {r['epochs_per_image']:.2f} |"
        )
    if many:
        lines += ["", *ordering_lines(doc)]
    return "\n".join(["# distcgan compare", "", *lines, "", *(f"- {n}" for n in notes(doc))]) + "\n"


def training_words(training: dict[str, Any]) -> str:
    """compare.json's `training` in words, for compare.md and benchmarks/paired_compare.py:
    "the preset `digits`, with augment color,cutout" or "the preset `digits`, as it is"."""
    given = ", ".join(f"{k} {v}" for k, v in training["options"].items())
    return f"the preset `{training['preset']}`, " + (f"with {given}" if given else "as it is")


def _training_line(training: dict[str, Any] | None) -> list[str]:
    """The preset and the options over it every variant trained with (none in compare.json
    files written before 2026-11-27)."""
    return [] if training is None else [f"Training: {training_words(training)}."]


def _precision_line(doc: dict[str, Any]) -> list[str]:
    """The precision (--amp) the runs trained in, from their rows (which say since 2026-11-28):
    one line, which names each variant's where they differ, and says how many runs say where
    not all do."""
    rows = [(v, row) for seed in doc["runs"].values() for v, row in seed.items()]
    found: dict[str, set[str]] = {}
    for v, row in rows:
        if row.get("amp"):
            found.setdefault(v, set()).add(row["amp"])
    every = set().union(*found.values()) if found else set()
    if not every:
        return []
    known = sum(1 for _, row in rows if row.get("amp"))
    where = "every run" if known == len(rows) else f"the {known} of {len(rows)} runs that say"
    if len(every) == 1:
        return [f"Precision (--amp): {every.pop()} in {where}."]
    each = "; ".join(f"{v} {' and '.join(sorted(a))}" for v, a in found.items())
    return [f"Precision (--amp), not the same in {where}: {each}."]


def notes(doc: dict[str, Any]) -> list[str]:
    """compare.md's notes under the table: the seeds, the data, the budget, how it is scored."""
    seeds = doc.get("seeds", [0])
    s = doc["scoring"]
    clf = s["classifier"]
    net = f"`{Path(s['network']).name}`"
    if clf and clf.get("held_out_accuracy") is not None:
        net += f" (held-out accuracy {clf['held_out_accuracy']:.3f})"
    names = ", ".join(doc["class_names"])
    lines = [
        f"Data: `{doc['data']}`, {len(doc['classes'])} classes ({names}), {doc['images']:,} "
        f"images; {doc['ranks']} rank(s); this launch took {doc['wall_s']:.0f} s.",
        f"Budget: {doc['budget']['rule']}.",
        *_training_line(doc.get("training")),
        *_precision_line(doc),
        f"Scores: {s['n']:,} samples per variant ({s['per_class']:,} per class), IS over "
        f"{s['splits']} splits (seed {s['seed']}), network {net}. FID: all samples against the "
        "real images of these classes, pooled; FID a class (mean): each class's samples against "
        "its own real images, averaged over the classes (the measure of the scores during "
        "training, and the stricter one: a G that mixes up classes is not rewarded). Class "
        "accuracy: the fraction of class-k samples the network assigns to class k; the "
        "DC-GAN's samples have no class (n/a). Label TV: how far the classes the network "
        "assigns all the samples, whatever class they were drawn as, are from the real images' "
        "classes: the total variation between the two distributions (0: spread as the data "
        "is; a G collapsed onto one of K equal classes: 1 - 1/K; compare.json has each "
        "variant's label_shares).",
        "steps: each pair's (under a time budget, those reached: the mean over the pairs and "
        "their range, of the cap), after a shared phase's where there is one; images seen: "
        "real images drawn, all pairs (and the shared phase) together; train s: training "
        "seconds of the slowest rank (steps only, all launches of the run, the shared phase "
        "included); core s or gpu s: every pair's training seconds times the threads (CPU) or "
        "the GPUs of the ranks that trained it, launch by launch.",
        "Precision and recall: improved precision and recall (Kynkäänniemi et al. 2019, k=3 "
        "nearest neighbours in the network's features): the fraction of samples inside the real "
        "images' manifold (quality), and of real images inside the samples' (coverage).",
    ]
    if len(seeds) > 1:
        lines.insert(
            0,
            f"Run seeds {', '.join(map(str, seeds))}: each cell is the mean over the "
            f"{len(seeds)} seeds and its 95% interval (Student t); compare.json has every "
            f"seed's row; compare.png shows seed {doc['figure_seed']}'s samples.",
        )
    if doc["real"]:
        lines.append(
            f"Real data: the {doc['real']['n']:,} real images scored as if they were samples, "
            "the ceiling of IS and accuracy (FID against themselves is 0 by construction; a "
            "classifier trained on this data has seen most of them)."
        )
    return lines


def ordering_lines(doc: dict[str, Any]) -> list[str]:
    """One line per metric: the variants best first; ">" where the 95% intervals do not
    overlap, "≈" where they do (the seeds cannot tell those two apart)."""
    labels = {"is_mean": "IS", "fid": "FID", "fid_class_mean": "FID a class (mean)"}
    labels |= {"precision": "precision", "recall": "recall"}
    labels |= {"class_accuracy": "class accuracy", "label_tv": "label TV"}
    out = [
        "Ordering over the seeds (best first; > : the 95% intervals do not overlap, ≈ : they do):"
    ]
    for metric, label in labels.items():
        ranked = ordering(doc["variants"], metric)
        if len(ranked) < 2:
            continue
        text = f"{NAMES[ranked[0][0]]} {ranked[0][1]['mean']:.3f}"
        for (_, a), (name, b) in zip(ranked, ranked[1:]):
            text += f" {'>' if separated(a, b) else '≈'} {NAMES[name]} {b['mean']:.3f}"
        better = "higher" if METRICS[metric] else "lower"
        out.append(f"- {label} ({better} is better): {text}")
    return out


# ---- compare.png ------------------------------------------------------------------------------


def panel_rows(
    samples: str,
    class_ids: Sequence[int],
    cols: int,
    labelled: bool,
    predict: Any,
    shares: dict[str, float] | None = None,
) -> tuple[np.ndarray, list[float] | None]:
    """(K, cols, R, R, C) uint8: row i holds class class_ids[i]'s first samples; and for
    unlabelled samples with a `predict`, the share of all the draws it assigns to each class
    (`shares`, the evaluation's label_shares, where the row has them; else counted here over
    every draw), else None. Unlabelled samples go to the row of the class `predict` assigns
    them (None: the draws in order); a row with too few is filled with the background grey."""
    first = load_class(samples, class_ids[0])
    blank = np.full(first.shape[1:], 96, dtype=np.uint8)
    rows: list[list[np.ndarray]] = [[] for _ in class_ids]
    if labelled or predict is None:
        for i, k in enumerate(class_ids):
            rows[i] = list(load_class(samples, k)[:cols])
        said = None
    else:
        where = {k: i for i, k in enumerate(class_ids)}
        counts, total = [0] * len(class_ids), 0
        for k in class_ids:  # the draws, share by share: the rows fill from the first ones
            if shares is not None and all(len(r) == cols for r in rows):
                break  # the shares are known: no need to classify the rest
            images = load_class(samples, k)
            labels = predict(images)
            total += len(labels)
            for img, label in zip(images, labels):
                row = where.get(int(label))
                if row is not None:
                    counts[row] += 1
                    if len(rows[row]) < cols:
                        rows[row].append(img)
        if shares is not None:
            said = [float(shares.get(str(k), 0.0)) for k in class_ids]
        else:
            said = [n / max(total, 1) for n in counts]
    grid = np.stack([np.stack(r + [blank] * (cols - len(r))) for r in rows])
    return grid, said


def figure_size(
    beside: list[bool], classes: int, cols: int, resolution: int, label_chars: int, lines: int = 1
) -> tuple[int, int]:
    """(width, height) of compare.png: one panel for each of `beside`, those True with a column
    of shares beside them; the panel with the most lines of title and score above it has
    `lines` (up to 2 take the height of 2)."""
    scale = grid_scale(resolution)
    panel_w = (cols * (resolution + 1) + 1) * scale
    panel_h = (classes * (resolution + 1) + 1) * scale
    label_w = 8 + CHAR_W * min(label_chars, LABEL_CHARS)
    n = len(beside)
    width = 2 * MARGIN + label_w + n * panel_w + (n - 1) * GAP + sum(beside) * SHARE_W
    return width, 2 * MARGIN + header_height(lines) + panel_h


def header_height(lines: int) -> int:
    """The band above the panels that holds `lines` lines of a title and score."""
    return max(TITLE_H, LINE_H * lines)


def save_figure(path: Path, doc: dict[str, Any], network: str, data: DatasetInfo) -> None:
    """compare.png: the variants' grids side by side, titled, class names down the left."""
    class_ids = doc["classes"]
    names = [n[:LABEL_CHARS] for n in doc["class_names"]]
    cols = min(doc["scoring"]["per_class"], COLUMNS)
    res, scale = data.resolution, grid_scale(data.resolution)
    predict = _predictor(network, data)
    panels = []
    for name, r in doc["variants"].items():
        grid, shares = panel_rows(
            r["samples"], class_ids, cols, r["labelled"], predict, r.get("label_shares")
        )
        canvas = grid_canvas(grid)
        img = Image.fromarray(canvas[..., 0] if canvas.shape[2] == 1 else canvas)
        img = img.convert("RGB").resize(
            (img.width * scale, img.height * scale), Image.Resampling.NEAREST
        )
        title = NAMES[name] + (
            ""
            if r["labelled"]
            else " (rows: the network's label; beside: its share of the draws)"
            if predict
            else " (no labels)"
        )
        score = [f"IS {r['is_mean']:.2f} ± {r['is_std']:.2f}", f"FID {_num(r['fid'], '.1f')}"]
        if len(doc.get("seeds", [])) > 1:
            score.append(f"seed {doc['figure_seed']}")
        panels.append((img, title, score, shares))
    font = ImageFont.load_default()
    heads = _heads(panels, font)
    most = max(map(len, heads), default=0)
    beside = [p[3] is not None for p in panels]
    width, height = figure_size(beside, len(class_ids), cols, res, max(map(len, names)), most)
    header = header_height(most)
    fig = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(fig)
    label_w = 8 + CHAR_W * min(max(map(len, names)), LABEL_CHARS)
    top = MARGIN + header
    for i, name in enumerate(names):  # one label per class row, centred on the row
        y = top + (1 + i * (res + 1) + res // 2) * scale
        draw.text((MARGIN, y), name, fill="black", font=font, anchor="lm")
    x = MARGIN + label_w
    for (img, _, _, shares), head in zip(panels, heads, strict=True):
        for j, line in enumerate(head):
            draw.text((x, MARGIN + j * LINE_H), line, fill="black", font=font)
        fig.paste(img, (x, top))
        x += img.width + GAP
        for i, share in enumerate(shares or []):  # each row's share of the draws
            y = top + (1 + i * (res + 1) + res // 2) * scale
            said = _share(share)
            draw.text((x - GAP + 4, y), said, fill="black", font=font, anchor="lm")
        x += SHARE_W if shares is not None else 0
    with atomic_path(path) as tmp:
        fig.save(tmp, format="PNG")


def _heads(panels: list[tuple[Any, str, list[str], Any]], font: Any) -> list[list[str]]:
    """Each panel's title and score in lines no wider than the panel and its shares column,
    in `font`: the title broken at words, the score at its units ("IS 1.85 ± 0.02," "FID 3.0")."""
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))

    def length(text: str) -> float:
        return float(measure.textlength(text, font=font))

    heads = []
    for img, title, score, shares in panels:
        room = img.width + (SHARE_W if shares is not None else 0)
        units = [f"{u}," for u in score[:-1]] + score[-1:]
        heads.append(_wrap(title.split(" "), room, length) + _wrap(units, room, length))
    return heads


def _wrap(units: list[str], width: float, length: Callable[[str], float]) -> list[str]:
    """`units` joined by spaces in lines of at most `width` px by `length`, a unit kept whole
    on one line where it fits one ("IS 1.85 ± 0.02,"), else broken at its spaces; a word wider
    than `width` alone on its line."""
    lines: list[str] = []
    for unit in units:
        for word in [unit] if length(unit) <= width else unit.split(" "):
            if lines and length(f"{lines[-1]} {word}") <= width:
                lines[-1] += f" {word}"
            else:
                lines.append(word)
    return lines


def _share(share: float) -> str:
    """A row's share of the draws in at most 4 characters: "98%", "9.8%", ">99%" (not all),
    "<.1%" (not none)."""
    if 0.995 <= share < 1:
        return ">99%"
    if 0 < share < 0.0005:
        return "<.1%"
    return f"{share:.0%}" if share >= 0.0995 else f"{share:.1%}"


def _predictor(network: str, data: DatasetInfo) -> Any:
    """argmax of the scoring network over a batch of uint8 images, when its outputs are the
    data's classes (a distcgan classifier); else None."""
    if network in WEIGHT_FILES:  # 1000 ImageNet classes: no row to put a sample in
        return None
    net = load_network(network, None, "cpu", data.channels, data.resolution)
    if net.num_outputs != data.num_classes:
        return None
    return labeller(net)


def labeller(net: Any) -> Callable[[np.ndarray], np.ndarray]:
    """The network's label (argmax) of each of a batch of uint8 images, 500 at a time: what
    compare.png's rows and benchmarks/paired_compare.py's --shares classify by."""

    def predict(images: np.ndarray) -> np.ndarray:
        if len(images) == 0:
            return np.zeros(0, dtype=np.int64)
        with torch.no_grad():
            return np.concatenate(
                [net(images[i : i + 500])[0].argmax(1).numpy() for i in range(0, len(images), 500)]
            )

    return predict

"""`distcgan report --run RUN` writes RUN/report.html: one file, images inline (base64 PNG), no
external URL, that opens offline in a browser.

It reads the run directory only (config.json, env.json, launches.jsonl, summary.json, each
class's metrics.jsonl and sample grids, any evaluate-*.json) and shows, in this order: the
headline (IS, FID, precision, recall, class accuracy, training time, images/s), one row per
class with its last grid at full size (the grids are written 4x at 16 px; drawn pixelated, never
blurred), its first and middle grid beside it and its scores, then a per-rank timeline of which
class trained when, per-class curves (curves.py: losses on one axis, logit_gap on its own),
the evaluation, and the run's facts. Classes come worst first. Beyond MAX_CLASSES classes it shows
distributions and the FEW worst and best classes instead of every class. A two-phase run's
shared phase (train --shared-steps S, RUN/all/) is no class: the page says what it trained and
cost, and the curves draw it first, each class after it at S + its step. A comparison
directory (compare.json) shows its table and figure. Leaves out: training, scoring, anything
that writes outside report.html.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from distcgan.errors import UserError
from distcgan.report import curves, draw
from distcgan.report.shared import TASK, SharedPhase, shared_phase, two_phase
from distcgan.run.atomic import atomic_write_bytes, refuse_existing
from distcgan.run.comparedir import CompareDir
from distcgan.run.rundir import RunDir, TaskRow, job_speed, read_jsonl

MAX_CLASSES = 50  # more classes: distributions and the FEW worst and best classes
FEW = 20
CURVES = ("loss_d", "loss_g", "logit_gap")

STYLE = """body{font-family:sans-serif;margin:2em;max-width:1400px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px}
img{image-rendering:pixelated}h2{margin-top:1.5em}
#headline{display:flex;flex-wrap:wrap;gap:12px;margin:1em 0}
#headline div{border:1px solid #ccc;border-radius:6px;padding:8px 14px;min-width:110px}
#headline b{display:block;font-size:26px}#headline span{color:#555;font-size:13px}
.classes td{vertical-align:top}.grid{display:block}
.top{overflow:hidden;margin-bottom:4px}
.scores{font-size:13px;white-space:nowrap}"""


def write_report(path: Path, overwrite: bool = False) -> Path:
    """Write `path`/report.html for a run or comparison directory (an existing one only with
    `overwrite`); returns the file's path."""
    out = path / "report.html"
    if CompareDir(path).is_comparison() or RunDir(path).is_run():
        refuse_existing(out, None, overwrite)  # before any figure is drawn
    if CompareDir(path).is_comparison():
        body = _compare(CompareDir(path))
    elif RunDir(path).is_run():
        body = _run(RunDir(path))
    else:
        if (path / "config.json").is_file():
            RunDir(path).read_config()  # an export's: says what it is and what reads it
        raise UserError(
            f"{path} is neither a run directory (no config.json) nor a comparison directory "
            "(no compare.json): pass the --run or --out folder of train or compare"
        )
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>distcgan {html.escape(path.name)}"
        f"</title><style>{STYLE}</style></head><body>{body}</body></html>"
    )
    atomic_write_bytes(out, page.encode())
    return out


# ---- pieces ---------------------------------------------------------------------------------


SHOWN_ROWS = 2  # of a grid's 8 rows of samples, in the class table (16 samples of 64)


def _top(img: str, width: int, resolution: int) -> str:
    """The top SHOWN_ROWS rows of a square 8 x 8 grid drawn `width` px wide: the grid in a box
    that shows that much of it (a grid has a 1 px border around every R px sample)."""
    height = round(width * (SHOWN_ROWS * (resolution + 1) + 1) / (8 * (resolution + 1) + 1))
    return f"<div class='top' style='height:{height}px'>{img}</div>"


def _png_width(png: bytes) -> int:
    """A PNG's width in pixels, from its header (IHDR: bytes 16-19, big-endian)."""
    return int.from_bytes(png[16:20], "big")


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(c)))}</td>" for c in columns) + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


# ---- a run ---------------------------------------------------------------------------------------


def _run(run: RunDir) -> str:
    config = json.loads(run.config_file.read_text())
    env = run.read_env() if run.has_env() else {}
    summary = run.read_summary() if run.has_summary() else {"classes": []}
    launches = read_jsonl(run.launches_file)
    metrics = {t.path.name: read_jsonl(t.metrics) for t in run.tasks()}
    shared = _shared(run, config, summary)
    # A two-phase run's shared phase (all/) is no class: said first and drawn before the
    # fine-tunes on one axis of the run's steps, never ranked among the classes.
    before = metrics.pop(TASK, []) if shared else []
    offset = shared.steps if shared else 0
    evaluation = _evaluation(run)
    parts = [f"<h1>distcgan run {html.escape(str(run.path))}</h1>"]
    parts.append(_headline(summary, evaluation))
    if shared:
        parts.append(_shared_section(run, shared, config))
    parts.append(_augmentation(config, metrics))
    many = len(metrics) > MAX_CLASSES
    order = _order(metrics, evaluation)
    shown = order if not many else order[:FEW] + order[-FEW:]
    if many:
        parts.append(f"<h2>Distributions over {len(metrics)} classes</h2>")
        parts.append(_distributions(metrics, evaluation))
        parts.append(
            f"<p>Below: the {FEW} worst and the {FEW} best classes ({_ranked_by(evaluation)}).</p>"
        )
    parts.append(f"<h2>Classes, worst first ({_ranked_by(evaluation)})</h2>")
    parts.append(_grids(run, shown, evaluation, int(config.get("resolution", 16))))
    parts.append("<h2>Timeline: which class trained when, on which rank</h2>")
    # A task's lines are its group's first rank's: a data-parallel class group, and the shared
    # phase, trained on every rank of the group its summary row names.
    spread = {
        r["task"]: tuple(r["ranks"]) for r in summary["classes"] if len(r.get("ranks") or []) > 1
    }
    if shared:
        spread[TASK] = shared.ranks
    parts.append(_timeline({TASK: before, **metrics} if before else metrics, spread))
    parts.append(curves.heading(offset))
    parts.append(curves.small_multiples({t: metrics[t] for t in shown}, before, offset))
    parts.append(curves.score_curves({t: metrics[t] for t in shown}, before, offset))
    if evaluation:
        parts.append("<h2>Evaluation (worst classes first)</h2>")
        parts.append(_evaluation_section(evaluation, many))
    parts.append(_overview(config, env, summary, launches))
    return "".join(parts)


def _shared(run: RunDir, config: dict, summary: dict) -> SharedPhase | None:
    """The run's shared phase (train --shared-steps), or None."""
    if not two_phase(config):
        return None
    classes = config.get("classes") or run.read_dataset()["class_names"]
    rows = [TaskRow.from_dict(c) for c in summary.get("classes", [])]
    return shared_phase(config, rows, len(classes))


def _shared_section(run: RunDir, shared: SharedPhase, config: dict) -> str:
    """What the shared phase was and cost, and its last grid."""
    n = config.get("freeze_d", 0)
    frozen = f"; D's first {n} block(s) frozen (--freeze-d {n})" if n else ""
    cost = shared.cost()
    parts = [
        f"<h2>Shared phase ({TASK}/)</h2><p>This run had {html.escape(shared.describe())} in "
        f"{TASK}/, then each class fine-tuned from its final weights for "
        f"{config.get('steps')} steps, with fresh Adam{frozen}."
        + (f" The shared phase took {html.escape(cost)}." if cost else "")
        + "</p>"
    ]
    pngs = run.task(TASK).grids()
    if pngs:
        png = pngs[-1].read_bytes()
        width = _png_width(png)
        grid = draw.img(png, f"{TASK} {pngs[-1].stem}", "grid", width)
        parts.append(_top(grid, width, int(config.get("resolution", 16))))
        parts.append(f"<p>The top of its last grid ({html.escape(pngs[-1].stem)}).</p>")
    return "".join(parts)


def _headline(summary: dict, evaluation: dict | None) -> str:
    """The run in a few numbers: its scores (once evaluated) and its training's cost."""
    ev = evaluation or {}
    rows = [TaskRow.from_dict(c) for c in summary.get("classes", []) if c.get("train_s")]
    job = job_speed(rows) if rows else {}
    numbers = [
        ("IS", ev.get("is_mean"), ".3f"),
        ("FID", ev.get("fid"), ".2f"),
        ("precision", ev.get("precision"), ".3f"),
        ("recall", ev.get("recall"), ".3f"),
        ("class accuracy", (ev.get("class_accuracy") or {}).get("overall"), ".3f"),
        ("training s (slowest rank, its classes in turn)", job.get("train_s"), ".0f"),
        ("images/s (all images / those seconds)", job.get("imgs_per_s"), ",.0f"),
    ]
    cells = "".join(
        f"<div><b>{'-' if v is None else format(v, fmt)}</b><span>{html.escape(name)}</span></div>"
        for name, v, fmt in numbers
    )
    note = "" if evaluation else "<p>Not evaluated yet: distcgan evaluate --run RUN.</p>"
    return f"<div id='headline'>{cells}</div>{note}"


def _augmentation(config: dict, metrics: dict[str, list[dict]]) -> str:
    """How D's inputs were augmented (--augment), and p at each class's last log step."""
    policy = config.get("augment", "none")
    if policy == "none":
        return ""
    last = [
        lines[-1]["augment_p"] for lines in metrics.values() if lines and "augment_p" in lines[-1]
    ]
    spread = f"{min(last):.3f} to {max(last):.3f}" if last else "-"
    return (
        f"<p>D's inputs augmented: {html.escape(policy)}, p {html.escape(config['augment_p'])}"
        f" (at the last log step: {spread} over the classes).</p>"
    )


def _overview(config: dict, env: dict, summary: dict, launches: list[dict]) -> str:
    hosts = sorted({c.get("host") for c in summary.get("classes", []) if c.get("host")})
    facts = {
        "ranks": summary.get("ranks"),
        "hosts": ", ".join(hosts) or env.get("hosts"),
        "wall_s (last launch)": summary.get("wall_s"),
        "complete": summary.get("complete"),
        "launches": len(launches),
        "git_commit": env.get("git_commit"),
        "torch": env.get("torch"),
        "python": env.get("python"),
        "mpi": env.get("mpi_library") or env.get("mpi"),
    }
    rows = [{"field": k, "value": v} for k, v in facts.items() if v is not None]
    cfg_rows = [{"field": k, "value": v} for k, v in config.items()]
    return (
        "<h2>The run</h2>"
        + _table(rows, ["field", "value"])
        + "<h3>Launches</h3>"
        + _table(launches, ["time_utc", "ranks", "resume", "git_commit"])
        + "<details><summary>Config</summary>"
        + _table(cfg_rows, ["field", "value"])
        + "</details><details><summary>Environment (last launch)</summary><pre>"
        + html.escape(json.dumps(env, indent=1, default=str))
        + "</pre></details>"
    )


def _segments(lines: list[dict]) -> list[tuple[int, float, float]]:
    """(rank, start, end) of each stretch a class trained: a new stretch where the step goes
    back (a rollback or a resume) or the rank changes. A class's first stretch starts its
    first interval earlier (step x s_per_step); a later one at its first line (not measured
    further back)."""
    out: list[tuple[int, float, float]] = []
    prev: dict | None = None
    for line in lines:
        if "time_unix" not in line or "rank" not in line:
            continue
        if prev is None or line["step"] <= prev["step"] or line["rank"] != prev["rank"]:
            lead = line["step"] * line["s_per_step"] if prev is None else 0.0
            out.append((line["rank"], line["time_unix"] - lead, line["time_unix"]))
        else:
            out[-1] = (out[-1][0], out[-1][1], line["time_unix"])
        prev = line
    return out


def _timeline(
    metrics: dict[str, list[dict]], spread: dict[str, tuple[int, ...]] | None = None
) -> str:
    """A bar per stretch each task trained, on its rank; a task of `spread` on each of its
    ranks there (a data-parallel group's or a two-phase run's shared phase, whose lines are its
    first rank's)."""
    bars = {t: _segments(lines) for t, lines in metrics.items()}
    for task, group in (spread or {}).items():
        bars[task] = [(r, start, end) for _, start, end in bars.get(task, []) for r in group]
    bars = {t: s for t, s in bars.items() if s}
    if not bars:
        return "<p>No timeline: this run's metrics lines carry no rank and time.</p>"
    t0 = min(s[1] for segs in bars.values() for s in segs)
    ranks = sorted({s[0] for segs in bars.values() for s in segs})
    plt = draw.pyplot()
    fig, ax = plt.subplots(figsize=(10, 0.5 + 0.5 * len(ranks)))
    cmap = plt.get_cmap("tab20")
    spans: dict[int, list[tuple[float, float]]] = {r: [] for r in ranks}
    colors: dict[int, list[Any]] = {r: [] for r in ranks}
    for i, (task, segs) in enumerate(sorted(bars.items())):
        for rank, start, end in segs:
            spans[rank].append((start - t0, max(end - start, 1e-3)))
            colors[rank].append(cmap(i % 20))
            if len(bars) <= MAX_CLASSES:
                ax.text(start - t0, rank, task.replace("class_", ""), va="center", fontsize=7)
    for rank in ranks:  # one call per rank: 1,000 classes draw in well under a second
        ax.broken_barh(spans[rank], (rank - 0.4, 0.8), facecolors=colors[rank])
    ax.set_yticks(ranks, [f"rank {r}" for r in ranks])
    ax.set_xlabel("seconds since the first class started")
    return draw.figure(fig)


def _order(metrics: dict[str, list[dict]], evaluation: dict | None) -> list[str]:
    """Tasks worst first: by FID when evaluated per class, else by how far the last logit_gap
    is from 0. With the paper's BatchNorm a healthy D stays near chance (gap near 0); a gap
    that grows is D winning, a G that stopped learning (docs/training.md)."""
    fid = (evaluation or {}).get("per_class_fid") or {}
    if fid:
        return sorted(metrics, key=lambda t: -fid.get(str(_class_id(t)), float("-inf")))
    return sorted(metrics, key=lambda t: -abs(_last(metrics[t], "logit_gap")))


def _ranked_by(evaluation: dict | None) -> str:
    if (evaluation or {}).get("per_class_fid"):
        return "by FID"
    return "by the last logit_gap's distance from 0"


def _class_id(task: str) -> int | None:
    return int(task.split("_")[1]) if task.startswith("class_") else None


def _last(lines: list[dict], key: str) -> float:
    return lines[-1].get(key, float("nan")) if lines else float("nan")


def _grids(run: RunDir, tasks: list[str], evaluation: dict | None, resolution: int) -> str:
    """One row per class: its name and scores, the top SHOWN_ROWS rows of its last grid at
    their own size (4x at 16 px), and of its first and middle grids at half that."""
    scores = {str(r.get("class_id")): r for r in (evaluation or {}).get("classes") or []}
    rows = []
    for task in tasks:
        pngs = run.task(task).grids()
        if not pngs:
            continue
        early = list(dict.fromkeys([pngs[0], pngs[len(pngs) // 2]]))[: len(pngs) - 1]
        png = pngs[-1].read_bytes()
        width = _png_width(png)  # the last grid at its own size, the early ones at half
        last = _top(draw.img(png, f"{task} {pngs[-1].stem}", "grid", width), width, resolution)
        half = width // 2
        first = "".join(
            _top(draw.img(p.read_bytes(), f"{task} {p.stem}", "grid", half), half, resolution)
            for p in early
        )
        steps = ", ".join(str(int(p.stem.split("step")[1])) for p in [*early, pngs[-1]])
        row = scores.get(str(_class_id(task)), {})
        facts = [f"<b>{html.escape(task)}</b>", f"grids at steps {steps}"]
        facts += [
            f"{k} {_fmt(row[k])}"
            for k in ("fid", "accuracy", "precision", "recall")
            if row.get(k) is not None
        ]
        rows.append(
            f"<tr><td class='scores'>{'<br>'.join(facts)}</td><td>{last}</td><td>{first}</td></tr>"
        )
    if not rows:
        return "<p>No sample grids.</p>"
    return (
        "<table class='classes'><tr><th>class</th><th>last grid</th><th>first, middle</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _evaluation(run: RunDir) -> dict | None:
    """The newest evaluate-NETWORK.json (of `distcgan evaluate`, or of a comparison)."""
    files = run.evaluations()
    return json.loads(files[-1].read_text()) if files else None


def _distributions(metrics: dict[str, list[dict]], evaluation: dict | None) -> str:
    values = {k: [_last(lines, k) for lines in metrics.values()] for k in CURVES}
    fid = (evaluation or {}).get("per_class_fid") or {}
    if fid:
        values["FID per class"] = [v for v in fid.values() if v is not None]
    fig, axes = draw.pyplot().subplots(1, len(values), figsize=(3 * len(values), 2.2))
    for ax, (key, vals) in zip(axes, values.items()):
        ax.hist(vals, bins=30)
        ax.set_title(f"last {key}" if key in CURVES else key, fontsize=9)
    fig.tight_layout()
    return draw.figure(fig)


def _evaluation_section(ev: dict, many: bool) -> str:
    overall = {
        "IS": ev.get("is_mean"),
        "FID": ev.get("fid"),
        "class accuracy": (ev.get("class_accuracy") or {}).get("overall"),
        "precision": ev.get("precision"),
        "recall": ev.get("recall"),
        "network": ev.get("network"),
        "n": ev.get("n"),
    }
    rows = [{"field": k, "value": v} for k, v in overall.items() if v is not None]
    classes = sorted(ev.get("classes") or [], key=lambda r: -(r.get("fid") or 0.0))
    if many:
        classes = classes[:FEW] + classes[-FEW:]
    columns = [
        c
        for c in ("class_id", "name", "is_mean", "fid", "accuracy", "precision", "recall", "n")
        if any(c in r for r in classes)
    ]
    return _table(rows, ["field", "value"]) + "<h3>Per class</h3>" + _table(classes, columns)


# ---- a comparison directory ---------------------------------------------------------------


def _compare(cdir: CompareDir) -> str:
    parts = [f"<h1>distcgan comparison {html.escape(str(cdir.path))}</h1>"]
    if cdir.table.is_file():
        parts.append(f"<h2>Table</h2><pre>{html.escape(cdir.table.read_text())}</pre>")
    if cdir.figure.is_file():
        parts.append("<h2>Figure</h2>" + draw.img(cdir.figure.read_bytes(), cdir.figure.name))
    return "".join(parts)

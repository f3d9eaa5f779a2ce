"""Scores during training, D's statistics and seed statistics of the experiment arms' runs.

    python experiments/curves.py probes DIR ...        # one-pair runs: D's statistics, scores
    python experiments/curves.py dstats RUN ...        # per-class runs: D's statistics, curves
    python experiments/curves.py curve METRICS         # one model: a line a scoring step
    python experiments/curves.py table METRICS         # one model: a Markdown table
    python experiments/curves.py pairs RUN/per-class   # per-class: a line a scoring step
    python experiments/curves.py variants [none|aug]   # the three variants at 3x, 5 seeds

DIR is a `compare --variants gan` folder, RUN a `compare --variants per-class` folder, METRICS a
pair's metrics.jsonl (RUN/gan/all/metrics.jsonl, or a file of its scored lines).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _mean(rows: list[dict], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows)


def probes(dirs: list[Path]) -> None:
    """A one-pair run's D statistics over its last third of steps, then its final scores."""
    for out in dirs:
        logged = [m for m in _lines(out / "gan" / "all" / "metrics.jsonl") if "logit_gap" in m]
        steps = max(m["step"] for m in logged)
        last = [m for m in logged if m["step"] > 2 * steps / 3]
        late = [m for m in logged if m["step"] > steps / 3]
        v = json.loads((out / "compare.json").read_text())["variants"]["gan"]
        print(
            f"{out.name} steps {steps} gap {_mean(last, 'logit_gap'):+.4f} "
            f"acc {_mean(last, 'd_acc'):.3f} sign {_mean(last, 'd_real_sign'):+.3f} "
            f"maxgap {max(m['logit_gap'] for m in late):+.4f} | "
            f"FID {v['fid']:.2f} P {v['precision']:.3f} R {v['recall']:.3f} IS {v['is_mean']:.3f}"
            f" train_s {v['train_s']:.0f}"
        )


def _pair(metrics: Path) -> tuple[float, float, float, float]:
    """A pair's D statistics over its steps after 800, and its largest gap after step 300."""
    logged = [m for m in _lines(metrics) if "logit_gap" in m]
    last = [m for m in logged if m["step"] > 800]
    late = [m for m in logged if m["step"] > 300]
    return (
        _mean(last, "logit_gap"),
        _mean(last, "d_acc"),
        _mean(last, "d_real_sign"),
        max(m["logit_gap"] for m in late),
    )


def dstats(runs: list[Path]) -> None:
    """A per-class run's finished pairs: D's statistics, then the mean FID/recall curve."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from learning_curves import curves  # benchmarks/, put on the path above

    for run in runs:
        pairs = [
            _pair(m)
            for m in sorted(run.glob("per-class/class_*/metrics.jsonl"))
            if (m.parent / "result.json").exists()
        ]
        n = len(pairs)
        gaps, accs, signs = ([p[i] for p in pairs] for i in range(3))
        steps = json.loads((run / "per-class" / "config.json").read_text())["steps"]
        curve = " ".join(
            f"{round(f * steps)}:{v['score_fid']:.2f}/{v['score_recall']:.3f}"
            for f, v in curves(run / "per-class").items()
        )
        print(
            f"{run.name} pairs {n} last100 gap mean {sum(gaps) / n:+.4f} max {max(gaps):+.4f}"
            f" acc {sum(accs) / n:.3f} sign mean {sum(signs) / n:+.3f} max {max(signs):+.3f}"
            f" maxgap>300 {max(p[3] for p in pairs):+.4f}"
            f" | mean FID a pair/recall during training {curve}"
        )


def _scored(metrics: Path) -> list[dict]:
    return [json.loads(x) for x in metrics.read_text().splitlines() if '"score_fid"' in x]


def curve(metrics: Path) -> None:
    """One model's scores during training, a line a scoring step."""
    print(
        "# step, score_fid, score_precision, score_recall (10,000 samples pooled) and "
        "d_real_sign, logit_gap at that step"
    )
    for r in _scored(metrics):
        print(
            r["step"],
            round(r["score_fid"], 3),
            round(r["score_precision"], 3),
            round(r["score_recall"], 3),
            round(r["d_real_sign"], 3),
            round(r["logit_gap"], 4),
        )


def table(metrics: Path, classes: int) -> None:
    """One model's scores during training as a Markdown table, by steps a class."""
    print("| steps a class | FID (pooled) | precision | recall | d_real_sign |")
    print("|---|---|---|---|---|")
    for r in _scored(metrics):
        print(
            f"| {r['step'] // classes:,} | {r['score_fid']:.2f} | {r['score_precision']:.3f} | "
            f"{r['score_recall']:.3f} | {r['d_real_sign']:+.3f} |"
        )


def pairs(run: Path) -> None:
    """A per-class run's scores during training over its pairs, a line a scoring step."""
    by_step: dict[int, list[dict]] = {}
    found = sorted(run.glob("class_*/metrics.jsonl"))
    if not found:
        raise ValueError(f"{run} has no class_*/metrics.jsonl (give RUN/per-class)")
    for path in found:
        for row in _scored(path):
            by_step.setdefault(row["step"], []).append(row)
    print(
        "# step, pairs, mean score_fid, score_precision, score_recall, score_accuracy (1,000 "
        "samples a class), mean d_real_sign and largest logit_gap at that step"
    )
    for step, rows in sorted(by_step.items()):
        print(
            step,
            len(rows),
            *(round(_mean(rows, k), 3) for k in ("score_fid", "score_precision", "score_recall")),
            round(_mean(rows, "score_accuracy"), 3),
            round(_mean(rows, "d_real_sign"), 3),
            round(max(r["logit_gap"] for r in rows), 4),
        )


VARIANT_RUNS = {
    "per-class": "2026-11-28-pc32-3x/perclass32x3-{arm}-s{seed}",
    "gan": "2026-11-28-gan32-3x/gan32x3-{arm}-s{seed}",
    "cgan": "2026-11-29-cgan32-3x/cgan32x3-{arm}-s{seed}",
}
METRICS = {"is_mean": "IS", "fid": "FID", "fid_class_mean": "FID a class (mean)",
           "precision": "precision", "recall": "recall", "class_accuracy": "class accuracy",
           "train_s": "train s"}  # fmt: skip


def variants(arm: str, results: Path) -> None:
    """The three variants at 3x, each metric's mean and Student-t 95% interval over 5 seeds."""
    from distcgan.compare.seeds import summarise, with_class_mean

    def row(variant: str, seed: int) -> dict:
        folder = results / VARIANT_RUNS[variant].format(arm=arm, seed=seed)
        doc = json.loads((folder / "compare.json").read_text())
        return with_class_mean(doc["runs"][str(seed)][variant])

    print(f"| 32 px, 27,000 steps ({arm}), 5 seeds | " + " | ".join(METRICS.values()) + " |")
    print("|---" * (len(METRICS) + 1) + "|")
    for variant in VARIANT_RUNS:
        stats = summarise({s: {variant: row(variant, s)} for s in range(5)})[variant]["stats"]
        cells = []
        for m in METRICS:
            st, f = stats[m], ",.0f" if m == "train_s" else ".3f"
            cells.append(
                "n/a" if st is None else f"{st['mean']:{f}} [{st['lo']:{f}}, {st['hi']:{f}}]"
            )
        print(f"| {variant} | " + " | ".join(cells) + " |")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="curves.py", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    sub.add_parser("probes", help=probes.__doc__).add_argument("dirs", type=Path, nargs="+")
    sub.add_parser("dstats", help=dstats.__doc__).add_argument("runs", type=Path, nargs="+")
    sub.add_parser("curve", help=curve.__doc__).add_argument("metrics", type=Path)
    t = sub.add_parser("table", help=table.__doc__)
    t.add_argument("metrics", type=Path)
    t.add_argument("--classes", type=int, default=10, help="steps a class = step / CLASSES")
    sub.add_parser("pairs", help=pairs.__doc__).add_argument("run", type=Path)
    v = sub.add_parser("variants", help=variants.__doc__)
    v.add_argument("arm", nargs="?", default="none", choices=("none", "aug"))
    v.add_argument("--results", type=Path, default=RESULTS, help="the results folders' parent")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    do: dict[str, Callable[[], None]] = {
        "probes": lambda: probes(args.dirs),
        "dstats": lambda: dstats(args.runs),
        "curve": lambda: curve(args.metrics),
        "table": lambda: table(args.metrics, args.classes),
        "pairs": lambda: pairs(args.run),
        "variants": lambda: variants(args.arm, args.results),
    }
    try:
        do[args.what]()
    except OSError as exc:
        print(f"curves.py {args.what}: cannot read {exc.filename} ({exc.strerror}): check the path",
              file=sys.stderr)  # fmt: skip
        return 2
    except (KeyError, ValueError) as exc:
        print(f"curves.py {args.what}: not a run's output ({exc}): check the path", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

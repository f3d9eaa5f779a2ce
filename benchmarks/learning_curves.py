"""Learning curves of a comparison's variants, from the scores taken during training.

    python benchmarks/learning_curves.py COMPARE_DIR [--points 10] [--png curves.png]

COMPARE_DIR is a `distcgan compare --score-every N` directory (or one of its seed-S folders).
Each variant's pairs wrote score_fid, score_precision, score_recall (and score_accuracy) in their
metrics lines every N steps. The x axis is the fraction of the variant's budget trained: per-class
at step s of its S steps has drawn as many real images, all pairs together, as gan and cgan at
step s x K of their K x S, so the variants are compared at equal images seen; shared-per-class
draws its shared phase's pair (all/) over that phase's share of the images, then its classes. At
each of
--points fractions it prints the mean over a variant's pairs of each score (a gan pair's are
against every class pooled: its FID is not per class, and it has no class accuracy), then one
JSON line; with --png, the curves.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

KEYS = ("score_fid", "score_precision", "score_recall", "score_accuracy")


def curves(run: Path) -> dict[float, dict[str, float]]:
    """Fraction of the run's images -> the mean of each score over its pairs at that point. A
    run with a shared phase (the shared-per-class variant) draws its all/ pair's scores first,
    over the shared phase's share of the images, then its classes' after it."""
    config = json.loads((run / "config.json").read_text())
    steps, shared = config["steps"], config.get("shared_steps", 0)
    classes = len([p for p in run.glob("class_*") if p.is_dir()])
    # Every pair of a compare variant trains at the same batch: images are steps times it.
    if not shared:
        return _curve(_scores(run, "*"), steps, 0.0, 1.0)
    first = shared / (shared + classes * steps)  # the shared phase's share of the images
    return {
        **_curve(_scores(run, "all"), shared, 0.0, first),
        **_curve(_scores(run, "class_*"), steps, first, 1.0 - first),
    }


def _curve(
    by_step: dict[int, list[dict]], steps: int, offset: float, share: float
) -> dict[float, dict[str, float]]:
    """Fraction -> the mean scores of the pairs at each step every pair reached, step s of
    `steps` at offset + share x s / steps."""
    pairs = max((len(v) for v in by_step.values()), default=0)
    out = {}
    for step, rows in sorted(by_step.items()):
        if len(rows) < pairs:  # a step not every pair has reached (a time budget)
            continue
        out[offset + share * step / steps] = {
            k: sum(r[k] for r in rows) / len(rows) for k in KEYS if all(k in r for r in rows)
        }
    return out


def _scores(run: Path, tasks: str) -> dict[int, list[dict]]:
    """Step -> the score lines of the run's pairs in folders matching `tasks` at that step;
    a run without a shared phase: every pair's (gan's and cgan's all/ too)."""
    by_step: dict[int, list[dict]] = {}
    for metrics in sorted(run.glob(f"{tasks}/metrics.jsonl")):
        for line in metrics.read_text().splitlines():
            row = json.loads(line)
            if "score_fid" in row:
                by_step.setdefault(row["step"], []).append(row)
    return by_step


def at(curve: dict[float, dict[str, float]], fraction: float) -> dict[str, float]:
    """The scores at the first fraction at or past `fraction`."""
    for f in sorted(curve):
        if f >= fraction - 1e-9:
            return curve[f]
    return {}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("compare_dir", type=Path)
    p.add_argument("--points", type=int, default=10)
    p.add_argument("--png", type=Path)
    args = p.parse_args()
    variants = {
        v: curves(args.compare_dir / v)
        for v in ("per-class", "gan", "cgan", "shared-per-class")
        if (args.compare_dir / v / "config.json").is_file()
    }
    fractions = [(i + 1) / args.points for i in range(args.points)]
    # one decimal where it is exact (10 points: 0.1 ... 1.0), else two (15: 0.07, 0.13, ...)
    decimals = 1 if all(abs(round(f, 1) - f) < 1e-9 for f in fractions) else 2
    print("| fraction of the budget | " + " | ".join(f"{v} FID" for v in variants) + " | "
          + " | ".join(f"{v} recall" for v in variants) + " |")  # fmt: skip
    print("|" + " --- |" * (1 + 2 * len(variants)))
    for f in fractions:
        fids = [at(c, f).get("score_fid") for c in variants.values()]
        recalls = [at(c, f).get("score_recall") for c in variants.values()]
        cells = [("-" if x is None else f"{x:.2f}") for x in fids]
        cells += [("-" if x is None else f"{x:.3f}") for x in recalls]
        print(f"| {f:.{decimals}f} | " + " | ".join(cells) + " |")
    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
        for ax, key in zip(axes, KEYS[:3]):
            for v, c in variants.items():
                xs = [f for f in sorted(c) if key in c[f]]
                ax.plot(xs, [c[f][key] for f in xs], label=v)
            ax.set_title(key.replace("score_", ""))
            ax.set_xlabel("fraction of the budget (equal images seen)")
        axes[0].legend()
        fig.tight_layout()
        fig.savefig(args.png, dpi=100)
    print(json.dumps({v: {str(round(f, 4)): s for f, s in c.items()} for v, c in variants.items()}))


if __name__ == "__main__":
    main()

"""What `distcgan evaluate` computed: the record it writes (EvalResult, evaluate-NETWORK.json, its
fields in this order) and the table it prints (report). Leaves out: computing the metrics
(summary.py) and where the record is written (eval/sampling/source.py's out_json).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from distcgan.env import provenance
from distcgan.eval.metrics.features import pr_record
from distcgan.eval.metrics.stats import Scoring, Stats
from distcgan.eval.metrics.summary import METRICS
from distcgan.mpi.context import format_table


@dataclass
class EvalResult:
    """What `distcgan evaluate` computed and writes (evaluate-NETWORK.json, in this order)."""

    is_mean: float
    is_std: float
    is_splits: list[float]
    fid: float | None
    per_class_fid: dict[str, float | None] | None
    class_accuracy: dict[str, Any] | None
    label_shares: dict[str, float] | None  # of all samples, by the network's label (class id)
    precision: float | None
    recall: float | None
    per_class_precision: dict[str, float | None] | None
    per_class_recall: dict[str, float | None] | None
    pr: dict[str, int]
    labelled: bool
    network: str
    network_file: str
    network_sha256: str
    num_outputs: int
    feature_dim: int
    n: int
    splits: int
    split_sizes: list[int]
    seed: int
    source: str
    samples: str | None
    run: str | None
    data: str | None
    real_stats: str | None
    classes: list[dict[str, Any]]
    ranks: int
    real_stats_s: float
    score_s: float
    eval_s: float
    provenance: dict[str, Any] = dataclasses.field(default_factory=dict)  # env.provenance

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def make_result(s: Scoring, stats: Stats, ranks: int, real_s: float, t0: float) -> EvalResult:
    """Rank 0: the record of the reduced statistics `stats` and their metrics (`summary.METRICS`);
    `real_s` the seconds the real statistics took, `t0` the clock when evaluate started."""
    metrics: dict[str, Any] = {}
    for metric in METRICS.values():
        metrics.update(metric(s, stats))
    src, net, opts = s.src, s.net, s.opts
    return EvalResult(
        is_mean=metrics["is_mean"],
        is_std=metrics["is_std"],
        is_splits=metrics["is_splits"],
        fid=metrics["fid"],
        per_class_fid=metrics["per_class_fid"],
        class_accuracy=metrics["class_accuracy"],
        label_shares=metrics["label_shares"],
        precision=metrics["precision"],
        recall=metrics["recall"],
        per_class_precision=metrics["per_class_precision"],
        per_class_recall=metrics["per_class_recall"],
        pr=pr_record(),
        labelled=src.labelled,
        network=net.name,
        network_file=net.path,
        network_sha256=net.sha256,
        num_outputs=net.num_outputs,
        feature_dim=net.feature_dim,
        n=src.n,
        splits=opts.splits,
        split_sizes=[int(x) for x in np.bincount(s.split_of, minlength=opts.splits)],
        seed=opts.seed,
        source=src.kind,
        samples=src.path if src.kind == "samples" else None,
        run=src.path if src.kind == "run" else None,
        data=src.data,
        real_stats=str(s.stats_path) if s.stats_path else None,
        classes=[{k: v for k, v in r.items() if k != "correct"} for r in stats.rows],
        ranks=ranks,
        real_stats_s=round(real_s, 3),
        score_s=round(stats.score_s, 3),
        eval_s=round(time.perf_counter() - t0, 3),
        provenance=provenance("evaluate", opts),
    )


def report(res: EvalResult, out: Path) -> str:
    """The printed table: one row per class, then the global scores."""
    result = res.to_dict()

    def num(x: float | None, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    rows = [
        {
            "class_id": r["class_id"],
            "name": r["name"],
            "samples": r["n"],
            "accuracy": num(r["accuracy"], ".3f"),
            "fid": num(r["fid"], ".2f"),
            "precision": num(r.get("precision"), ".3f"),
            "recall": num(r.get("recall"), ".3f"),
            "rank": r["rank"],
        }
        for r in result["classes"]
    ]
    acc = result["class_accuracy"]
    lines = [
        format_table(
            rows,
            ["class_id", "name", "samples", "accuracy", "fid", "precision", "recall", "rank"],
        ),
        f"network {result['network']} ({result['num_outputs']} outputs, "
        f"{result['feature_dim']} features), {result['n']} samples on {result['ranks']} rank(s)",
        f"Inception Score {result['is_mean']:.4f} +- {result['is_std']:.4f} over "
        f"{result['splits']} splits (seeded random permutation, seed {result['seed']})",
        f"FID {num(result['fid'], '.3f')}"
        + (f" against {result['data']}" if result["data"] else " (no --data: no FID)"),
        f"precision {num(result['precision'], '.4f')}, recall {num(result['recall'], '.4f')} "
        f"(k={result['pr']['k']} nearest neighbours in the network's features"
        + ("" if result["data"] else "; no --data: none")
        + ")",
        "class accuracy "
        + (
            f"{acc['overall']:.4f}"
            if acc
            else "- (unlabelled samples of an unconditional G: no class to check)"
            if not result["labelled"]
            else f"- (the network's {result['num_outputs']} outputs are not the data's classes)"
        ),
        *_shares_line(result),
        f"wrote {out} ({result['eval_s']:.1f} s)",
    ]
    return "\n".join(lines)


def _shares_line(result: dict[str, Any]) -> list[str]:
    """The classes the network says the samples are: the most drawn first, and the least (or
    those never drawn); by class id (none without shares)."""
    shares = result.get("label_shares")
    if not shares:
        return []
    order = sorted(shares, key=lambda k: -shares[k])
    never = [k for k in order if shares[k] == 0]
    most = ", ".join(f"{k} {shares[k]:.1%}" for k in order[:3])
    if never:
        listed = ", ".join(never[:10]) + (", ..." if len(never) > 10 else "")
        least = f"never drawn: {len(never)} class(es) ({listed})"
    else:
        least = f"least {order[-1]} {shares[order[-1]]:.1%}"
    return [f"the network's labels of the samples (class ids), most drawn first: {most}; {least}"]

"""A comparison over several run seeds: each variant's rows per seed, summarised as a mean and a
95% confidence interval per metric, and the variants ordered by each metric.

The interval is Student's t over the seeds: mean +- t(0.975, n - 1) x s / sqrt(n), s the sample
standard deviation of the n per-seed values. It is the uncertainty of training (and sampling) with
another seed, which is what "per-class beats DC-CGAN" must survive; the spread of IS over its splits
(`is_std`) is a much smaller, different thing. With one seed there is no interval.
Leaves out: training and scoring (experiment.py), rendering (report.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from scipy import stats

# The metrics summarised over seeds, and whether higher is better (costs last: lower).
METRICS = {
    "is_mean": True,
    "fid": False,
    "fid_class_mean": False,
    "precision": True,
    "recall": True,
    "class_accuracy": True,
    "label_tv": False,
    "train_s": False,
    "device_s": False,
    "images_seen": False,
    "steps_reached": False,
}


def class_mean(per_class: dict[str, float | None] | None) -> float | None:
    """The mean over the classes of a per-class score (compare.json's `per_class_fid`: each
    class's samples against its own real images, the measure of the scores during training);
    None where there are no classes (a DC-GAN's samples) or a class has no score."""
    values = [v for v in (per_class or {}).values() if v is not None]
    if not per_class or len(values) < len(per_class):
        return None
    return sum(values) / len(values)


def label_tv(shares: dict[str, float] | None, counts: Mapping[Any, int] | None) -> float | None:
    """How far the classes the network assigns the samples (`label_shares`, by class id) are
    from the real images' (`counts`: the compared classes' image counts, by class id, an int or
    its string, as the shares' keys are): the total
    variation 1/2 sum_k |share_k - real_k| over every class either has. 0 when the samples
    spread over the classes as the data does, 1 when none is called a compared class; a G
    collapsed onto one of K equal classes, 1 - 1/K. None without shares or counts."""
    total = sum(counts.values()) if counts else 0
    if not shares or not counts or not total:
        return None
    real = {str(k): n / total for k, n in counts.items()}
    keys = sorted(set(shares) | set(real))  # sorted: a set's order changes with PYTHONHASHSEED
    return 0.5 * sum(abs(shares.get(k, 0.0) - real.get(k, 0.0)) for k in keys)


def with_class_mean(row: dict[str, Any], counts: Mapping[Any, int] | None = None) -> dict[str, Any]:
    """A stored row with `fid_class_mean`, from its `per_class_fid` where the row was scored
    before the column existed (2026-11-27), and with `counts` (the real images of each compared
    class) its `label_tv` from its `label_shares` where it has them and not it, so that a
    resumed comparison shows them too."""
    if "fid_class_mean" not in row:
        row = {**row, "fid_class_mean": class_mean(row.get("per_class_fid"))}
    if row.get("label_tv") is None and row.get("label_shares") and counts:
        row = {**row, "label_tv": label_tv(row["label_shares"], counts)}
    return row


def interval(values: Sequence[float | None]) -> dict[str, Any] | None:
    """{"mean", "lo", "hi", "n", "values"} over the seeds' values (None: the metric does not
    apply, e.g. a DC-GAN's class accuracy); lo = hi = None with one value."""
    numbers = [v for v in values if v is not None]
    if not values or len(numbers) < len(values):
        return None
    n = len(numbers)
    mean = sum(numbers) / n
    lo = hi = None
    if n > 1:
        s = math.sqrt(sum((v - mean) ** 2 for v in numbers) / (n - 1))
        half = float(stats.t.ppf(0.975, n - 1)) * s / math.sqrt(n)
        lo, hi = mean - half, mean + half
    return {"mean": mean, "lo": lo, "hi": hi, "n": n, "values": numbers}


def paired(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """The paired difference b - a over seeds (a[i] and b[i] from the same run seed):
    {"mean", "half", "n"}, "half" the Student-t 95% half-width of `interval` over the
    differences (None with one seed). Pairing removes what a seed does to both arms, which the
    two arms' own intervals (`separated`) keep."""
    st = interval([y - x for x, y in zip(a, b, strict=True)])
    if st is None:
        raise ValueError("paired: no seeds")
    half = None if st["hi"] is None else st["hi"] - st["mean"]
    return {"mean": st["mean"], "half": half, "n": st["n"]}


def verdict(d: dict[str, Any], higher_is_better: bool, words: tuple[str, str]) -> str:
    """words[0] where the paired difference's interval excludes 0 on the better side, words[1]
    on the worse side, "cannot tell" where it holds 0 (or there is one seed)."""
    if d["half"] is None or abs(d["mean"]) <= d["half"]:
        return "cannot tell"
    return words[0] if (d["mean"] > 0) == higher_is_better else words[1]


def summarise(runs: dict[int, dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per variant: the first seed's row (its samples make the figure) with "stats", the interval
    of each metric over every seed, and "seeds", the seeds it covers."""
    seeds = list(runs)
    out = {}
    for name in runs[seeds[0]]:
        rows = [runs[s][name] for s in seeds]
        stats = {m: interval([r.get(m) for r in rows]) for m in METRICS}
        out[name] = {**rows[0], "seeds": seeds, "stats": stats}
    return out


def ordering(variants: dict[str, dict[str, Any]], metric: str) -> list[tuple[str, dict[str, Any]]]:
    """The variants with the metric, best mean first."""
    have = [(n, v["stats"][metric]) for n, v in variants.items() if v["stats"].get(metric)]
    return sorted(have, key=lambda x: x[1]["mean"], reverse=METRICS[metric])


def separated(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two intervals do not overlap (False without intervals: one seed)."""
    if a["lo"] is None or b["lo"] is None:
        return False
    return a["lo"] > b["hi"] or b["lo"] > a["hi"]

"""The paper's one-way ANOVA of a data file: do its classes differ in their images' mean colour?

Per colour channel, each image is reduced to its mean over H x W; grouped by class, the one-way
ANOVA compares between-class with within-class variability:
F = (SSB / (K - 1)) / (SSW / (N - K)) and p = P(F(K - 1, N - K) > F), as `scipy.stats.f_oneway`.
It reads one class at a time, keeping the class's count, mean and sum of squared deviations from
its own mean (float64; deviations taken within the class, so no large sums cancel), and combines
them in class order at the end: memory is one class, whatever the file's size. Under MPI the
classes are spread over the ranks and the result does not depend on their number. Empty classes
are left out (f_oneway takes non-empty groups). `anova_command` is `distcgan anova`: the table,
one JSON line, and --json.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from distcgan.data import load_class, read_info
from distcgan.errors import UserError
from distcgan.mpi.comm import Comm
from distcgan.mpi.context import agree, format_table
from distcgan.options import AnovaOptions
from distcgan.run.atomic import atomic_write_json, check_out_file


@dataclass(frozen=True)
class ClassMoments:
    """One class's per-channel statistics of its images' channel means."""

    n: int
    mean: np.ndarray  # (C,) float64
    ss: np.ndarray  # (C,) sum of squared deviations from `mean`


def class_moments(images: np.ndarray) -> ClassMoments:
    """Moments of uint8 (n, H, W, C) images' per-image channel means."""
    x = images.mean(axis=(1, 2), dtype=np.float64)  # (n, C)
    mean = x.mean(axis=0)
    return ClassMoments(int(x.shape[0]), mean, ((x - mean) ** 2).sum(axis=0))


def one_way(moments: list[ClassMoments], where: str = "the data") -> list[dict[str, float | None]]:
    """Per channel: F, p, log10 p (finite when p underflows, down to about 1e-308; null
    below), degrees of freedom, SSB, SSW."""
    groups = [m for m in moments if m.n > 0]
    k, n = len(groups), sum(m.n for m in groups)
    if k < 2:
        raise UserError(f"ANOVA of {where} needs at least two non-empty classes, found {k}")
    if n <= k:
        raise UserError(f"ANOVA of {where} needs a class with more than one image")
    counts = np.array([m.n for m in groups], dtype=np.float64)[:, None]
    means = np.stack([m.mean for m in groups])  # (K, C)
    grand = (counts * means).sum(axis=0) / n
    ss_between = (counts * (means - grand) ** 2).sum(axis=0)
    ss_within = np.stack([m.ss for m in groups]).sum(axis=0)
    df_b, df_w = k - 1, n - k
    rows = []
    for c in range(means.shape[1]):
        with np.errstate(divide="ignore", invalid="ignore"):
            f = float((ss_between[c] / df_b) / (ss_within[c] / df_w))
        p = float(stats.f.sf(f, df_b, df_w)) if not math.isnan(f) else math.nan
        log_p = float(stats.f.logsf(f, df_b, df_w)) / math.log(10) if math.isfinite(f) else None
        if log_p is not None and not math.isfinite(log_p):
            # scipy's logsf is -inf below about 1e-308 (F 586 on 9 and 1787 degrees of freedom,
            # pixels of a damaged file read as zeros): JSON has no -inf, so null
            log_p = None
        rows.append(
            {
                # JSON has no inf or nan: no within-class variance at all gives F = null.
                "F": f if math.isfinite(f) else None,
                "p": p if math.isfinite(f) else None,
                "log10_p": log_p,
                "df_between": df_b,
                "df_within": df_w,
                "ss_between": float(ss_between[c]),
                "ss_within": float(ss_within[c]),
                "grand_mean": float(grand[c]),
            }
        )
    return rows


def anova_file(comm: Comm, path: str) -> dict[str, Any]:
    """Collective: the ANOVA of a data file, classes spread over the ranks (k mod size).

    Every rank returns the same result; a bad file raises the same AgreedError on every rank.
    """
    info = agree(comm, lambda: read_info(path), root=0)
    mine = [k for k, c in enumerate(info.counts) if c and k % comm.size == comm.rank]
    local = agree(comm, lambda: [(k, class_moments(load_class(path, k))) for k in mine])
    parts = comm.gather(local, root=0)

    def combine() -> dict[str, Any]:
        assert parts is not None  # combine runs on rank 0, where the parts were gathered
        moments = dict(kv for part in parts for kv in part)
        rows = one_way([moments[k] for k in sorted(moments)], where=path)
        names = ["gray"] if info.channels == 1 else ["R", "G", "B"]
        return {
            "file": path,
            "images": sum(m.n for m in moments.values()),
            "classes": len(moments),
            "statistic": "one-way ANOVA of per-image channel means, grouped by class",
            "channels": [{"channel": name, **row} for name, row in zip(names, rows)],
        }

    return agree(comm, combine, root=0)


def anova_command(comm: Comm, opts: AnovaOptions) -> None:
    """Collective: `distcgan anova`: the ANOVA of opts.file as a table and one JSON line on rank
    0, and written to --json if given."""

    def check_json() -> None:
        # Rank 0 writes the file, so its file system decides (another node's may differ).
        if opts.json:
            check_out_file(opts.json, "--json", "anova.json", overwrite=opts.overwrite)

    agree(comm, check_json, root=0)
    result = anova_file(comm, opts.file)
    if path := opts.json:
        agree(comm, lambda: atomic_write_json(path, result), root=0)
    if comm.rank == 0:
        print(
            f"{result['file']}: one-way ANOVA of per-image channel means over "
            f"{result['classes']} classes, {result['images']} images"
        )
        rows = [
            {
                **r,
                "F": "undefined (no within-class variance)" if r["F"] is None else f"{r['F']:.6g}",
                "p": "" if r["p"] is None else f"{r['p']:.3g}",
                "log10_p": "" if r["log10_p"] is None else f"{r['log10_p']:.1f}",
            }
            for r in result["channels"]
        ]
        print(format_table(rows, ["channel", "F", "p", "log10_p", "df_between", "df_within"]))
        print(json.dumps(result, allow_nan=False))

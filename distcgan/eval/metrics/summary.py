"""The metrics of `evaluate`, each a short function of the statistics reduced over ranks
(stats.Stats) and of what the ranks agreed on (stats.Scoring): the Inception Score, FID overall
and per class, class accuracy, precision and recall, and the network's label shares.

Unlabelled samples (a gan run, or its sample file) get the Inception Score and the FID against
every scored class's real images; class accuracy and per-class FID need labels and are none.
When the network's outputs are the data's classes (a distcgan classifier), the share of all the
samples it assigns to each class is kept too (`label_shares`): for an unconditional G, which
classes it draws, and how far it has collapsed onto a few.
Leaves out: the statistics (stats.py) and the record that is written (result.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from distcgan.eval.metrics.features import fid_against, pr_against
from distcgan.eval.metrics.realstats import read_real
from distcgan.eval.metrics.scores import inception_score
from distcgan.eval.metrics.stats import Scoring, Stats


def metric_is(s: Scoring, st: Stats) -> dict[str, Any]:
    """The Inception Score over the splits: their mean, standard deviation and each split's."""
    is_mean, is_std, is_splits = inception_score(st.is_sums)
    return {"is_mean": is_mean, "is_std": is_std, "is_splits": is_splits}


def metric_fid(s: Scoring, st: Stats) -> dict[str, Any]:
    """FID over every scored class against their real images, and each class's own."""
    fid = None
    if s.stats_path and st.fake.n >= 2:
        fid = fid_against(st.fake, read_real(s.stats_path, s.class_ids))
    per_class = None
    if s.stats_path and s.src.labelled:
        per_class = {str(r["class_id"]): r["fid"] for r in st.rows}
    return {"fid": fid, "per_class_fid": per_class}


def metric_accuracy(s: Scoring, st: Stats) -> dict[str, Any]:
    """The fraction of class-k samples the network assigns to class k, overall and per class."""
    if not s.accuracy_possible:
        return {"class_accuracy": None}
    return {
        "class_accuracy": {
            "overall": sum(r["correct"] for r in st.rows) / s.src.n,
            "per_class": {str(r["class_id"]): r["accuracy"] for r in st.rows},
        }
    }


def metric_pr(s: Scoring, st: Stats) -> dict[str, Any]:
    """Improved precision and recall (k-NN manifolds), overall and per class."""
    precision = recall = None
    if s.src.data:
        real, fake = np.concatenate(st.pr_real), np.concatenate(st.pr_fake)
        precision, recall = pr_against(torch.from_numpy(real), torch.from_numpy(fake), s.net.device)
    labelled = s.src.data and s.src.labelled
    return {
        "precision": precision,
        "recall": recall,
        "per_class_precision": (
            {str(r["class_id"]): r["precision"] for r in st.rows} if labelled else None
        ),
        "per_class_recall": {str(r["class_id"]): r["recall"] for r in st.rows}
        if labelled
        else None,
    }


def metric_shares(s: Scoring, st: Stats) -> dict[str, Any]:
    """The share of all the samples that the network assigns to each class (its outputs are
    the data's classes; else None), by class id: what an unconditional G draws."""
    if not s.outputs_are_classes:
        return {"label_shares": None}
    counts = st.labels
    return {"label_shares": {str(k): float(c / counts.sum()) for k, c in enumerate(counts)}}


METRICS = {
    "is": metric_is,
    "fid": metric_fid,
    "accuracy": metric_accuracy,
    "pr": metric_pr,
    "shares": metric_shares,
}

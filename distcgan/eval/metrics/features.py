"""One class's images through the scoring network, and one set of features scored against
another: what `evaluate` does for each class on its rank (stats.class_stats) and what scoring
during training does for each pair (eval/sampling/during.py).

score_class adds a class's samples to the Inception Score's per-split sums and gives their FID
feature sums, the network's labels and the features themselves; real_features gives the
features of at most PR_REAL_PER_CLASS of a class's real images (a seeded subset), which
precision and recall need (vectors, not sums); fid_against and pr_against score fake features
against the real side. Leaves out: the sums and distances themselves (scores.py,
precision_recall.py), moving anything between ranks (stats.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from distcgan.data import load_class
from distcgan.eval.metrics.networks import Network
from distcgan.eval.metrics.precision_recall import K as PR_K
from distcgan.eval.metrics.precision_recall import precision_recall, proportional_take
from distcgan.eval.metrics.realstats import DeviceSums, RealStats, batches
from distcgan.eval.metrics.scores import FeatureSums, ISSums, frechet_from_sqrt
from distcgan.plan import class_seed

PR_MAX = 10_000  # fake (and real) feature rows of the overall precision/recall, about
PR_REAL_PER_CLASS = 1_000  # real images of a class whose features precision/recall use, at most


def score_class(
    net: Network,
    images: np.ndarray,
    split_of: np.ndarray,
    is_sums: ISSums,
    batch_size: int,
    bar: Any = None,
) -> tuple[FeatureSums, np.ndarray, torch.Tensor]:
    """Add one class's samples to `is_sums`; return their feature sums, predicted labels and
    features (on the network's device, for precision/recall)."""
    sums = DeviceSums(net.feature_dim, net.device)
    predicted, feats = [], []
    for lo, batch in zip(range(0, len(images), batch_size), batches(images, batch_size)):
        logits, features = net(batch)
        probs = torch.softmax(logits.double(), dim=1)
        is_sums.add(probs.cpu().numpy(), split_of[lo : lo + len(batch)])
        sums.add(features)
        predicted.append(logits.argmax(1).cpu().numpy())
        feats.append(features)
        if bar is not None:
            bar.update(len(batch))
    return sums.result(), np.concatenate(predicted), torch.cat(feats)


def real_features(net: Network, data: str, k: int, seed: int, batch_size: int) -> torch.Tensor:
    """Features of class k's real images, at most PR_REAL_PER_CLASS of them (a seeded subset)."""
    images = load_class(data, k)
    if len(images) > PR_REAL_PER_CLASS:
        gen = torch.Generator().manual_seed(class_seed(seed, k, "pr-real"))
        pick = torch.randperm(len(images), generator=gen)[:PR_REAL_PER_CLASS].sort().values
        images = images[pick.numpy()]
    return torch.cat([net(b)[1] for b in batches(images, batch_size)])


def pr_against(
    real: torch.Tensor, fake: torch.Tensor, device: str
) -> tuple[float | None, float | None]:
    """(precision, recall), or (None, None) when a set has k rows or fewer."""
    if len(real) <= PR_K or len(fake) <= PR_K:
        return None, None
    return precision_recall(real, fake, device=device)


def fid_against(fake: FeatureSums, real: RealStats) -> float:
    """The FID of the fake features' sums (two or more rows) against real statistics."""
    mean, cov = fake.moments()
    return frechet_from_sqrt(real.mean, real.cov_sqrt, mean, cov)


def pr_takes(
    class_ids: list[int], fake_counts: tuple[int, ...], real_counts: tuple[int, ...] | None
) -> tuple[dict[int, int], dict[int, int]]:
    """The overall precision/recall's share of each class (by class id): of its fake rows, and
    of its real rows when there is real data (`real_counts`, else None: no real rows), about
    PR_MAX of each in all, in proportion to the classes' counts."""
    take_fake = dict(zip(class_ids, proportional_take([fake_counts[k] for k in class_ids], PR_MAX)))
    take_real = {}
    if real_counts is not None:
        real_used = [min(real_counts[k], PR_REAL_PER_CLASS) for k in class_ids]
        take_real = dict(zip(class_ids, proportional_take(real_used, PR_MAX)))
    return take_fake, take_real


def pr_record() -> dict[str, int]:
    """The precision/recall settings, as evaluate-NETWORK.json records them."""
    return {"k": PR_K, "max_rows": PR_MAX, "real_per_class": PR_REAL_PER_CLASS}

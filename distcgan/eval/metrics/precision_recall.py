"""Improved precision and recall (Kynkäänniemi et al., NeurIPS 2019), in a network's feature space.

Each set of feature vectors stands for a manifold: the union of balls around its points, each ball
reaching the point's k-th nearest neighbour in its own set (k = 3, as stylegan2-ada's `pr50k3`).
Precision is the fraction of fake points inside the real manifold (are the samples realistic?);
recall the fraction of real points inside the fake manifold (do the samples cover the data?).
A class that collapsed onto a few modes keeps a high precision and loses recall.

Distances are computed in float64 on the features' device, in blocks of rows, so memory stays at
`chunk` x (size of the other set) numbers whatever the sets' sizes.
Leaves out: which features are compared (evaluate.py picks them, per class and overall).
"""

from __future__ import annotations

import numpy as np
import torch

K = 3  # neighbours: the paper's and stylegan2-ada's choice
CHUNK = 1024  # rows of the distance matrix held at once


def knn_radii(x: torch.Tensor, k: int = K, chunk: int = CHUNK) -> torch.Tensor:
    """(n,) the distance from each row of x to its k-th nearest other row (a duplicate of a row
    is another row, at distance 0)."""
    out = []
    for lo in range(0, x.shape[0], chunk):
        d = torch.cdist(x[lo : lo + chunk], x)
        out.append(d.kthvalue(k + 1, dim=1).values)  # +1: the row itself, at distance 0
    return torch.cat(out)


def covered(
    query: torch.Tensor, points: torch.Tensor, radii: torch.Tensor, chunk: int = CHUNK
) -> torch.Tensor:
    """(m,) bool: whether each query row lies in some ball (points[j], radii[j])."""
    out = []
    for lo in range(0, query.shape[0], chunk):
        d = torch.cdist(query[lo : lo + chunk], points)
        out.append((d <= radii[None, :]).any(dim=1))
    return torch.cat(out)


def precision_recall(
    real: np.ndarray | torch.Tensor,
    fake: np.ndarray | torch.Tensor,
    k: int = K,
    device: str = "cpu",
    chunk: int = CHUNK,
) -> tuple[float, float]:
    """(precision, recall) of the fake feature rows against the real ones.

    Each set needs more than k rows (a k-th neighbour besides the row itself); ValueError
    otherwise, which callers turn into "no score" for a set too small.
    """
    if len(real) <= k or len(fake) <= k:
        raise ValueError(
            f"precision/recall with k={k} needs more than {k} real and fake feature rows, got "
            f"{len(real)} and {len(fake)}"
        )
    r = torch.as_tensor(real).to(device=device, dtype=torch.float64)
    f = torch.as_tensor(fake).to(device=device, dtype=torch.float64)
    precision = covered(f, r, knn_radii(r, k, chunk), chunk).double().mean().item()
    recall = covered(r, f, knn_radii(f, k, chunk), chunk).double().mean().item()
    return precision, recall


def proportional_take(counts: list[int], cap: int) -> list[int]:
    """How many rows of each part to keep: all of them when they are `cap` or fewer, else about
    `cap` (at most cap + len(counts)), each part in proportion to its count, rounded up so that
    no part with rows is left out."""
    total = sum(counts)
    if total <= cap:
        return list(counts)
    return [min(c, -(-c * cap // total)) for c in counts]

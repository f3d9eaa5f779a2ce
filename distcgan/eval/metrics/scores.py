"""Inception Score and Frechet distance from sums, the form in which they cross MPI ranks.

Pure numpy, no torch and no MPI: every function maps arrays to arrays or floats, so each is tested
against a naive single-process computation. What the sums are:
  IS, per split s: the sample count n_s, the sum of p(y|x) over the split's samples (a vector of
    num_outputs numbers) and the sum of sum_y p(y|x) log p(y|x) (one number). With the marginal
    m_s = sum p(y|x) / n_s, E_x KL(p(y|x) || m_s) = (sum of p log p) / n_s - sum_y m_s log m_s, so a
    rank sends O(splits x num_outputs) numbers, never a probability vector per sample.
  FID: the count, the sum of feature vectors and the sum of their outer products (float64).
Leaves out: running networks (networks.py) and moving the sums between ranks (evaluate.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg
from scipy.special import xlogy


def split_assignment(n: int, splits: int, seed: int) -> np.ndarray:
    """The split (0..splits-1) of each of n samples, by a seeded random permutation.

    Samples of a per-class model come out sorted by class; contiguous splits would each hold one
    or two classes and the score would be meaningless. Instead the samples are shuffled by
    `numpy.random.default_rng(seed).permutation(n)` and the shuffled order is cut into `splits`
    contiguous chunks as `numpy.array_split` cuts it (sizes differ by at most one, every sample
    in exactly one split). Sample i is row i of the class-sorted layout.
    """
    if not 1 <= splits <= n:
        raise ValueError(f"need 1 <= splits <= n, got splits={splits}, n={n}")
    perm = np.random.default_rng(seed).permutation(n)
    split_of = np.empty(n, dtype=np.int64)
    for s, chunk in enumerate(np.array_split(perm, splits)):
        split_of[chunk] = s
    return split_of


@dataclass
class ISSums:
    """Per-split sums of one rank (or of all ranks, after a reduction): all float64."""

    counts: np.ndarray  # (S,)
    prob: np.ndarray  # (S, num_outputs): sum of p(y|x)
    plogp: np.ndarray  # (S,): sum of sum_y p(y|x) log p(y|x)

    @classmethod
    def zeros(cls, splits: int, num_outputs: int) -> ISSums:
        return cls(np.zeros(splits), np.zeros((splits, num_outputs)), np.zeros(splits))

    def add(self, probs: np.ndarray, split_of: np.ndarray) -> None:
        """Add the probability vectors `probs` (n, num_outputs) of samples in splits `split_of`."""
        probs = np.asarray(probs, dtype=np.float64)
        np.add.at(self.counts, split_of, 1.0)
        np.add.at(self.prob, split_of, probs)
        np.add.at(self.plogp, split_of, xlogy(probs, probs).sum(axis=1))

    def pack(self) -> np.ndarray:
        """One contiguous (S, num_outputs + 2) buffer, for a single MPI reduction."""
        return np.concatenate([self.counts[:, None], self.plogp[:, None], self.prob], axis=1)

    @classmethod
    def unpack(cls, buf: np.ndarray) -> ISSums:
        return cls(buf[:, 0].copy(), buf[:, 2:].copy(), buf[:, 1].copy())


def inception_score(sums: ISSums) -> tuple[float, float, list[float]]:
    """(mean, standard deviation, per-split scores) of exp(E_x KL(p(y|x) || p(y))) over splits.

    The standard deviation is numpy's default (population, ddof=0), as in the original IS code.
    """
    if np.any(sums.counts <= 0):
        raise ValueError("every split needs at least one sample")
    marginal = sums.prob / sums.counts[:, None]
    kl = sums.plogp / sums.counts - xlogy(marginal, marginal).sum(axis=1)
    scores = np.exp(kl)
    return float(scores.mean()), float(scores.std()), [float(s) for s in scores]


@dataclass
class FeatureSums:
    """Count, sum and outer-product sum of feature vectors (float64), mergeable by addition."""

    n: float
    total: np.ndarray  # (d,)
    outer: np.ndarray  # (d, d)

    @classmethod
    def zeros(cls, dim: int) -> FeatureSums:
        return cls(0.0, np.zeros(dim), np.zeros((dim, dim)))

    def add(self, features: np.ndarray) -> None:
        f = np.asarray(features, dtype=np.float64)
        self.n += f.shape[0]
        self.total += f.sum(axis=0)
        self.outer += f.T @ f

    def __add__(self, other: FeatureSums) -> FeatureSums:
        return FeatureSums(self.n + other.n, self.total + other.total, self.outer + other.outer)

    def moments(self) -> tuple[np.ndarray, np.ndarray]:
        """(mean, unbiased covariance), as numpy's np.cov(features, rowvar=False) gives them."""
        if self.n < 2:
            raise ValueError(f"a covariance needs at least 2 samples, got {self.n:g}")
        mean = self.total / self.n
        cov = (self.outer - self.n * np.outer(mean, mean)) / (self.n - 1)
        return mean, (cov + cov.T) / 2  # symmetric to the last bit


def from_moments(n: float, mean: np.ndarray, cov: np.ndarray) -> FeatureSums:
    """The sums that have this count, mean and unbiased covariance (inverse of `moments`)."""
    mean = np.asarray(mean, dtype=np.float64)
    outer = (n - 1) * np.asarray(cov, dtype=np.float64) + n * np.outer(mean, mean)
    return FeatureSums(float(n), n * mean, outer)


def _clean(w: np.ndarray) -> np.ndarray:
    """Eigenvalues of a PSD matrix with rounding noise (|w| below the rank tolerance) zeroed:
    with fewer samples than features most are noise, and sqrt(1e-16) is not small."""
    tol = max(float(w.max()), 0.0) * len(w) * np.finfo(np.float64).eps
    return np.where(w > tol, w, 0.0)


def sqrt_psd(a: np.ndarray) -> np.ndarray:
    """The symmetric square root of a positive semi-definite matrix (one eigendecomposition)."""
    w, v = scipy.linalg.eigh(np.asarray(a, np.float64), driver="evd")
    return (v * np.sqrt(_clean(w))) @ v.T


def frechet_from_sqrt(
    mu1: np.ndarray, sqrt1: np.ndarray, mu2: np.ndarray, cov2: np.ndarray
) -> float:
    """The Frechet distance with the first covariance given by its square root S = cov1^(1/2).

    Tr (cov1 cov2)^(1/2) is the sum of the square roots of the eigenvalues of the symmetric
    positive semi-definite S cov2 S (the same eigenvalues as cov1 cov2): one symmetric
    eigendecomposition, without the complex, sometimes inaccurate, general matrix square root of
    the original code (which fails on rank-deficient covariances: fewer samples than features).
    The real side's S is computed once and cached, so a score costs one eigendecomposition.
    """
    diff = np.asarray(mu1, np.float64) - np.asarray(mu2, np.float64)
    s, cov2 = np.asarray(sqrt1, np.float64), np.asarray(cov2, np.float64)
    m = s @ cov2 @ s
    eig = scipy.linalg.eigh((m + m.T) / 2, eigvals_only=True, driver="evd")
    tr_sqrt = np.sqrt(_clean(eig)).sum()
    fid = float(diff @ diff + np.sum(s * s) + np.trace(cov2) - 2.0 * tr_sqrt)  # Tr cov1 = |S|^2
    return max(fid, 0.0)  # identical statistics can round to -1e-12


def frechet_distance(mu1: np.ndarray, cov1: np.ndarray, mu2: np.ndarray, cov2: np.ndarray) -> float:
    """||mu1 - mu2||^2 + Tr(cov1 + cov2 - 2 (cov1 cov2)^(1/2))."""
    return frechet_from_sqrt(mu1, sqrt_psd(cov1), mu2, cov2)


def fid_from_sums(fake: FeatureSums, real: FeatureSums) -> float:
    mu1, c1 = real.moments()
    mu2, c2 = fake.moments()
    return frechet_distance(mu1, c1, mu2, c2)

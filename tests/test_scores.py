"""The IS and FID math from sums, against hand values and naive single-process computations."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import exact_fid, naive_fid, naive_is

from distcgan.eval.metrics.scores import (
    FeatureSums,
    ISSums,
    fid_from_sums,
    frechet_distance,
    from_moments,
    inception_score,
    split_assignment,
)


def sums_of(x: np.ndarray) -> FeatureSums:
    s = FeatureSums.zeros(x.shape[1])
    s.add(x)
    return s


def test_split_assignment_shuffles_class_sorted_samples_into_balanced_splits():
    split_of = split_assignment(1000, 10, seed=3)
    assert np.bincount(split_of).tolist() == [100] * 10
    assert np.bincount(split_assignment(1003, 10, seed=3)).tolist() == [101] * 3 + [100] * 7
    labels = np.repeat(np.arange(10), 100)  # class-sorted, as a per-class model writes them
    for s in range(10):
        assert len(np.unique(labels[split_of == s])) == 10  # contiguous splits would hold one
    assert np.array_equal(split_of, split_assignment(1000, 10, seed=3))
    assert not np.array_equal(split_of, split_assignment(1000, 10, seed=4))
    with pytest.raises(ValueError):
        split_assignment(5, 6, seed=0)


def test_inception_score_hand_values():
    # Two confident, different predictions: p(y) uniform over 2 classes, KL = log 2, IS = 2.
    probs = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    sums = ISSums.zeros(1, 3)
    sums.add(probs, np.zeros(2, dtype=np.int64))
    assert inception_score(sums)[0] == pytest.approx(2.0, rel=1e-12)
    # Identical predictions: KL = 0, IS = 1 (the minimum).
    sums = ISSums.zeros(2, 3)
    sums.add(np.full((4, 3), 1 / 3), np.array([0, 1, 0, 1]))
    mean, std, per_split = inception_score(sums)
    assert (mean, std) == (pytest.approx(1.0), pytest.approx(0.0, abs=1e-12))
    # K equally likely confident classes: IS = K.
    sums = ISSums.zeros(1, 5)
    sums.add(np.eye(5), np.zeros(5, dtype=np.int64))
    assert inception_score(sums)[0] == pytest.approx(5.0)


def test_inception_score_from_sums_matches_the_naive_loop():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(503, 12)) * 3
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    split_of = split_assignment(503, 7, seed=11)
    # Add in uneven pieces, as ranks and batches would; then merge two halves like a reduction.
    a, b = ISSums.zeros(7, 12), ISSums.zeros(7, 12)
    for lo, hi in [(0, 100), (100, 101), (101, 300)]:
        a.add(probs[lo:hi], split_of[lo:hi])
    b.add(probs[300:], split_of[300:])
    merged = ISSums.unpack(a.pack() + b.pack())
    mean, std, per_split = inception_score(merged)
    ref_mean, ref_std = naive_is(probs, 7, seed=11)
    assert mean == pytest.approx(ref_mean, rel=1e-12)
    assert std == pytest.approx(ref_std, rel=1e-9)
    assert len(per_split) == 7


def test_frechet_distance_hand_value_in_one_dimension():
    # 1-D Gaussians: (mu1 - mu2)^2 + (sigma1 - sigma2)^2.
    fid = frechet_distance(np.array([1.0]), np.array([[4.0]]), np.array([3.0]), np.array([[9.0]]))
    assert fid == pytest.approx(4.0 + 1.0)
    # Diagonal covariances: a sum over dimensions.
    c1, c2 = np.diag([1.0, 4.0]), np.diag([9.0, 16.0])
    fid = frechet_distance(np.zeros(2), c1, np.ones(2), c2)
    assert fid == pytest.approx(2.0 + (1 - 3) ** 2 + (2 - 4) ** 2)


def test_fid_from_sums_matches_pytorch_fid_formula():
    rng = np.random.default_rng(1)
    x1 = rng.normal(size=(400, 16)) @ rng.normal(size=(16, 16))
    x2 = rng.normal(size=(300, 16)) @ rng.normal(size=(16, 16)) + 0.5
    # Sums added in two pieces and merged, as two ranks would.
    s2 = sums_of(x2[:120]) + sums_of(x2[120:])
    assert fid_from_sums(s2, sums_of(x1)) == pytest.approx(naive_fid(x1, x2), rel=1e-8)


def test_fid_with_fewer_samples_than_features_matches_an_exact_small_reference():
    rng = np.random.default_rng(2)
    x1, x2 = rng.random((12, 64)), rng.random((9, 64)) + 0.1
    assert fid_from_sums(sums_of(x2), sums_of(x1)) == pytest.approx(exact_fid(x1, x2), rel=1e-9)
    # The reference itself agrees with the sqrtm formula where the covariances are regular.
    y1, y2 = rng.random((200, 6)), rng.random((150, 6)) * 2
    assert exact_fid(y1, y2) == pytest.approx(naive_fid(y1, y2), rel=1e-8)


def test_moments_round_trip_and_identical_statistics_give_zero():
    x = np.random.default_rng(3).normal(size=(50, 5))
    mean, cov = sums_of(x).moments()
    assert np.allclose(mean, x.mean(0)) and np.allclose(cov, np.cov(x, rowvar=False))
    again = from_moments(50, mean, cov)
    assert np.allclose(again.outer, sums_of(x).outer)
    assert fid_from_sums(sums_of(x), sums_of(x)) == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError):
        sums_of(x[:1]).moments()

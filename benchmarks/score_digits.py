"""How recognisable are generated digits? A classifier trained on the real digits labels them.

    python benchmarks/score_digits.py --real data/digits16.h5 --samples runs/demo/samples.h5

Fits scikit-learn's SVC (RBF) on every real image of the data file, reports its 5-fold
cross-validated accuracy on real images (the ceiling), then the fraction of each class's samples
that it assigns to that class. A stop-gap until `distcgan evaluate` (the metrics issue) exists.
"""

from __future__ import annotations

import argparse

import numpy as np
from sklearn.model_selection import cross_val_score
from sklearn.svm import SVC

from distcgan.data import load_class, read_info


def _load(path: str) -> tuple[np.ndarray, np.ndarray]:
    info = read_info(path)
    xs, ys = [], []
    for k, n in enumerate(info.counts):
        if n:
            x = load_class(path, k)
            xs.append(x.reshape(n, -1) / 255.0)
            ys.append(np.full(n, k))
    return np.concatenate(xs), np.concatenate(ys)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", required=True)
    parser.add_argument("--samples", required=True)
    args = parser.parse_args()
    x, y = _load(args.real)
    clf = SVC(gamma="scale")
    real_acc = cross_val_score(clf, x, y, cv=5).mean()
    clf.fit(x, y)
    xs, ys = _load(args.samples)
    pred = clf.predict(xs)
    print(f"classifier accuracy on held-out real digits: {real_acc:.3f}")
    for k in np.unique(ys):
        print(f"class {k}: {np.mean(pred[ys == k] == k):.2f} of {np.sum(ys == k)} samples")
    print(f"overall accuracy on samples: {np.mean(pred == ys):.3f}")


if __name__ == "__main__":
    main()

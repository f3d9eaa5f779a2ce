"""The metrics: Inception Score and FID from sums (scores.py), precision and recall
(precision_recall.py), the real data's cached statistics (realstats.py) and the networks whose
features they are computed in (networks.py, inception_tf.py). Leaves out: where the images come
from (eval/sampling/) and the `evaluate` command that puts them together (eval/evaluate.py)."""

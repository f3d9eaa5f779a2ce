"""The metrics: Inception Score and FID from sums (scores.py), precision and recall
(precision_recall.py), the real data's cached statistics (realstats.py), the networks whose
features they are computed in (networks.py, inception_tf.py); and what `evaluate` builds on them:
a class's images through the network (features.py), the per-class statistics and their one
reduction over ranks (stats.py), each metric as a function of them (summary.py), and the record
written and printed (result.py). Leaves out: where the images come from (eval/sampling/) and the
command's steps (eval/evaluate.py)."""

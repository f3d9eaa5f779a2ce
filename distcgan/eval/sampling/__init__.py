"""Drawing samples from a trained run's generators: the `sample` command (sample.py) and the
scores of a pair during training (during.py). Leaves out: the metrics (eval/metrics/)."""

"""Drawing images from a trained run: its generators and their noise (generators.py), the
`sample` command (sample.py), what `evaluate` scores, a sample file or a run (source.py), and
the scores of a pair during training (during.py). Leaves out: the metrics (eval/metrics/)."""

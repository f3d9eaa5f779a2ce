"""Evaluation, by subject: metrics/ (the scores, precision and recall, the real data's statistics
and the networks whose features they use), sampling/ (drawing images from a trained run's
generators: the `sample` command, and the scores of a pair during training) and classifier/ (the
digits classifier, `distcgan classifier train`). evaluate.py is the `evaluate` command, which
puts the metrics and the samples together over ranks."""

"""Training: the DC-GAN networks, one G/D pair and its step, the training loop of a rank's tasks,
and one launch of `distcgan train` (job.py)."""

"""Evaluation: sampling trained generators, feature networks (Inception, a data classifier),
real-data statistics, and the IS/FID/accuracy scores reduced across ranks."""

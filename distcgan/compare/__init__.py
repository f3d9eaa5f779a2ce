"""`distcgan compare`: per-class DC-GANs vs one DC-GAN vs one DC-CGAN on the same data and budget
(experiment.py), and the table and figure that render its result (report.py)."""

DEFAULT_N = 10_000  # samples scored per variant (here so that the command line needs no numpy)

"""`distcgan compare`: per-class DC-GANs vs one DC-GAN vs one DC-CGAN (vs per-class DC-GANs from a
shared start, shared.py) on the same data and budget (experiment.py), and the table and figure
that render its result (report.py)."""

"""`distcgan compare`: per-class DC-GANs vs one DC-GAN vs one DC-CGAN on the same data and budget
(experiment.py), and the table and figure that render its result (report.py)."""

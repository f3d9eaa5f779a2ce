"""The digits classifier: a small CNN (model.py) trained on the real data and saved as
TorchScript (`distcgan classifier train`, train.py), the usual scoring network where ImageNet's
Inception knows no digits. Leaves out: loading it to score samples (eval/metrics/networks.py
loads any TorchScript file)."""

"""`distcgan export` and `distcgan generate`: a trained run as one self-contained conditional
generator (writer.py, model.py, card.py), loaded back by load.py, sampled by generate.py."""

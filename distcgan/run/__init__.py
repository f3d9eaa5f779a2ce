"""The run directory and its files: atomic writes, the run-dir contract, checksummed checkpoints,
and the job scripts' status and supervisor. Imports no torch (tested), so `distcgan status` and the
supervisor start fast on a login node."""

"""`python -m distcgan.run.envcheck`: whether this Python can run distcgan's ranks, asked by the
job templates before any launch. It prints nothing and exits 0, or prints one line that says
what is missing and exits 1; the template adds how to fix it.

A job that starts every rank with the wrong Python (Debian's or RHEL's system python3, another
environment's) otherwise fails once per rank, each with its own traceback. This module runs on
whatever Python the template was given: it imports nothing of distcgan's beyond the package
itself, and uses no syntax newer than Python 3.7, so an old Python gets this line rather than a
SyntaxError from distcgan's code. It looks the modules up without importing them (fast on a
login node); whether an MPI library works is for the launch to say.
"""

from __future__ import annotations

import importlib.util
import sys

# What a rank imports (train, sample, evaluate), by import name; pyproject.toml lists them.
MODULES = ("numpy", "torch", "torchvision", "mpi4py", "h5py", "scipy", "PIL", "tqdm", "matplotlib")


def problem() -> str | None:
    """What keeps this Python from running distcgan, in a few words, or None."""
    if sys.version_info < (3, 10):  # noqa: UP036 (the point: an older Python runs this)
        return f"Python {sys.version.split()[0]}, and distcgan needs 3.10 or newer"
    missing = [m for m in MODULES if importlib.util.find_spec(m) is None]
    if missing:
        return "No module named " + ", ".join(repr(m) for m in missing)
    return None


if __name__ == "__main__":
    said = problem()
    if said:
        sys.stderr.write(said + "\n")
        sys.exit(1)

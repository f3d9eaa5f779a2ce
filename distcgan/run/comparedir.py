"""The directory of `distcgan compare` (DIR/): `CompareDir` is the one place that names its
files, and `VariantDir` those a comparison adds to a variant's run directory.

DIR/
  compare-config.json  the base config (preset -> --config -> flags, as `train` resolves it)
  compare-options.json the scoring options (a --resume keeps those it does not give again)
  classifier.pt        the scoring network, trained on the data first when --network is not given
  per-class/ gan/ cgan/ shared-per-class/
                       run directories of the first run seed (the config's --seed); each also
                       holds samples.h5 (+ samples.png), evaluate-NETWORK.json (the name
                       `distcgan evaluate` gives it) and row.json (its line of the table, and
                       what it was computed from: --resume skips a variant whose row.json still
                       matches)
  seed-S/              with --seeds N, the same runs with run seed S (the config's seed + 1, ...)
  real/                the real images scored as if they were samples: evaluate-NETWORK.json,
                       row.json
  compare.json, compare.md, compare.png  (compare/report.py)
No torch here. Leaves out: what the files hold (compare/experiment.py, compare/report.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from distcgan.run.rundir import RunDir


@dataclass(frozen=True)
class VariantDir(RunDir):
    """DIR/[seed-S/]VARIANT/ (or DIR/real/): a run directory (the real images' has only the
    comparison's files) with the variant's samples, evaluation and row of the table."""

    @property
    def samples(self) -> Path:
        return self.path / "samples.h5"

    @property
    def grid(self) -> Path:
        return self.path / "samples.png"

    @property
    def row(self) -> Path:
        """row.json: the variant's line of the table and its fingerprint."""
        return self.path / "row.json"


@dataclass(frozen=True)
class CompareDir:
    """DIR/: the comparison's contract (layout in this module's docstring)."""

    path: Path

    @property
    def base_config(self) -> Path:
        return self.path / "compare-config.json"

    @property
    def options(self) -> Path:
        return self.path / "compare-options.json"

    @property
    def classifier(self) -> Path:
        return self.path / "classifier.pt"

    def seed(self, seed: int, first: int) -> Path:
        """Where run seed `seed`'s variants live: DIR itself for the first seed (the layout of
        a one-seed comparison), DIR/seed-S for the others."""
        return self.path if seed == first else self.path / f"seed-{seed}"

    def variant(self, seed: int, first: int, name: str) -> VariantDir:
        return VariantDir(self.seed(seed, first) / name)

    @property
    def real(self) -> VariantDir:
        return VariantDir(self.path / "real")

    @property
    def json(self) -> Path:
        """compare.json: everything the comparison computed (report.py renders it)."""
        return self.path / "compare.json"

    @property
    def table(self) -> Path:
        """compare.md: the paper's table."""
        return self.path / "compare.md"

    @property
    def figure(self) -> Path:
        """compare.png: the variants' sample grids side by side."""
        return self.path / "compare.png"

    def is_comparison(self) -> bool:
        return self.json.is_file()

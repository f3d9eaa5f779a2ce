"""No command replaces an existing output without --overwrite (atomic.refuse_existing, the one
rule of every command that writes a file): `python -m data_prep`, `classifier train`, `evaluate`,
`sample`, `generate`, `report`, `export` and `anova` each refuse one in one line, exit 2, before
any input is read or any image made, and leave it as it was; with --overwrite (the hint) the
same command replaces it, once its inputs are checked. `data_prep --out` replaced a 5,000-image
data set with a 60-image one, and a text file with HDF5, without a word."""

from __future__ import annotations

import json

import pytest
from helpers import own_lines, run_cli, save_tiny, tiny_args

from data_prep.__main__ import main as data_prep
from distcgan.cli import main
from distcgan.data import read_info

KEEP = "mine, not to be replaced"


def _refused(flag: str | None, path, prog: str = "distcgan") -> list[str]:
    """The one line every command gives for an existing output."""
    if flag is None:
        return [f"{prog}: error: {path} already exists: add --overwrite to replace it"]
    return [
        f"{prog}: error: {flag} {path} already exists: add --overwrite to replace it, or give "
        f"another {flag}"
    ]


def _err(capsys) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


@pytest.fixture(scope="module")
def run(tmp_path_factory, digits_file):
    """A finished tiny run of classes 1 and 2, and a small TorchScript network to score it."""
    root = tmp_path_factory.mktemp("overwrite")
    args = ("--classes", "1", "2", "--devices", "cpu", "--threads", "1")
    assert main(tiny_args(digits_file, root / "run", *args)) == 0
    return root / "run", save_tiny(root / "tiny.pt")


def test_data_prep_refuses_an_existing_out_before_it_reads_the_source(tmp_path, capsys):
    out, nowhere = tmp_path / "d.h5", str(tmp_path / "nowhere")
    out.write_text(KEEP)
    # The source does not exist: the output is said first, before anything is read.
    assert data_prep(["mnist", "--src", nowhere, "--out", str(out)]) == 2
    assert _err(capsys) == _refused("--out", out, "data_prep")
    assert data_prep(["digits", "--out", str(out), "--max-per-class", "3"]) == 2
    assert _err(capsys) == _refused("--out", out, "data_prep")
    # With --overwrite the inputs are checked first: a bad source leaves the file as it was.
    assert data_prep(["mnist", "--src", nowhere, "--out", str(out), "--overwrite"]) == 2
    assert "already exists" not in capsys.readouterr().err and out.read_text() == KEEP
    assert data_prep(["digits", "--out", str(out), "--max-per-class", "3", "--overwrite"]) == 0
    assert read_info(str(out)).counts == (3,) * 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.h5"]  # no temporary file left


def test_classifier_train_refuses_an_existing_out_before_reading_the_data(
    tmp_path, digits_file, capsys
):
    out = tmp_path / "c.pt"
    out.write_text(KEEP)
    args = ["classifier", "train", str(tmp_path / "nowhere.h5"), "--out", str(out)]
    assert main(args) == 2
    assert _err(capsys) == _refused("--out", out) and out.read_text() == KEEP
    args[2] = str(digits_file)
    assert main([*args, "--epochs", "1", "--devices", "cpu", "--overwrite"]) == 0
    assert out.read_bytes()[:2] == b"PK"  # a TorchScript archive now


def test_evaluate_refuses_its_json_and_its_default_json(run, tmp_path, capsys):
    path, net = run
    args = ["evaluate", "--run", str(path), "--network", str(net), "--n", "20", "--splits", "2"]
    args += ["--devices", "cpu", "--no-progress"]
    assert main(args) == 0
    default = path / "evaluate-tiny.json"
    first = default.read_bytes()
    capsys.readouterr()
    assert main(args) == 2
    assert _err(capsys) == _refused("--json", default) and default.read_bytes() == first
    mine = tmp_path / "e.json"
    mine.write_text(KEEP)
    assert main([*args, "--json", str(mine)]) == 2
    assert _err(capsys) == _refused("--json", mine) and mine.read_text() == KEEP
    assert main([*args, "--json", str(mine), "--overwrite"]) == 0
    assert json.loads(mine.read_text())["n"] == 20
    assert main([*args, "--overwrite"]) == 0  # the default one too


def test_sample_refuses_its_file_and_its_grid(run, tmp_path, capsys):
    path, _ = run
    out, grid, other = tmp_path / "s.h5", tmp_path / "g.png", tmp_path / "t.h5"
    args = ["sample", "--run", str(path), "--per-class", "3", "--grid", str(grid), "--no-progress"]
    assert main([*args, "--out", str(out)]) == 0
    before = out.read_bytes(), grid.read_bytes()
    capsys.readouterr()
    assert main([*args, "--per-class", "5", "--out", str(out)]) == 2  # a rerun, another size
    assert _err(capsys) == _refused("--out", out)
    assert main([*args, "--out", str(other)]) == 2  # a new file, an old grid
    assert _err(capsys) == _refused("--grid", grid)
    assert (out.read_bytes(), grid.read_bytes()) == before and not other.exists()
    assert main([*args, "--per-class", "5", "--out", str(out), "--overwrite"]) == 0
    assert read_info(str(out)).counts[1] == 5 and grid.read_bytes() != before[1]


@pytest.mark.mpi
def test_sample_under_mpiexec_refuses_once_and_writes_nothing(run, tmp_path):
    path, _ = run
    out = tmp_path / "s.h5"
    args = ["sample", "--run", str(path), "--per-class", "2", "--out", str(out), "--no-progress"]
    assert main(args) == 0  # a sample file, and its grid s.png
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    result = run_cli(*args, ranks=2)  # the same command again: its own files, told first
    assert result.returncode == 2, result.stderr
    assert own_lines(result.stderr) == _refused("--out", out), result.stderr
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_export_and_generate_refuse_what_is_there(run, tmp_path, capsys):
    path, _ = run
    export = tmp_path / "export"
    assert main(["export", "--run", str(path), "--out", str(export)]) == 0
    capsys.readouterr()
    assert main(["export", "--run", str(path), "--out", str(export)]) == 2
    assert _err(capsys) == _refused("--out", export)
    assert main(["export", "--run", str(path), "--out", str(export), "--overwrite"]) == 0
    png = tmp_path / "g.png"
    png.write_text(KEEP)  # not a PNG at all: generate replaced it with one
    args = ["generate", "--model", str(export), "--class", "1", "--n", "2", "--out", str(png)]
    capsys.readouterr()
    assert main(args) == 2
    assert _err(capsys) == _refused("--out", png) and png.read_text() == KEEP
    assert main([*args, "--overwrite"]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_report_refuses_the_page_it_wrote(run, capsys):
    path, _ = run
    page = path / "report.html"
    page.unlink(missing_ok=True)
    assert main(["report", "--run", str(path)]) == 0
    page.write_text(KEEP)
    capsys.readouterr()
    assert main(["report", "--run", str(path)]) == 2
    assert _err(capsys) == _refused(None, page) and page.read_text() == KEEP
    assert main(["report", "--run", str(path), "--overwrite"]) == 0
    assert page.read_text().startswith("<!doctype html>")


def test_anova_refuses_an_existing_json(digits_file, tmp_path, capsys):
    out = tmp_path / "a.json"
    out.write_text(KEEP)
    assert main(["anova", str(digits_file), "--json", str(out)]) == 2
    assert _err(capsys) == _refused("--json", out) and out.read_text() == KEEP
    assert main(["anova", str(digits_file), "--json", str(out), "--overwrite"]) == 0
    assert json.loads(out.read_text())["classes"] == 10

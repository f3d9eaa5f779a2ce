"""benchmarks/shared_start.py's `table`: a cell's seeds and variants gathered from several
comparison directories (two processes' halves, a seed's variants run apart, older files)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "shared_start.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("shared_start", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(fid: float) -> dict:
    return {"is_mean": 2.0, "fid": fid, "precision": 0.5, "recall": 0.5, "class_accuracy": 0.9,
            "fid_class_mean": 2 * fid, "train_s": 10.0,
            "per_class_fid": {"0": fid, "1": 2 * fid, "2": 3 * fid, "3": 4 * fid}}  # fmt: skip


def _comparison(path: Path, runs: dict, counts: list[int] | None) -> Path:
    report = {"budget": {"steps_per_class": 900}, "classes": [0, 1, 2, 3], "runs": runs}
    if counts is not None:  # files of before 2026-12 hold no class counts
        report["counts"] = counts
    path.mkdir()
    (path / "compare.json").write_text(json.dumps(report))
    return path


def test_a_seeds_variants_from_two_directories_are_one_seed(bench, tmp_path, capsys):
    shared = _comparison(
        tmp_path / "shared", {"0": {"shared-per-class": _row(1.0)},
                              "1": {"shared-per-class": _row(3.0)}}, [40, 30, 20, 10]
    )  # fmt: skip
    older = _comparison(tmp_path / "cgan", {"0": {"cgan": _row(0.5)}}, None)
    summary = bench.print_cell(shared, older)
    out = capsys.readouterr().out
    assert "shared: 2 seed(s) (0, 1), 900 steps a class" in out
    assert summary["variants"]["cgan"]["seeds"] == ["0"]
    assert summary["variants"]["shared-per-class"]["seeds"] == ["0", "1"]
    assert summary["variants"]["shared-per-class"]["fid"]["mean"] == pytest.approx(2.0)
    line = json.loads(out.strip().splitlines()[-1])
    # The three smallest classes (3, 2, 1 by the first directory's counts): their mean FID.
    assert line["shared-per-class:smallest3_fid"] == pytest.approx([3.0, 9.0])
    assert line["cgan:smallest3_fid"] == pytest.approx([1.5])
    assert "| cgan | 2.000 | 0.500 |" in out
    # The JSON line's lists follow the seeds' order, whatever the directories' order.
    later = _comparison(tmp_path / "later", {"10": {"cgan": _row(9.0)}, "2": {"cgan": _row(4.0)}},
                        None)  # fmt: skip
    bench.print_cell(later, older)
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["seeds"] == ["0", "2", "10"] and line["cgan:fid"] == [0.5, 4.0, 9.0]


def test_a_file_without_class_counts_has_no_smallest_classes(bench, tmp_path, capsys):
    older = _comparison(
        tmp_path / "old", {"0": {"cgan": _row(0.5)}, "1": {"cgan": _row(0.7)}}, None
    )
    summary = bench.print_cell(older)
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["cgan:smallest3_fid"] == [] and summary["variants"]["cgan"]["fid"]["mean"] == 0.6


def test_the_long_tailed_cell_reads_each_runs_scores_against_the_whole_digits(
    bench, tmp_path, capsys
):
    run0, run1 = tmp_path / "r0", tmp_path / "r1"
    run0.mkdir(), run1.mkdir()
    (run0 / bench.WHOLE).write_text(json.dumps({"per_class_fid": {"0": 9, "1": 1, "2": 2, "3": 3}}))
    rows = {"0": {"per-class": {**_row(1.0), "run": str(run0)}},
            "1": {"per-class": {**_row(1.0), "run": str(run1)}}}  # fmt: skip
    cell = _comparison(tmp_path / "longtail", rows, [40, 30, 20, 10])
    summary = bench.print_cell(cell)
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # Classes 3, 2, 1 are the smallest; seed 1's run has not been scored against the whole digits.
    assert line["per-class:smallest3_fid_whole"] == pytest.approx([2.0])
    assert line["per-class:smallest3_fid"] == pytest.approx([3.0, 3.0])
    assert summary["variants"]["per-class"]["smallest3_fid_whole"]["mean"] == pytest.approx(2.0)


@pytest.mark.parametrize("table, res", [("longtail", 16), ("longtail32", 32)])
def test_the_long_tailed_cells_train_at_batch_16_and_are_judged_on_the_whole_digits(
    bench, tmp_path, capsys, table, res
):
    assert bench.main([table, "--out", str(tmp_path), "--dry-run", "--ranks", "1"]) == 0
    out = capsys.readouterr().out
    compare = next(line for line in out.splitlines() if " compare " in line)
    assert f"digits{res}-longtail.h5 --resolution {res} " in compare
    assert compare.split("--batch-size ")[1].startswith("16")
    assert "--long-tail 10" in out and f"--data {tmp_path}/data/digits{res}.h5 " in out
    assert out.count(f"--out {tmp_path}/data/digits{res}.h5") == 1  # the whole digits made once


def test_a_kept_network_scores_the_cell_and_variants_trains_only_those(bench, tmp_path, capsys):
    net = tmp_path / "kept_classifier.pt"
    net.write_bytes(b"a record's network")
    argv = ["seeds16-3x", "--out", str(tmp_path), "--dry-run", "--ranks", "1", "--network",
            str(net), "--variants", "cgan"]  # fmt: skip
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    compare = next(line for line in out.splitlines() if " compare " in line)
    assert "classifier train" not in out  # the kept network is not trained again
    assert f"--network {net} " in compare and "--steps 2700 " in compare
    assert compare.split("--variants ")[1].split(" --")[0] == "cgan"
    # A --network that is not there is said, not trained into.
    with pytest.raises(SystemExit, match="--network .*missing.pt: no such file"):
        bench.main([*argv[:7], str(tmp_path / "missing.pt")])
    # Other flags after --variants are kept.
    assert bench.with_variants(["--variants", *bench.THREE, "--batch-size", "16"], ["gan"]) == [
        "--variants", "gan", "--batch-size", "16"
    ]  # fmt: skip


def test_the_shared_start_is_paired_with_per_class_seed_by_seed(bench, tmp_path, capsys):
    # Seed 2 has the shared start only: it is in the shared row, not in the pairing.
    rows = {"0": {"per-class": _row(3.0), "shared-per-class": _row(1.0)},
            "1": {"per-class": _row(5.0), "shared-per-class": _row(2.0)},
            "2": {"shared-per-class": _row(9.0)}}  # fmt: skip
    summary = bench.print_cell(_comparison(tmp_path / "x3", rows, [40, 30, 20, 10]))
    out = capsys.readouterr().out
    assert "paired by seed (2 seed(s) with both): shared-per-class - per-class" in out
    fid = summary["paired"]["fid"]
    # Differences -2 and -3: mean -2.5, half-width t(0.975, 1) * 0.707 / 1.414 = 6.353.
    assert fid["mean"] == pytest.approx(-2.5) and fid["half"] == pytest.approx(6.353, abs=1e-3)
    assert fid["verdict"] == "cannot tell" and "| FID | -2.500 | 6.353 | cannot tell |" in out
    assert "train s" not in out.split("paired by seed")[1]  # a cost, not a score
    assert summary["variants"]["shared-per-class"]["fid"]["mean"] == pytest.approx(4.0)
    # A clear difference gets a verdict; the JSON line stays last.
    rows["2"]["per-class"] = _row(12.0)
    assert (
        bench.print_cell(_comparison(tmp_path / "x3b", rows, None))["paired"]["fid"]["verdict"]
        == "shared better"
    )
    json.loads(capsys.readouterr().out.strip().splitlines()[-1])

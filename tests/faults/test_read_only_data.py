"""A data set on a read-only folder (as shared data sets on clusters are) is still scored: the
real statistics go to --stats-dir, or else to the user's cache folder, never only beside the data.

The read-only cases bind-mount the data folder read-only inside an unprivileged user and mount
namespace (`unshare -rm`, helpers.in_namespace), since root may write to a chmod 555 folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import (
    cli_command,
    copy_data,
    in_namespace,
    make_samples,
    needs_userns,
    run_cli,
    save_tiny,
)

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")


def _evaluate(data: Path, samples: Path, net: Path, out: Path, *extra: str) -> list[str]:
    """The arguments of `distcgan evaluate` of `samples` against `data`, into `out`."""
    return [
        "evaluate", "--samples", str(samples), "--data", str(data), "--network", str(net),
        "--splits", "2", "--json", str(out), "--no-progress", *extra,
    ]  # fmt: skip


def _read_only(folder: Path, also: str = "") -> str:
    """The namespace's setup: `folder` bind-mounted read-only over itself (then `also`)."""
    setup = f"mount --bind {folder} {folder} && mount -o remount,bind,ro {folder}"
    return f"{setup} && {also}" if also else setup


@pytest.fixture
def inputs(tmp_path, digits_file) -> tuple[Path, Path, Path]:
    data = copy_data(digits_file, tmp_path / "shared")
    samples = make_samples(digits_file, tmp_path / "samples.h5")
    return data, samples, save_tiny(tmp_path / "tiny.pt")


def test_stats_dir_holds_the_cache_and_the_data_folder_stays_untouched(tmp_path, inputs):
    data, samples, net = inputs
    stats = tmp_path / "stats"
    first = run_cli(*_evaluate(data, samples, net, tmp_path / "a.json", "--stats-dir", str(stats)))
    assert first.returncode == 0, first.stderr
    assert "computing them" in first.stdout and len(list(stats.glob("digits16.fid-tiny-*.h5"))) == 1
    assert sorted(p.name for p in data.parent.iterdir()) == ["digits16.h5"]
    again = run_cli(*_evaluate(data, samples, net, tmp_path / "b.json", "--stats-dir", str(stats)))
    assert again.returncode == 0 and "(cached)" in again.stdout
    a, b = (json.loads((tmp_path / f"{x}.json").read_text()) for x in "ab")
    assert a["fid"] == b["fid"]


@needs_userns
def test_a_read_only_data_folder_is_scored_through_the_user_cache(tmp_path, inputs):
    data, samples, net = inputs
    cache = tmp_path / "xdg"
    result = in_namespace(
        _read_only(data.parent, f"export XDG_CACHE_HOME={cache}"),
        "true",
        cli_command(*_evaluate(data, samples, net, tmp_path / "a.json")),
    )
    assert result.returncode == 0, result.stderr
    assert len(list((cache / "distcgan" / "fid").glob("digits16.fid-tiny-*.h5"))) == 1
    assert json.loads((tmp_path / "a.json").read_text())["fid"] > 0
    assert sorted(p.name for p in data.parent.iterdir()) == ["digits16.h5"]


@needs_userns
def test_a_read_only_stats_dir_is_one_line_naming_the_option(tmp_path, inputs):
    data, samples, net = inputs
    stats = tmp_path / "stats"
    stats.mkdir()
    result = in_namespace(
        _read_only(stats),
        "true",
        cli_command(*_evaluate(data, samples, net, tmp_path / "a.json", "--stats-dir", str(stats))),
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"distcgan: error: cannot write the FID statistics of {data} in {stats} "
        "(Read-only file system): pass --stats-dir DIR, a folder you can write"
    )

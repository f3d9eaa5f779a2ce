"""tools/bitcheck.py's comparison of two digests (the runs it digests take minutes: not here)."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import REPO

TOOL = REPO / "tools" / "bitcheck.py"


def _digest(path, runs, files):
    meta = {"commit": "0" * 40, "uncommitted": False, "checkout": "c", "started_utc": "t"}
    path.write_text(json.dumps({"meta": meta, "runs": runs, "files": files}))
    return path


def _compare(a, b):
    cmd = [sys.executable, str(TOOL), "--compare", str(a), str(b)]
    return subprocess.run(cmd, capture_output=True, text=True)


def test_equal_digests_pass_and_every_difference_is_printed(tmp_path):
    runs = {"demo": {"rc": 0, "events": ["a"]}}
    files = {"run/class_000/checkpoint.pt": {"G": {"w": "ab12"}}}
    a = _digest(tmp_path / "a.json", runs, files)
    same = _compare(a, _digest(tmp_path / "b.json", runs, files))
    assert same.returncode == 0 and "0 difference(s) in 3 digested values" in same.stdout
    changed = {"run/class_000/checkpoint.pt": {"G": {"w": "ff00"}}, "new.png": "cd34"}
    other = _compare(a, _digest(tmp_path / "c.json", runs, changed))
    assert other.returncode == 1, other.stdout
    assert '/files/run/class_000/checkpoint.pt/G/w\n  A: "ab12"\n  B: "ff00"' in other.stdout
    assert "/files/new.png\n  A: (absent)" in other.stdout
    assert "2 difference(s) in 4 digested values" in other.stdout


def test_a_missing_digest_is_one_line(tmp_path):
    a = _digest(tmp_path / "a.json", {}, {})
    result = _compare(a, tmp_path / "none.json")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"bitcheck: {tmp_path / 'none.json'}: no such digest (write one: "
        "python tools/bitcheck.py CHECKOUT OUT.json)"
    ]

"""The documentation stays true: the generated pages (docs/cli/*.txt, the preset table) are what
the code prints now; every link and anchor resolves; every distcgan and data_prep line of a shell
block parses; the README is short, and neither it nor docs/ (outside the studies) holds a date or a
commit id; a figure linked to a JSON record is the record's value; every file cited exists.

The rules live in tools/check_docs.py and tools/gen_docs.py; each is first tested here on small
pages written to tmp_path, then run over the repository."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

sys.path.insert(0, str(REPO / "tools"))
import check_docs  # noqa: E402
import gen_docs  # noqa: E402


def _page(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _shown(problems: list[str]) -> str:
    return "\n" + "\n".join(problems)


# ---- (a) generated pages ---------------------------------------------------------------------


# argparse lays the help out alike on Python 3.10 to 3.12 (checked); 3.13 breaks the top-level
# usage line elsewhere, so there a page may differ from the committed one in its line breaks only.
LAYOUT_AS_COMMITTED = sys.version_info < (3, 13)


def test_the_command_pages_and_the_preset_table_are_current():
    try:
        files = gen_docs.expected()
    except gen_docs.MarkersMissing as exc:
        pytest.fail(str(exc))

    def only_wrapped(path: Path) -> bool:
        return path in files and path.read_text().split() == files[path].split()

    stale = [
        str(p.relative_to(REPO))
        for p in gen_docs.stale(files)
        if LAYOUT_AS_COMMITTED or not only_wrapped(p)
    ]
    assert not stale, f"out of date: {', '.join(stale)}: run make docs"


@pytest.mark.parametrize(
    "argv,page",
    [
        (["-m", "distcgan", "train", "--help"], "train.txt"),
        (["-m", "distcgan", "classifier", "train", "--help"], "classifier-train.txt"),
        (["-m", "distcgan", "job-plan", "--help"], "job-plan.txt"),
        (["-m", "data_prep", "--help"], "data_prep.txt"),
        (["jobs/weak_scaling.py", "--help"], "weak_scaling.txt"),
    ],
)
def test_a_command_page_is_what_the_command_prints(argv, page):
    """The pages are made in one process from the parsers; this is what a user's --help prints."""
    env = {**os.environ, "COLUMNS": gen_docs.COLUMNS, "NO_COLOR": "1"}
    run = subprocess.run(
        [sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    command = "python " + " ".join(argv[:-1])  # as the page's first line shows it
    assert gen_docs.cli_pages()[page] == gen_docs._page(command, run.stdout)


def test_every_subcommand_has_a_page_and_nested_ones_are_named_by_their_words():
    pages = gen_docs.cli_pages()
    for name in ("distcgan", "train", "classifier", "classifier-train", "job-plan", "data_prep"):
        assert f"{name}.txt" in pages
    assert pages["classifier-train.txt"].startswith("$ python -m distcgan classifier train --help")
    assert all(p.endswith("\n") and " \n" not in p for p in pages.values())


def test_the_pages_do_not_depend_on_the_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    wide = gen_docs.cli_pages()
    monkeypatch.setenv("COLUMNS", "40")
    assert gen_docs.cli_pages() == wide
    assert os.environ["COLUMNS"] == "40"  # put back as it was


def test_a_page_no_command_has_and_a_changed_page_are_stale(tmp_path, monkeypatch):
    monkeypatch.setattr(gen_docs, "CLI_DIR", tmp_path)
    files = {tmp_path / "train.txt": "new\n", tmp_path / "same.txt": "same\n"}
    _page(tmp_path, "train.txt", "old\n")
    _page(tmp_path, "same.txt", "same\n")
    _page(tmp_path, "gone.txt", "a command that is gone\n")
    assert gen_docs.stale(files) == [tmp_path / "train.txt", tmp_path / "gone.txt"]
    gen_docs.update(files, check=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.txt", "train.txt"]
    assert (tmp_path / "train.txt").read_text() == "new\n"


def test_the_preset_table_has_a_row_per_preset_and_a_column_per_field_that_differs():
    from distcgan.config import PRESETS

    table = gen_docs.preset_table()
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert [r.split("|")[1].strip() for r in rows] == [f"`{name}`" for name in PRESETS]
    head = table.splitlines()[1]
    for flag in ("--resolution", "--steps", "--batch-size", "--checkpoint-every"):
        assert f"`{flag}`" in head
    assert "`--lr-g`" not in head  # the same in every preset
    digits = next(r for r in rows if r.startswith("| `digits`"))
    cells = dict(zip(head.split("|"), digits.split("|")))
    assert cells[" `--resolution` "].strip() == str(PRESETS["digits"]().resolution)


def test_the_table_goes_between_the_markers_and_nowhere_else():
    page = f"# Training\n\nbefore\n{gen_docs.BEGIN}\nan old table\n{gen_docs.END}\nafter\n"
    new = gen_docs.with_preset_table(page)
    assert new.startswith(f"# Training\n\nbefore\n{gen_docs.BEGIN}\n")
    assert new.endswith(f"\n{gen_docs.END}\nafter\n")
    assert "an old table" not in new and gen_docs.preset_table() in new
    assert gen_docs.with_preset_table(new) == new
    for broken in ("# Training\n", f"{gen_docs.END}\n{gen_docs.BEGIN}\n", f"{gen_docs.BEGIN}\n"):
        with pytest.raises(gen_docs.MarkersMissing, match="run make docs"):
            gen_docs.with_preset_table(broken)


# ---- (b) links and anchors -------------------------------------------------------------------


@pytest.mark.parametrize(
    "heading,anchor",
    [
        ("Installing distcgan", "installing-distcgan"),
        ("A laptop or workstation: the `make` venv", "a-laptop-or-workstation-the-make-venv"),
        ("Fused groups (`--fuse`)", "fused-groups---fuse"),
        ("The site's MPI & mpi4py", "the-sites-mpi--mpi4py"),
        ("bf16 and AMP", "bf16-and-amp"),
        ("What `d_real_sign` says", "what-d_real_sign-says"),
        ("**Bold** and [a link](x.md)", "bold-and-a-link"),
        ("Résumé — a 3×3 grid", "résumé--a-33-grid"),
    ],
)
def test_anchors_follow_githubs_rules(heading, anchor):
    assert check_docs.slug(heading) == anchor


def test_links_and_anchors_that_resolve_pass_and_the_others_are_named(tmp_path):
    _page(tmp_path, "docs/other.md", "# Other\n\n## Setup\n\n## Setup\n\nSetext\n------\n")
    _page(tmp_path, "docs/data.json", "{}")
    _page(tmp_path, "tools/x.py", "a\nb\n")
    page = _page(
        tmp_path,
        "docs/page.md",
        "# Page\n\n## Here & there\n\n"
        "[ok](other.md) [ok](other.md#setup) [ok](other.md#setup-1) [ok](other.md#setext)\n"
        "[ok](#here--there) ![ok](data.json) [ok](../tools/x.py#L2) [ok](https://x.org/a#b)\n"
        '[ok](data.json#/not/checked/here) <a id="top"></a> [ok](#top) [ok](../docs/)\n'
        "`[not a link](nowhere.md)`\n\n```bash\n[not a link](nowhere.md)\n```\n"
        "[bad](missing.md)\n"
        "[bad](other.md#nowhere)\n"
        "[bad](#setup)\n"
        "[bad](../tools/x.py#L3)\n"
        "[bad](/docs/other.md)\n"
        "[bad](../../outside.md)\n"
        "[ref]: missing-ref.md\n"
        "a link whose text runs\n[over two\nlines](wrapped.md)\n"  # 22
        "[not\n\na link](across-a-paragraph.md)\n",
    )
    problems = check_docs.links(page, root=tmp_path)
    lines = [int(p.split(":")[1]) for p in problems]
    assert lines == [13, 14, 15, 16, 17, 18, 19, 22], _shown(problems)
    assert "no such file" in problems[0] and "#nowhere" in problems[1]
    assert "absolute" in problems[4] and "outside" in problems[5]


def test_every_link_and_anchor_in_the_documentation_resolves():
    problems = [p for page in check_docs.markdown_pages() for p in check_docs.links(page)]
    assert not problems, _shown(problems)


# ---- (c) command lines -----------------------------------------------------------------------


def test_command_lines_parse_against_the_real_parser_or_are_named(tmp_path):
    page = _page(
        tmp_path,
        "README.md",
        "```bash\n"
        "python -m distcgan train --preset digits --data data/d.h5 --run runs/x\n"  # 2
        "mpiexec -n 2 .venv/bin/python -m mpi4py -m distcgan train --run $RUN --steps $STEPS \\\n"
        "    --preset $PRESET --data data/d.h5   # a comment\n"
        "$PY -m data_prep digits --out data/d.h5 --resolution 16 && python -m distcgan info x.h5\n"
        "python -m distcgan sample --run runs/x --per-class 10 --out s.h5 2>&1 | tee log\n"
        "PRESET=tiny distcgan supervise --run r -- mpiexec -n 2 python -m mpi4py -m distcgan \\\n"
        "    train --run r --resume\n"
        "python -m distcgan classifier train d.h5 --out c.pt > out.txt\n"
        "python -m distcgan train --help\n"
        "python -m distcgan train --run runs/x --no-such-flag\n"  # 11
        "python -m distcgan train --run runs/x --steps many\n"  # 12
        "python -m data_prep digits --out d.h5 --resolution 16 ...\n"  # 13
        "python -m distcgan frobnicate\n"  # 14
        "python -m distcgan classifier train d.h5\n"  # 15: no --out
        "PRESET=tiny distcgan supervise --run r -- python -m distcgan train --bad \\\n"  # 16
        "    --run r\n"
        "python -m data_prep digits --out 'unclosed\n"  # 18
        "```\n\n```python\npython -m distcgan frobnicate\n```\n"
        "```console\n$ distcgan status --run runs/x\ndistcgan status: done (exit 0)\n"
        "$ python -m distcgan status --run\n```\n"  # 27: --run needs its value
        "    python -m distcgan not-in-a-block\n",
    )
    problems = check_docs.commands(page)
    lines = [int(p.split(":")[1]) for p in problems]
    assert lines == [11, 12, 13, 14, 15, 16, 18, 27], _shown(problems)
    assert "--no-such-flag" in problems[0] and "many" in problems[1]
    assert "cannot split" in problems[-2]


def test_a_shell_word_is_taken_for_any_type_and_choice_but_a_literal_is_checked():
    assert check_docs.parse_problem("distcgan", ["train", "--run", "r", "--amp", "$AMP"]) is None
    assert check_docs.parse_problem("distcgan", ["train", "--run", "r", "--steps", "${N}0"]) is None
    assert check_docs.parse_problem("data_prep", ["$SOURCE", "--out", "o.h5"]) is None
    assert check_docs.parse_problem("data_prep", ["nosuch", "--out", "o.h5"]) is not None
    assert check_docs.parse_problem("distcgan", ["$COMMAND"]) is not None  # a command is literal


def test_every_command_line_in_the_documentation_parses():
    pages = check_docs.pages("README.md", "docs/**/*.md")
    problems = [p for page in pages for p in check_docs.commands(page)]
    assert not problems, _shown(problems)


# ---- (d) length, dates, commit ids -----------------------------------------------------------


def test_the_readme_is_at_most_250_lines():
    lines = len((REPO / "README.md").read_text().splitlines())
    assert lines <= 250, f"README.md has {lines} lines: move detail to docs/"


def test_dates_and_commit_ids_are_found_and_the_words_like_them_are_not(tmp_path):
    (tmp_path / "benchmarks" / "results" / "2026-11-28-h100-d").mkdir(parents=True)
    page = _page(
        tmp_path,
        "docs/page.md",
        "measured on 2026-11-28\n"  # 1
        "at commit 89d0041, see c6aad16a1b2\n"  # 2: two
        "[2026-11-28-h100-d](../benchmarks/results/2026-11-28-h100-d/README.md)\n"
        "`benchmarks/results/2026-11-27-pc32/` holds it\n"
        "deadbeef, facade, added, 1234567, 100000000, 1000e10, colour #a1b2c3d4, 0x7fffffff\n"
        "version 2.14.1, sha256 and a 64-hex checksum " + "ab12" * 16 + "\n"
        "2026-13-01 is no date; nor is 12026-11-28\n"
        "2026-11-29-no-such-record, but pt_inception-2015-12-05-6726825d.pth is a name\n",  # 8
    )
    problems = check_docs.dates_and_ids(page, root=tmp_path)
    assert [int(p.split(":")[1]) for p in problems] == [1, 2, 2, 8], _shown(problems)
    assert "89d0041" in problems[1] and "c6aad16a1b2" in problems[2]


def test_readme_and_docs_hold_no_date_and_no_commit_id_outside_the_studies():
    pages = check_docs.current_pages()
    assert REPO / "README.md" in pages
    assert not [p for p in pages if "studies" in p.parts]
    problems = [p for page in pages for p in check_docs.dates_and_ids(page)]
    assert not problems, _shown(problems)


# ---- (e) figures from JSON records -----------------------------------------------------------


def test_a_figure_is_checked_against_the_value_its_json_pointer_names(tmp_path):
    record = {"fused": {"imgs_per_s": 74630.4, "speedup": 1.2345}, "runs": [{"p": 0.125}]}
    _page(tmp_path, "r/x.json", json.dumps(record))
    _page(tmp_path, "r/a~b.json", json.dumps({"a/b": 7, "m~n": 8}))
    page = _page(
        tmp_path,
        "README.md",
        "[74,630](r/x.json#/fused/imgs_per_s) [1.23](r/x.json#/fused/speedup) "
        "[12.5%](r/x.json#/runs/0/p) [7](r/a~b.json#/a~1b) [8](r/a~b.json#/m~0n)\n"
        "[74,631](r/x.json#/fused/imgs_per_s)\n"  # 2
        "[1.2](r/x.json#/fused/nothing)\n"  # 3
        "[fast](r/x.json#/fused/speedup)\n"  # 4
        "[1](r/x.json#/fused)\n"  # 5: not a number there
        "[1](r/gone.json#/a)\n"  # 6
        "[1.24](r/x.json#/fused/speedup)\n",  # 7
    )
    problems = check_docs.json_figures(page)
    assert [int(p.split(":")[1]) for p in problems] == [2, 3, 4, 5, 6, 7], _shown(problems)
    assert "74630.4" in problems[0] and "'nothing'" in problems[1]


def test_every_figure_linked_to_a_json_record_is_the_records_value():
    problems = [p for page in check_docs.markdown_pages() for p in check_docs.json_figures(page)]
    assert not problems, _shown(problems)


# ---- (f) cited files -------------------------------------------------------------------------


def test_cited_paths_that_are_missing_are_named_and_outputs_and_placeholders_are_not(tmp_path):
    _page(tmp_path, "distcgan/train/loop.py", "")
    _page(tmp_path, "distcgan/out.py", 'NAME = "compare.md"\n')
    _page(tmp_path, "jobs/slurm.sbatch", "")
    page = _page(
        tmp_path,
        "Makefile",
        "# see jobs/slurm.sbatch and train/loop.py and loop.py, then compare.md\n"
        "# RUN/config.json, class_XXX/metrics.jsonl, FILE.json, evaluate-NETWORK.json\n"
        "# runs/demo/samples.png, data/d.h5, $(RUN)-export/config.json, --out grid.png\n"
        "# tests/test_<module>.py\n"
        "# https://example.org/KINDS.md\n"
        "# KINDS.md and docs/gone.md and jobs/gone.lsf\n",
    )
    problems = check_docs.cited_files(page, root=tmp_path)
    assert [p.split(": ")[1] for p in problems] == ["KINDS.md", "docs/gone.md", "jobs/gone.lsf"]


def test_every_file_the_readme_makefile_and_pyproject_cite_exists():
    pages = [REPO / name for name in ("README.md", "Makefile", "pyproject.toml")]
    problems = [p for page in pages for p in check_docs.cited_files(page)]
    assert not problems, _shown(problems)

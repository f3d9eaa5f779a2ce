"""Write the documentation that comes from the code (`make docs`):

- docs/cli/<command>.txt: each command's `--help` at 100 columns: `python -m distcgan` and every
  subcommand (nested ones as `classifier-train.txt`), `python -m data_prep` (its sources are
  listed in its own help) and `python jobs/weak_scaling.py`;
- the preset table in docs/training.md, between the lines `<!-- presets:begin -->` and
  `<!-- presets:end -->`: one row per preset of distcgan/config.py, one column per field whose
  value differs between presets.

    .venv/bin/python tools/gen_docs.py           # write what is out of date
    .venv/bin/python tools/gen_docs.py --check   # only list it (exit 1 if anything is)

The output depends only on the code (and the Python version, whose argparse lays out the help),
so tests/test_docs.py regenerates it in memory and fails when a committed file differs.
Leaves out: checking the pages (tools/check_docs.py).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import runpy
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run as a script from anywhere: distcgan and data_prep from here

CLI_DIR = REPO / "docs" / "cli"
TRAINING = REPO / "docs" / "training.md"
BEGIN, END = "<!-- presets:begin -->", "<!-- presets:end -->"
COLUMNS = "100"  # the terminal width argparse lays the help out for


@contextlib.contextmanager
def _fixed_terminal() -> Iterator[None]:
    """argparse wraps to $COLUMNS (shutil.get_terminal_size); colour would add escape codes."""
    saved = {k: os.environ.get(k) for k in ("COLUMNS", "NO_COLOR")}
    os.environ.update(COLUMNS=COLUMNS, NO_COLOR="1")
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {name: p for a in actions for name, p in a.choices.items()}


def _walk(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> Iterator[tuple]:
    """(command words, parser) for `parser` and every subcommand under it, in declared order."""
    yield words, parser
    for name, sub in _subparsers(parser).items():
        yield from _walk(sub, (*words, name))


def _page(command: str, text: str) -> str:
    """The file: the command that prints it, then its output (no trailing blanks)."""
    lines = [f"$ {command} --help", ""] + [line.rstrip() for line in text.splitlines()]
    return "\n".join(lines).rstrip("\n") + "\n"


def _script_help(path: Path) -> str:
    """What `python PATH --help` prints, run in this process (argparse names it by argv[0])."""
    out = io.StringIO()
    saved = sys.argv
    sys.argv = [str(path), "--help"]
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv = saved
    return out.getvalue()


def cli_pages() -> dict[str, str]:
    """File name under docs/cli/ -> its text."""
    from data_prep.__main__ import build_parser as data_prep_parser
    from distcgan.cli import build_parser

    pages: dict[str, str] = {}
    with _fixed_terminal():
        for words, parser in _walk(build_parser(), ()):
            name = "-".join(words) or "distcgan"
            command = " ".join(("python -m distcgan", *words))
            pages[f"{name}.txt"] = _page(command, parser.format_help())
        pages["data_prep.txt"] = _page("python -m data_prep", data_prep_parser().format_help())
        script = REPO / "jobs" / "weak_scaling.py"
        pages["weak_scaling.txt"] = _page("python jobs/weak_scaling.py", _script_help(script))
    return pages


def _cell(value: object) -> str:
    text = " ".join(str(value).split())
    return text.replace("|", "\\|")


def preset_table() -> str:
    """The markdown between the markers: a row per preset, a column per field that differs."""
    import dataclasses

    from distcgan.config import PRESETS

    configs = {name: make() for name, make in PRESETS.items()}
    values = [dataclasses.asdict(c) for c in configs.values()]
    differ = [k for k in values[0] if k != "preset" and len({repr(v[k]) for v in values}) > 1]
    head = ["preset", *(f"`--{k.replace('_', '-')}`" for k in differ), "what it is for"]
    rows = [
        "| " + " | ".join(head) + " |",
        "|" + "|".join(["---", *("--:" for _ in differ), "---"]) + "|",
    ]
    for (name, make), v in zip(PRESETS.items(), values):
        cells = [f"`{name}`", *(_cell(v[k]) for k in differ), _cell(make.__doc__ or "")]
        rows.append("| " + " | ".join(cells) + " |")
    note = (
        "The images' channels (1 or 3) come from the data file. [`train --help`](cli/train.txt) "
        "lists every setting; a `--config` file or a flag overrides the preset's value."
    )
    return "\n".join(["", *rows, "", *textwrap.wrap(note, 100), ""])


class MarkersMissing(Exception):
    """docs/training.md lacks the preset table's marker lines."""


def with_preset_table(page: str) -> str:
    """`page` with the text between its marker lines replaced by the current table."""
    lines = page.split("\n")
    if lines.count(BEGIN) != 1 or lines.count(END) != 1 or lines.index(BEGIN) > lines.index(END):
        raise MarkersMissing(
            f"{TRAINING.relative_to(REPO)} needs one line {BEGIN} and, below it, one line {END} "
            "where the preset table goes: add them, then run make docs"
        )
    start, end = lines.index(BEGIN), lines.index(END)
    return "\n".join([*lines[: start + 1], *preset_table().split("\n"), *lines[end:]])


def expected() -> dict[Path, str]:
    """Every generated file (a path under the repository) -> the text it should hold; raises
    MarkersMissing (after nothing is written) when docs/training.md has no place for the table."""
    files = {CLI_DIR / name: text for name, text in cli_pages().items()}
    files[TRAINING] = with_preset_table(TRAINING.read_text() if TRAINING.exists() else "")
    return files


def stale(files: dict[Path, str]) -> list[Path]:
    """The files of `files` whose text differs, then any docs/cli/*.txt that `files` lacks (a
    command that is gone), when `files` holds the command pages."""
    differ = [p for p, text in files.items() if not p.is_file() or p.read_text() != text]
    if not any(p.parent == CLI_DIR for p in files):
        return differ
    return differ + [p for p in sorted(CLI_DIR.glob("*.txt")) if p not in files]


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def update(files: dict[Path, str], check: bool) -> list[Path]:
    """Write (or, with `check`, only find) what is out of date; each path is printed."""
    todo = stale(files)
    for path in todo:
        rel = path.relative_to(REPO) if path.is_relative_to(REPO) else path
        if check:
            print(f"out of date: {rel}")
        elif path in files:
            write_atomic(path, files[path])
            print(f"wrote {rel}")
        else:
            path.unlink()
            print(f"removed {rel} (no such command)")
    return todo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="list what is out of date only")
    args = parser.parse_args(argv)
    todo = update({CLI_DIR / name: text for name, text in cli_pages().items()}, args.check)
    try:
        table = with_preset_table(TRAINING.read_text() if TRAINING.exists() else "")
    except MarkersMissing as exc:  # the command pages are written all the same
        print(f"gen_docs: error: {exc}", file=sys.stderr)
        return 2
    todo += update({TRAINING: table}, args.check)
    return 1 if args.check and todo else 0


if __name__ == "__main__":
    sys.exit(main())

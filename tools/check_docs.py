"""Checks that keep the documentation true, one function per rule, each returning its problems as
"FILE:LINE: what is wrong" lines (tests/test_docs.py asserts there are none):

- `links`: every relative link and #anchor in a markdown page resolves (GitHub's anchors);
- `commands`: every `python -m distcgan ...` / `python -m data_prep ...` in a ```bash block
  parses against the real argument parser (nothing is run);
- `dates_and_ids`: no YYYY-MM-DD date and no commit id;
- `json_figures`: a `[74,630](FILE.json#/a/b)` link shows the number at that JSON pointer;
- `cited_files`: every repository path a file names exists.

    .venv/bin/python tools/check_docs.py     # every rule over the files it covers

Leaves out: the generated pages (tools/gen_docs.py) and what the prose says.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shlex
import sys
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# ---- reading markdown ------------------------------------------------------------------------

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)")


def blocks(text: str) -> Iterator[tuple[int, str, str | None]]:
    """(line number, line, language of the fenced block it is in or None outside) per line; the
    fence lines themselves are in their block (language "" when none is given)."""
    fence: tuple[str, str] | None = None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence = (m.group(1), m.group(2).lower())
            yield n, line, fence[1]
        elif fence is not None:
            yield n, line, fence[1]
            if m and m.group(1)[0] == fence[0][0] and len(m.group(1)) >= len(fence[0]):
                if not line.strip().strip(fence[0][0]):
                    fence = None
        else:
            yield n, line, None


def prose(text: str) -> Iterator[tuple[int, str]]:
    """The lines outside code blocks, each with its inline code spans blanked out."""
    for n, line, lang in blocks(text):
        if lang is None:
            yield n, re.sub(r"(`+)(?:(?!\1).)+?\1", lambda m: " " * len(m.group()), line)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text as shown, lowercased, punctuation dropped (but - and
    _), each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    text = re.sub(r"(\*\*|__|\*)(.+?)\1", r"\2", text)
    kept = [
        c
        for c in text.strip().lower()
        if c in "-_ " or c.isalnum() or unicodedata.category(c)[0] in "LNM"
    ]
    return "".join(kept).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every #anchor a page has: its headings' (numbered -1, -2... when repeated) and HTML ids."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    lines = [(n, line) for n, line, lang in blocks(text) if lang is None]
    for i, (_, line) in enumerate(lines):
        m = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        under = lines[i + 1][1] if i + 1 < len(lines) else ""
        if not m and line.strip() and re.match(r"^ {0,3}(=+|-+)\s*$", under):
            m = re.match(r"^\s*(.*?)\s*$", line)  # a setext heading
        if m:
            base = slug(m.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", line))
    return found


# [text](target) or ![alt](target); the text may run over lines of one paragraph.
LINK = re.compile(
    r"(!?)\[((?:[^\[\]\n]|\n(?![ \t]*\n)|\[[^\]\n]*\])*)\]\(\s*<?([^()\s<>]*(?:\([^()\s]*\))?)>?"
)
REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")


def links_of(text: str) -> list[tuple[int, str, str]]:
    """(line, link text, target) of every inline link, image and reference definition, in the
    order of their lines (the line of a link is its target's)."""
    found: list[tuple[int, str, str]] = []
    kept = dict(prose(text))
    full = "\n".join(kept.get(n, "") for n in range(1, len(text.splitlines()) + 1))
    for m in LINK.finditer(full):
        at = full.count("\n", 0, m.start(3)) + 1
        found.append((at, " ".join(m.group(2).split()), m.group(3)))
    for n, line in kept.items():
        ref = REFDEF.match(line)
        if ref:
            found.append((n, "", ref.group(1)))
        found += [(n, "", t) for t in re.findall(r"\b(?:href|src)=\"([^\"]+)\"", line)]
    return sorted(found, key=lambda f: f[0])


def is_external(target: str) -> bool:
    return bool(re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I))


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


# ---- links and anchors -----------------------------------------------------------------------


def link_problem(page: Path, target: str, root: Path = REPO) -> str | None:
    """What is wrong with one link of `page`, or None when it resolves."""
    if not target:
        return "an empty link target"
    if is_external(target):
        return None
    path_part, _, anchor = target.partition("#")
    if anchor.startswith("/"):
        return None  # a JSON pointer: json_figures follows it
    if path_part.startswith("/"):
        return f"{target}: an absolute link; write it relative to {_rel(page.parent) or '.'}"
    dest = (page.parent / path_part).resolve() if path_part else page
    if root.resolve() not in (dest, *dest.parents):
        return f"{target}: points outside the repository"
    if not dest.exists():
        return f"{target}: no such file or folder"
    if not anchor:
        return None
    if dest.suffix == ".md":
        if anchor not in anchors(dest.read_text()):
            return f"{target}: {_rel(dest)} has no heading whose anchor is #{anchor}"
        return None
    m = re.fullmatch(r"L(\d+)(?:-L(\d+))?", anchor)
    lines = len(dest.read_text().splitlines()) if dest.is_file() else 0
    if m and max(int(g) for g in m.groups() if g) <= lines:
        return None
    return f"{target}: #{anchor} is not a line (#L1 to #L{lines}) of {_rel(dest)}"


def links(page: Path, root: Path = REPO) -> list[str]:
    text = page.read_text()
    return [
        f"{_rel(page)}:{n}: {problem}"
        for n, _, target in links_of(text)
        if (problem := link_problem(page, target, root))
    ]


# ---- dates and commit ids --------------------------------------------------------------------

DATE = re.compile(r"(?<![\w-])(\d{4})-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])(?!\d)")
HEX = re.compile(r"(?<![\w#.-])(?<!0x)[0-9a-f]{7,40}(?![\w])")
RECORD = re.compile(r"benchmarks/results/[\w.-]+")  # a dated record's folder is named by its date


def _not_an_id(word: str) -> bool:
    """A hex-looking word that is not a commit id: no digit or no letter (1234567, deadbeef,
    facade), or a number in e-notation (1000e10)."""
    has_digit = any(c.isdigit() for c in word)
    has_letter = any(c in "abcdef" for c in word)
    return not (has_digit and has_letter) or bool(re.fullmatch(r"\d+e\d+", word))


def _record_names(root: Path) -> set[str]:
    results = root / "benchmarks" / "results"
    return {p.name for p in results.iterdir() if p.is_dir()} if results.is_dir() else set()


def dates_and_ids(page: Path, root: Path = REPO) -> list[str]:
    """Every YYYY-MM-DD date and commit id in `page`, but in link targets, record paths and the
    names of the records under benchmarks/results/ (2026-11-28-h100-d: a name, not a date)."""
    records = _record_names(root)
    out = []
    for n, line in enumerate(page.read_text().splitlines(), 1):
        line = re.sub(r"\]\([^)]*\)", "]()", line)  # link targets
        line = RECORD.sub("", line)
        line = re.sub(r"[\w.-]+", lambda m: "" if m.group() in records else m.group(), line)
        for m in DATE.finditer(line):
            out.append(
                f"{_rel(page)}:{n}: a date ({m.group()}): say what holds now, or link the record"
            )
        for m in HEX.finditer(line):
            if not _not_an_id(m.group()):
                out.append(f"{_rel(page)}:{n}: a commit id ({m.group()}): link the record instead")
    return out


# ---- figures that cite a JSON record ---------------------------------------------------------

NUMBER = re.compile(r"([-+]?)(\d[\d,]*)(?:\.(\d+))?(%?)")


def follow_pointer(doc: object, pointer: str) -> object:
    """The value at an RFC 6901 JSON pointer ("/a/0/b"); KeyError naming the part not found."""
    for raw in pointer.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        elif isinstance(doc, dict) and part in doc:
            doc = doc[part]
        else:
            raise KeyError(part)
    return doc


def figure_problem(page: Path, shown: str, target: str) -> str | None:
    """Whether the number `shown` (commas, a sign and % allowed) is the value at `target`
    (FILE.json#/pointer) rounded to the decimals shown; None when it is."""
    path_part, _, pointer = target.partition("#")
    dest = page.parent / path_part
    if not dest.is_file():
        return f"{target}: no such file"
    try:
        value = follow_pointer(json.loads(dest.read_text()), pointer)
    except KeyError as exc:
        return f"{target}: {_rel(dest)} has no {exc.args[0]!r} on that path"
    except json.JSONDecodeError as exc:
        return f"{target}: {_rel(dest)} is not JSON ({exc})"
    m = NUMBER.fullmatch(shown.strip().strip("*`"))
    if not m:
        return f"[{shown}]({target}): the link text is not a number"
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return f"[{shown}]({target}): the value there is {value!r}, not a number"
    sign, whole, decimals, percent = m.groups()
    number = float(sign + whole.replace(",", "") + ("." + decimals if decimals else ""))
    half = 0.5 * 10 ** -len(decimals or "") * (1 + 1e-9)
    candidates = [value, value * 100] if percent else [value]
    if any(abs(number - v) <= half for v in candidates):
        return None
    return f"[{shown}]({target}): the record says {value!r}"


def json_figures(page: Path) -> list[str]:
    """Every link to a JSON pointer (FILE.json#/a/b) in `page`, checked by figure_problem."""
    out = []
    for n, shown, target in links_of(page.read_text()):
        if is_external(target) or "#/" not in target:
            continue
        problem = figure_problem(page, shown, target)
        if problem:
            out.append(f"{_rel(page)}:{n}: {problem}")
    return out


# ---- command lines in ```bash blocks ---------------------------------------------------------

SHELLS = ("bash", "sh", "shell", "console", "zsh")
PROGS = ("distcgan", "data_prep")
OPERATOR = re.compile(r"^[();<>|&]+$")


PROMPT = re.compile(r"^\s*\$\s+")


def _shell_blocks(text: str) -> Iterator[list[tuple[int, str]]]:
    """The lines of each shell block, without its fences."""
    block: list[tuple[int, str]] = []
    for n, line, lang in blocks(text):
        if lang in SHELLS and not FENCE.match(line):
            block.append((n, line))
        elif block:
            yield block
            block = []
    if block:
        yield block


def shell_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, the command with its continuation lines joined) per command line of
    the shell blocks. Once a block has shown a `$ ` prompt, a line without one is what the
    command printed, not a command."""
    for block in _shell_blocks(text):
        prompted, start = False, 0
        parts: list[str] = []
        for n, line in block:
            if not parts:
                if prompted and not PROMPT.match(line):
                    continue
                prompted = prompted or bool(PROMPT.match(line))
                start, line = n, PROMPT.sub("", line)
            if line.rstrip().endswith("\\"):
                parts.append(line.rstrip()[:-1])
                continue
            yield start, " ".join([*parts, line])
            parts = []
        if parts:
            yield start, " ".join(parts)


def _segments(tokens: list[str]) -> Iterator[list[str]]:
    """The simple commands of a tokenized line (split at |, &&, ;, redirections...)."""
    current: list[str] = []
    for i, tok in enumerate(tokens):
        if OPERATOR.match(tok):
            if tok[0] in "<>" and current and current[-1].isdigit():
                current.pop()  # the 2 of 2>&1
            yield current
            current = []
            if tok[0] in "<>" and i + 1 < len(tokens):
                tokens[i + 1] = ";"  # the redirection's file is no argument
            continue
        current.append(tok)
    yield current


def invocations(line: str) -> Iterator[tuple[str, list[str]]]:
    """(program, its arguments) of each `python ... -m distcgan|data_prep ARGS` or `distcgan ARGS`
    in one shell line; ValueError when the line does not split as the shell would."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    for seg in _segments(list(lex)):
        while seg and re.match(r"^\w+=", seg[0]):
            seg = seg[1:]  # VAR=value before the command
        for i, tok in enumerate(seg):
            if tok == "-m" and i + 1 < len(seg) and seg[i + 1] in PROGS:
                yield seg[i + 1], seg[i + 2 :]
            elif Path(tok).name == "distcgan" and (i == 0 or seg[i - 1] == "--"):
                yield "distcgan", seg[i + 1 :]


def _is_shell_word(value: str) -> bool:
    return "$" in value


class _AnyShellWord(list):
    """Choices that also take a word the shell expands ($PRESET): its value is not known here."""

    def __contains__(self, value: object) -> bool:
        return (isinstance(value, str) and _is_shell_word(value)) or super().__contains__(value)


def _lenient(convert: Callable[[str], object]) -> Callable[[str], object]:
    def convert_or_keep(value: str) -> object:
        return value if _is_shell_word(value) else convert(value)

    convert_or_keep.__name__ = getattr(convert, "__name__", "value")  # argparse's error says it
    return convert_or_keep


def _accept_shell_words(parser: argparse.ArgumentParser) -> None:
    """Let every option of `parser` and its subcommands take $VARIABLES for any type or choice."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _accept_shell_words(sub)
            continue
        if callable(action.type):
            action.type = _lenient(action.type)
        if action.choices is not None:
            action.choices = _AnyShellWord(action.choices)


def parser_of(prog: str) -> argparse.ArgumentParser:
    if prog == "data_prep":
        from data_prep.__main__ import build_parser as data_prep_parser

        parser = data_prep_parser()
    else:
        from distcgan.cli import build_parser

        parser = build_parser()
    _accept_shell_words(parser)
    return parser


def parse_problem(prog: str, args: list[str]) -> str | None:
    """Why `args` do not parse as `prog`'s command line, or None when they do (--help included)."""
    from distcgan.errors import AgreedError

    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
            parser_of(prog).parse_args(args)
    except AgreedError as exc:
        return str(exc)
    except SystemExit as exc:
        lines = said.getvalue().strip().splitlines()
        return None if not exc.code else (lines[-1] if lines else f"exit {exc.code}")
    return None


def commands(page: Path) -> list[str]:
    """Every distcgan and data_prep command line of `page`'s shell blocks, parsed."""
    out = []
    for n, line in shell_lines(page.read_text()):
        try:
            found = list(invocations(line))
        except ValueError as exc:
            out.append(f"{_rel(page)}:{n}: the shell cannot split this line ({exc})")
            continue
        for prog, args in found:
            problem = parse_problem(prog, args)
            if problem:
                out.append(f"{_rel(page)}:{n}: {prog} {' '.join(args)}: {problem}")
    return out


# ---- files a page cites ----------------------------------------------------------------------

EXTENSIONS = "py|md|sh|toml|yml|yaml|lsf|sbatch|cff|cfg|ini|txt|json|csv|png|html|in"
TOP = "distcgan|data_prep|tests|jobs|benchmarks|docs|tools|\\.ci"
PATH = re.compile(
    rf"(?<![\w$/.~*-])(?:(?:{TOP})/[\w./-]*\w/?|(?:[\w.-]+/)*[\w-][\w.-]*\.(?:{EXTENSIONS}))"
    r"(?![\w/*<-])"
)
NOT_HERE = ("runs/", "data/", ".venv", ".whl/", "tmp/")  # what commands write, not repository files
IGNORED = {".git", ".mypy_cache", ".ruff_cache", "runs", "data", "__pycache__"}  # and .venv*


def _repo_files(root: Path) -> list[Path]:
    """Every file and folder under `root` but the virtual environments, caches and outputs."""
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in IGNORED and not d.startswith(".venv")]
        found += [Path(folder, n) for n in (*dirs, *names)]
    return found


# Capitalised words that stand for a user's file (FILE.json, OUT.h5), unlike README.md or LICENSE.
PLACEHOLDERS = {"FILE", "OUT", "DATA", "NAME", "PATH", "DIR", "RUN", "MODEL", "CONFIG", "SAMPLES"}


def _placeholder(path: str) -> bool:
    """A path that stands for many (RUN/config.json, class_XXX/, FILE.json, launches/NNN.json)."""
    *folders, name = path.rstrip("/").split("/")
    *words, _ = re.split(r"[._-]", name)
    mixed = any(w.isupper() and len(w) > 1 for w in words) and any(w.islower() for w in words)
    return (
        any(f.isupper() for f in folders)
        or name.split(".")[0] in PLACEHOLDERS
        or mixed  # evaluate-NETWORK.json
        or re.search(r"XXX|NNN|<", path) is not None
    )


def _python_strings(root: Path) -> str:
    """The text of the code that writes files (the names it writes are output, not citations)."""
    return "\n".join(
        p.read_text()
        for top in ("distcgan", "data_prep", "jobs", "benchmarks")
        for p in sorted((root / top).rglob("*.py"))
    )


def cited_paths(text: str) -> Iterator[tuple[int, str]]:
    """(line, path) of every repository path `text` names, URLs and placeholders left out."""
    for n, line in enumerate(text.splitlines(), 1):
        line = re.sub(r"\b[a-z][a-z0-9+.-]*://\S+", "", line)
        line = re.sub(r"\S*\$\S*", "", line)  # a word with a variable in it ($(RUN)/x.json)
        line = re.sub(r"(?:--[\w-]+[ =]|-o |>\s*)\S+", "", line)  # an option's value: the user's
        for m in PATH.finditer(line):
            path = m.group().rstrip(".")
            if not path.startswith(NOT_HERE) and not _placeholder(path):
                yield n, path


def cited_files(page: Path, root: Path = REPO) -> list[str]:
    """Every path `page` names that the repository lacks. A bare name (KINDS.md) may be any file
    of that name in the repository, or a file the code writes (compare.md)."""
    files = _repo_files(root)
    names = {p.name for p in files}
    code = None
    out = []
    for n, path in sorted(set(cited_paths(page.read_text()))):
        if (root / path).exists() or (page.parent / path).exists():
            continue
        if "/" not in path:
            code = _python_strings(root) if code is None else code
            if path in names or re.search(rf"[\"'/]{re.escape(path)}[\"']", code):
                continue
        elif any(str(p).endswith("/" + path.rstrip("/")) for p in files):
            continue  # train/loop.py: the tail of distcgan/train/loop.py
        out.append(f"{_rel(page)}:{n}: {path}: no such file in the repository")
    return out


# ---- which files each rule covers ------------------------------------------------------------


def pages(*patterns: str, root: Path = REPO) -> list[Path]:
    return sorted({p for pattern in patterns for p in root.glob(pattern) if p.is_file()})


def markdown_pages(root: Path = REPO) -> list[Path]:
    """README, CHANGELOG, docs/ and the records' index: the pages whose links must resolve."""
    return pages(
        "README.md", "CHANGELOG.md", "docs/**/*.md", "benchmarks/results/INDEX.md", root=root
    )


def current_pages(root: Path = REPO) -> list[Path]:
    """The pages that say what holds now: no dates, no commit ids (the studies may have both)."""
    found = pages("README.md", "docs/**/*.md", "docs/**/*.txt", root=root)
    return [p for p in found if "studies" not in p.relative_to(root).parts]


RULES: dict[str, tuple[Callable[[Path], list[str]], Callable[[], list[Path]]]] = {
    "links": (links, markdown_pages),
    "commands": (commands, lambda: pages("README.md", "docs/**/*.md")),
    "dates_and_ids": (dates_and_ids, current_pages),
    "json_figures": (json_figures, markdown_pages),
    "cited_files": (cited_files, lambda: pages("README.md", "Makefile", "pyproject.toml")),
}


def main() -> int:
    sys.path.insert(0, str(REPO))
    problems = [p for check, covered in RULES.values() for page in covered() for p in check(page)]
    lines = len((REPO / "README.md").read_text().splitlines())
    if lines > 250:
        problems.append(f"README.md: {lines} lines, more than 250")
    print("\n".join(problems) or "no problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

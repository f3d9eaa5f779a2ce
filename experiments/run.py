"""Run one experiment arm: the `distcgan compare` (or test loop) command lines an arm file names,
one a seed, resumably.

    python experiments/run.py ARM [--out DIR] [--seeds S ...] [--dry-run]

ARM is a name under experiments/arms/ (or a path to such a JSON file). Each seed's run goes to
DIR/NAME (NAME from the arm's "name", default DIR: runs/ in this checkout), its output appended to
DIR/NAME.log. A run whose compare.json exists is skipped; a run whose folder exists is resumed
(`--resume`), so rerunning after a stop or a failure carries on where it was. `--dry-run` prints
the command lines and runs nothing. A failed run stops the runner with one line naming the run
and its log (exit 1).

An arm file is a JSON object: "about" (one line), "record" (its results folder), "command"
("compare" or "pytest"), "args" (the command's arguments in order, one string of shell words;
"{seed}", "{out}" and "{data}" are filled in), and for compare "name" (the run folder, "{seed}"
filled in) and "seeds"; for pytest "python", "env" and "repeat" (the loop runs the tests that
many times and prints the last line of each run).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ARMS = REPO / "experiments" / "arms"
PROG = "run.py"
COMMANDS = ("compare", "pytest")
REQUIRED = {"compare": ("about", "record", "command", "args", "name"), "pytest": ()}
REQUIRED["pytest"] = ("about", "record", "command", "args", "python", "repeat")
OPTIONAL = {"compare": ("seeds",), "pytest": ("env",)}


class Refused(Exception):
    """Bad input: said in one line, exit 2."""


@dataclass
class Arm:
    name: str
    command: str
    args: list[str]
    run_name: str = ""
    seeds: list[int] = field(default_factory=list)
    python: str = ""
    env: dict[str, str] = field(default_factory=dict)
    repeat: int = 1


def arm_names() -> list[str]:
    return sorted(p.stem for p in ARMS.glob("*.json"))


def _read(arm: str) -> tuple[str, dict]:
    path = Path(arm) if arm.endswith(".json") else ARMS / f"{arm}.json"
    if not path.is_file():
        raise Refused(
            f"no arm {arm!r}: name one of experiments/arms/*.json ({', '.join(arm_names())})"
        )
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise Refused(f"{path} is not JSON ({exc}): fix the file") from None
    if not isinstance(doc, dict):
        raise Refused(f'{path} is not a JSON object: write the arm as {{"command": ...}}')
    return str(path), doc


def _words(path: str, value: object) -> list[str]:
    """The arm's "args": one string of shell words."""
    if not isinstance(value, str):
        raise Refused(f'{path}: "args" must be one string of arguments, e.g. "--steps 900"')
    try:
        return shlex.split(value)
    except ValueError as exc:
        raise Refused(
            f'{path}: "args" cannot be split into words ({exc}): fix its quotes'
        ) from None


def _check_keys(path: str, doc: dict) -> str:
    command = doc.get("command")
    if command not in COMMANDS:
        raise Refused(f'{path}: "command" is {command!r}: set it to one of {", ".join(COMMANDS)}')
    known = REQUIRED[command] + OPTIONAL[command]
    for key in doc:
        if key not in known:
            raise Refused(
                f"{path}: unknown key {key!r} for a {command} arm: the keys are {', '.join(known)}"
            )
    for key in REQUIRED[command]:
        if key not in doc:
            raise Refused(f'{path}: "{key}" is missing: a {command} arm needs {", ".join(known)}')
    return command


def load(arm: str) -> Arm:
    """The arm `arm` (a name under experiments/arms/ or a .json path), checked."""
    path, doc = _read(arm)
    command = _check_keys(path, doc)
    args = _words(path, doc["args"])
    if command == "pytest":
        env = doc.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise Refused(f'{path}: "env" must be an object of strings, e.g. {{"A": "1"}}')
        repeat = doc["repeat"]
        if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
            raise Refused(f'{path}: "repeat" is {repeat!r}: give a whole number of runs, e.g. 20')
        stem, python = Path(path).stem, str(doc["python"])
        return Arm(stem, command, args, python=python, env=env, repeat=repeat)
    seeds = doc.get("seeds", [])
    if not isinstance(seeds, list) or not all(type(s) is int for s in seeds):
        raise Refused(f'{path}: "seeds" must be a list of whole numbers, e.g. [0, 1, 2, 3, 4]')
    if not isinstance(doc["name"], str) or not doc["name"]:
        raise Refused(
            f'{path}: "name" must be the run folder\'s name, e.g. "gan32x3-none-s{{seed}}"'
        )
    if ("{seed}" in doc["name"]) != bool(seeds):
        raise Refused(f'{path}: "name" has "{{seed}}" exactly when "seeds" lists seeds: fix one')
    return Arm(Path(path).stem, command, args, run_name=str(doc["name"]), seeds=seeds)


def with_settings(arm: Arm, settings: list[str]) -> Arm:
    """The arm with each FLAG=VALUE of --set replacing the value that follows FLAG in its args."""
    args = list(arm.args)
    for setting in settings:
        flag, eq, value = setting.partition("=")
        flag = flag if flag.startswith("-") else f"--{flag}"
        given = [
            a for i, a in enumerate(args[:-1]) if a.startswith("--") and args[i + 1][:2] != "--"
        ]
        if not eq or flag not in given:
            raise Refused(
                f"--set {setting}: give FLAG=VALUE for a flag the arm gives a value "
                f"({', '.join(given)})"
            )
        args[args.index(flag) + 1] = value
    arm.args = args
    return arm


def prefix(core: str | None, nice: int | None) -> list[str]:
    return (["taskset", "-c", core] if core else []) + (["nice", "-n", str(nice)] if nice else [])


@dataclass
class Run:
    """One seed's run: its folder, log and command line; done when its compare.json exists."""

    seed: int | None
    folder: Path
    argv: list[str]

    @property
    def log(self) -> Path:
        return self.folder.with_name(self.folder.name + ".log")

    @property
    def done(self) -> bool:
        return (self.folder / "compare.json").is_file()


def runs(arm: Arm, opts: argparse.Namespace) -> list[Run]:
    """The compare arm's runs, one a seed, each with --resume where its folder exists."""
    seeds: list[int | None] = list(opts.seeds if opts.seeds is not None else arm.seeds)
    if opts.seeds is not None and not arm.seeds:
        raise Refused(f"--seeds: arm {arm.name} runs no seeds of its own: leave --seeds out")
    out = []
    for seed in seeds or [None]:
        folder = opts.out / arm.run_name.replace("{seed}", str(seed))
        fill = {"{seed}": str(seed), "{out}": str(folder), "{data}": opts.data}
        args = [_fill(a, fill) for a in arm.args]
        argv = prefix(opts.core, opts.nice) + [opts.python, "-m", "distcgan", "compare", *args]
        out.append(Run(seed, folder, argv + (["--resume"] if folder.is_dir() else [])))
    return out


def _fill(value: str, fill: dict[str, str]) -> str:
    for key, text in fill.items():
        value = value.replace(key, text)
    return value


def _now() -> str:
    return time.strftime("%H:%M:%S", time.gmtime())


def run_compare(arm: Arm, opts: argparse.Namespace) -> int:
    planned = runs(arm, opts)
    if opts.dry_run:
        for run in planned:
            print(f"# {run.folder.name}: done, skipped" if run.done else shlex.join(run.argv))
        return 0
    try:
        opts.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise Refused(
            f"cannot make --out {opts.out} ({exc.strerror}): give --out a writable folder"
        ) from None
    for run in planned:
        if run.done:
            print(f"{_now()} {run.folder.name}: done already, skipped", flush=True)
            continue
        print(f"{_now()} start {run.folder.name}", flush=True)
        with open(run.log, "a") as log:
            rc = subprocess.run(run.argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT).returncode
        if rc != 0:
            print(
                f"{PROG}: {arm.name} seed {run.seed} failed (exit {rc}): see {run.log}, "
                "then rerun to resume",
                file=sys.stderr,
            )
            return 1
        print(f"{_now()} done {run.folder.name}", flush=True)
    return 0


def run_pytest(arm: Arm, opts: argparse.Namespace) -> int:
    """The test loop: the tests `repeat` times, the last line of each run printed."""
    python = opts.python if opts.python_given else arm.python
    argv = prefix(opts.core, opts.nice) + [python, "-m", "pytest", *arm.args]
    env_words = [f"{k}={v}" for k, v in arm.env.items()]
    if opts.dry_run:
        print(f"# {arm.repeat} times, each run's last line printed")
        print(shlex.join(env_words + argv) if env_words else shlex.join(argv))
        return 0
    for i in range(1, arm.repeat + 1):
        done = subprocess.run(argv, cwd=REPO, env={**os.environ, **arm.env},
                              capture_output=True, text=True)  # fmt: skip
        tail = (done.stdout + done.stderr).rstrip("\n").rsplit("\n", 1)[-1]
        print(f"{_now()} {arm.name} run {i}: {tail}", flush=True)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("arm", help="a name under experiments/arms/, or a path to an arm's .json")
    p.add_argument("--out", type=Path, default=REPO / "runs", help="where the run folders go")
    p.add_argument("--seeds", type=int, nargs="+", help="these seeds instead of the arm's")
    p.add_argument("--data", help="the folder of the data and classifiers (default: data/)")
    p.add_argument("--python", help="the Python to run with (default: .venv's, else this one)")
    p.add_argument("--core", help="run pinned to these cores (taskset -c CORE)")
    p.add_argument("--nice", type=int, help="run at this niceness (nice -n N)")
    p.add_argument("--set", action="append", default=[], metavar="FLAG=VALUE",
                   help="replace the value the arm gives FLAG, e.g. --set threads=2")  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="print the command lines, run nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    opts = parser().parse_args(argv)
    venv = REPO / ".venv" / "bin" / "python"
    opts.python_given = opts.python is not None
    opts.python = opts.python or (str(venv) if venv.exists() else sys.executable)
    opts.out = opts.out.absolute()
    opts.data = str(Path(opts.data).absolute()) if opts.data else "data"
    try:
        arm = with_settings(load(opts.arm), opts.set)
        return run_pytest(arm, opts) if arm.command == "pytest" else run_compare(arm, opts)
    except Refused as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
